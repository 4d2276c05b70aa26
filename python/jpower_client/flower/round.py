"""One federated training round on the local agent: lease, mode, markers, metrics.

    from jpower_client import Client
    from jpower_client.flower import PowerRound, read_profile

    modes = read_profile("/var/lib/jpower/resnet18.csv")      # from `jpower profile --live`
    with Client(name="flower") as agent:
        with PowerRound(agent, modes, budget_for(config, "nano-1")) as rnd:
            for x, y in batches:
                with rnd.minibatch():
                    train_step(x, y)
        reply_metrics.update(rnd.metrics())

Entering the round takes a session lease on the board and pins the fastest profiled mode
within the budget (the one given, else the agent's configured budget, else none); each
minibatch is bracketed by the agent's markers, which meter it from the telemetry ring;
leaving the round releases the lease, restoring the board. A session lease also ends when
the connection closes or the process dies, so the board comes back even if the client
crashes mid-round. Standard library only.
"""

import contextlib
from typing import Dict, Iterator, List, Mapping, Optional

from .. import Client
from .modes import Mode, fastest_within

__all__ = ["PowerRound", "budget_for", "BUDGET_KEY", "NAME_RECORD"]

BUDGET_KEY = "jpower-budget-w"
"""The train config's budget for every client, W; `BUDGET_KEY + "." + name` is one client's."""
NAME_RECORD = "jpower"
"""The ConfigRecord of a train reply that names its client (`{"name": ...}`)."""


def budget_for(config: Mapping[str, object], name: str) -> Optional[float]:
    """The budget a round's train config hands the client called `name`: its own entry,
    else the fleet's, else None (then `PowerRound` takes the agent's configured budget)."""
    for key in (BUDGET_KEY + "." + name, BUDGET_KEY):
        if key in config:
            return float(config[key])  # type: ignore[arg-type]
    return None


class PowerRound:
    """A training round under a session lease at the fastest mode within `budget_w`."""

    def __init__(self, agent: Client, modes: List[Mode], budget_w: Optional[float] = None):
        self.agent = agent
        self.modes = modes
        self.budget_w = budget_w
        self.mode: Optional[Mode] = None
        self.energy_j = 0.0
        self.train_time_s = 0.0
        self.minibatches = 0

    def __enter__(self) -> "PowerRound":
        if self.budget_w is None:
            self.budget_w = self.agent.status()["budget_w"]
        self.mode = fastest_within(self.modes, self.budget_w)
        self.agent.set_mode(lease="session", **self.mode.knobs())
        return self

    def __exit__(self, *exc: object) -> None:
        self.agent.release()

    @contextlib.contextmanager
    def minibatch(self) -> Iterator[Dict[str, float]]:
        """Brackets one minibatch with the agent's markers; yields the dict that receives
        the agent's `minibatch_end` reply (duration_ms, mean_w, energy_j) when it ends."""
        self.minibatches += 1
        with self.agent.minibatch("train", self.minibatches) as mb:
            yield mb
        self.energy_j += mb["energy_j"]
        self.train_time_s += mb["duration_ms"] / 1e3

    def metrics(self) -> Dict[str, float]:
        """The round's metrics, numbers only (a Flower MetricRecord): `energy_j`,
        `train_time_s` and `mean_power_w` over the marked minibatches, the mode's knobs
        (`mode_cores`, `mode_cpu_khz`, `mode_gpu_hz`, `mode_emc_hz`), and `budget_w`
        (0 without a budget: Flower's strategies want the same keys from every client)."""
        if self.mode is None:
            raise RuntimeError("the round has not started")
        m = {
            "energy_j": self.energy_j,
            "train_time_s": self.train_time_s,
            "mean_power_w": self.energy_j / self.train_time_s if self.train_time_s > 0 else 0.0,
        }  # type: Dict[str, float]
        m.update({"mode_" + k: v for k, v in self.mode.knobs().items()})
        m["budget_w"] = self.budget_w or 0.0
        return m
