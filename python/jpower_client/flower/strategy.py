"""A Flower strategy wrapper that hands clients power budgets and aggregates their jpower
metrics per round. Needs flwr (the `flower` extra).

    from flwr.serverapp.strategy import FedAvg
    from jpower_client.flower.strategy import JpowerStrategy

    strategy = JpowerStrategy(FedAvg(fraction_evaluate=0.0), budgets={"nano": 4.0}, budget_w=20.0)
    result = strategy.start(grid=grid, initial_arrays=arrays, num_rounds=3)
    strategy.rounds        # per round: wall_s, the fleet's aggregate, each client's metrics

Budgets travel in the train config: `jpower-budget-w` for every client, and
`jpower-budget-w.<name>` for the client that calls itself `<name>` (`budget_for` reads them
on the client side). Each round's config carries the budgets as they are then: change
`budgets` or `budget_w` between rounds (spare the straggler), and the next round sends the
new ones alone. The inner strategy does everything else; its aggregated train metrics are
kept, with the fleet's (`metrics.aggregate`) over them. A reply without jpower's records (a
client that does not use `train_reply`) is left out of the fleet's figures, with a warning.
"""

import logging
import time
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from .metrics import aggregate
from .round import BUDGET_KEY, NAME_RECORD

# The metrics every jpower reply carries (`PowerRound.metrics`) that the fleet's need.
_NEEDED = ("energy_j", "train_time_s", "mean_power_w", "budget_w")

__all__ = ["JpowerStrategy"]


class JpowerStrategy(Strategy):
    """Wraps `inner`: budgets into each train round's config, jpower's metrics out."""

    def __init__(
        self,
        inner: Strategy,
        budgets: Optional[Mapping[str, float]] = None,
        budget_w: Optional[float] = None,
    ):
        self.inner = inner
        self.budgets = dict(budgets or {})
        self.budget_w = budget_w
        self.rounds: List[Dict[str, Any]] = []
        self._started = 0.0

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """The inner strategy's messages, with the budgets in force now in their config (a
        copy: Flower passes one config to every round, and the caller's stays as it was)."""
        config = ConfigRecord(
            {k: v for k, v in config.items() if k != BUDGET_KEY and not k.startswith(BUDGET_KEY + ".")}
        )
        if self.budget_w is not None:
            config[BUDGET_KEY] = float(self.budget_w)
        for name, watts in self.budgets.items():
            config[BUDGET_KEY + "." + name] = float(watts)
        self._started = time.monotonic()
        return self.inner.configure_train(server_round, arrays, config, grid)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> Tuple[Optional[ArrayRecord], Optional[MetricRecord]]:
        """The inner strategy's aggregate, its metrics overlaid with the fleet's (and
        `failed`, the replies that carried an error: a board whose client failed, its agent
        down among the causes, is logged, not silently left out); the round (its wall time
        from sending to the last reply, the fleet's aggregate, each client's metrics by
        name and the failed nodes) is appended to `self.rounds`."""
        wall_s = time.monotonic() - self._started
        replies = list(replies)
        arrays, metrics = self.inner.aggregate_train(server_round, replies)
        clients = {}
        failed = []
        for msg in replies:
            if msg.has_error():
                logging.warning(
                    "round %d: node %s failed (%s): left out of the fleet's metrics",
                    server_round,
                    msg.metadata.src_node_id,
                    msg.error.reason,
                )
                failed.append(msg.metadata.src_node_id)
                continue
            record = msg.content.metric_records.get("metrics")
            if NAME_RECORD not in msg.content or record is None or not all(k in record for k in _NEEDED):
                logging.warning(
                    "a reply from node %s carries no jpower metrics (use train_reply): left out of the fleet's",
                    msg.metadata.src_node_id,
                )
                continue
            name = str(msg.content[NAME_RECORD]["name"])
            if name in clients:
                # Two clients call themselves the same (and share a budget key): both are
                # kept, the second under its node, so the fleet's sums miss nobody.
                logging.warning("two clients call themselves %r: name each board apart", name)
                name = "{} (node {})".format(name, msg.metadata.src_node_id)
            clients[name] = dict(record)
        fleet = aggregate(list(clients.values())) if clients else {}
        fleet["failed"] = len(failed)
        self.rounds.append(
            {
                "round": server_round,
                "wall_s": wall_s,
                "fleet": fleet,
                "clients": clients,
                "failed": failed,
            }
        )
        merged = dict(metrics or {})
        merged.update(fleet)
        return arrays, MetricRecord(merged)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        return self.inner.configure_evaluate(server_round, arrays, config, grid)

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> Optional[MetricRecord]:
        return self.inner.aggregate_evaluate(server_round, replies)

    def summary(self) -> None:
        self.inner.summary()
