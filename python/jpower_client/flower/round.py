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
within the budget (the tighter of the one given and the agent's configured budget, else
none); each minibatch renews the lease (so a `lease_timeout_ms` in the agent's
configuration does not end it mid-round; a lease that ended anyway is taken again, and
counted) and is bracketed by the agent's markers, which meter it from the telemetry ring;
leaving the round releases the lease, restoring the board. A session lease also ends when
the connection closes or the process dies, so the board comes back even if the client
crashes mid-round; an agent that goes away mid-round is a `ConnectionError` that says so.
Standard library only.
"""

import contextlib
from typing import Dict, Iterator, List, Mapping, Optional

from .. import AgentError, Client
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
        self.capped = False
        self.lease_lapses = 0
        self._guard_events = 0

    def _guard_stepped(self) -> None:
        """Notes a step of the budget guard since the round began: a cap added, or one
        lifted (so one was in force), held the board below the pinned mode for a while,
        even if no cap is left at the round's end (found by a review)."""
        if getattr(self.agent, "guard_events", 0) > self._guard_events:
            self.capped = True

    def __enter__(self) -> "PowerRound":
        own = self.agent.status().get("budget_w")
        # Counted after a first reply: a step before the round, still on its way, is not
        # the round's.
        self._guard_events = getattr(self.agent, "guard_events", 0)
        budgets = [b for b in (self.budget_w, own) if b is not None]
        self.budget_w = min(budgets) if budgets else None
        self.mode = fastest_within(self.modes, self.budget_w)
        self._pin()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        # Only a round that succeeded reports what its end finds: else the round's own
        # error (a KeyboardInterrupt among them) is the one to see.
        try:
            if self.agent.status().get("guard"):
                self.capped = True
        except (AgentError, OSError):
            pass  # the release says what matters
        self._guard_stepped()
        try:
            # A renew succeeds only for the holder: a lease that lapsed is not this
            # round's to release (another client's persistent lease may hold the board).
            self.agent.renew()
            self.agent.release()
        except AgentError as e:
            # The lease had ended already (it lapsed in the last minibatch, and maybe
            # another client took the board): counted as any lapse, where the round itself
            # succeeded (a lapse its failure followed was counted where it was found).
            if exc_type is None and e.code == "not_found":
                self.lease_lapses += 1
        except OSError as e:
            if exc_type is None:
                raise self._lost("at the round's end", e) from e

    def _pin(self) -> None:
        assert self.mode is not None
        reply = self.agent.set_mode(lease="session", **self.mode.knobs())
        if reply and reply.get("capped"):
            self.capped = True

    def _lost(self, when: str, e: OSError) -> OSError:
        where = getattr(self.agent, "path", "its socket")
        if isinstance(e, TimeoutError):
            return TimeoutError(
                "the jpower agent at {} did not answer {} ({}): the round's lease holds until"
                " the connection closes".format(where, when, e)
            )
        return ConnectionError(
            "the jpower agent at {} went away {} ({}): its session lease ended with the"
            " connection (an agent that stopped restored the board; after a crash, the next"
            " agent's start or `jpower restore --if-crashed` does)".format(where, when, e)
        )

    @contextlib.contextmanager
    def minibatch(self) -> Iterator[Dict[str, float]]:
        """Renews the lease (taking it again if it ended) and brackets one minibatch with
        the agent's markers; yields the dict that receives the agent's `minibatch_end`
        reply (duration_ms, mean_w, energy_j) when it ends."""
        self.minibatches += 1
        n = self.minibatches
        when = "in minibatch {}".format(n)
        try:
            try:
                self.agent.renew()
            except AgentError:  # it expired, or another client took the board meanwhile
                self.lease_lapses += 1
                self._pin()
            self.agent.minibatch_begin("train", n)
        except OSError as e:
            raise self._lost(when, e) from e
        mb = {}  # type: Dict[str, float]
        try:
            yield mb
        except BaseException:
            with contextlib.suppress(OSError, AgentError):  # the training's error is the one to see
                self.agent.minibatch_end("train", n)
            raise
        try:
            mb.update(self.agent.minibatch_end("train", n))
        except OSError as e:
            raise self._lost(when, e) from e
        self.energy_j += mb["energy_j"]
        self.train_time_s += mb["duration_ms"] / 1e3

    def metrics(self) -> Dict[str, float]:
        """The round's metrics, numbers only (a Flower MetricRecord): `energy_j`,
        `train_time_s` and `mean_power_w` over the marked minibatches, the mode's knobs
        (`mode_cores`, `mode_cpu_khz`, `mode_gpu_hz`, `mode_emc_hz`), `budget_w` (the
        tighter of the server's and the agent's; 0 without a budget: Flower's strategies
        want the same keys from every client), `capped` (1 when the agent's budget guard
        held the board below the mode as it was pinned, stepped during the round (a
        `guard` event on the round's connection: a cap added, or one lifted, so one was in
        force), or had caps in force at the round's end:
        the knobs may overstate what ran) and `lease_lapses` (times the lease had ended and
        was taken again, or had ended by the round's end; the lease is renewed as each
        minibatch begins, so a minibatch longer than the agent's `lease_timeout_ms` outlives
        it: set the timeout above the longest minibatch)."""
        if self.mode is None:
            raise RuntimeError("the round has not started")
        m = {
            "energy_j": self.energy_j,
            "train_time_s": self.train_time_s,
            "mean_power_w": self.energy_j / self.train_time_s if self.train_time_s > 0 else 0.0,
        }  # type: Dict[str, float]
        m.update({"mode_" + k: v for k, v in self.mode.knobs().items()})
        m["budget_w"] = self.budget_w or 0.0
        m["capped"] = 1.0 if self.capped else 0.0
        m["lease_lapses"] = float(self.lease_lapses)
        return m
