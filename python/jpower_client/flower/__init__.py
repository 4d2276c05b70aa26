"""jpower in Flower federated training: each client trains its rounds under its board's power
budget, and the server sees what each round cost.

- `PowerRound` (client side, standard library only): per round, a session lease on the local
  agent at the fastest profiled mode within the budget, the minibatches bracketed by the
  agent's markers, and the round's `energy_j`, `train_time_s`, `mean_power_w` and mode.
- `read_profile`, `fastest_within`: the budget-to-mode choice from a `jpower profile` CSV.
- `aggregate`: a round's metrics over the fleet (energy, the straggler's time, budgets kept).
- `client.train_reply` and `strategy.JpowerStrategy` (need flwr: `pip install
  ./python[flower]` from a jpower checkout): the train reply that carries the metrics, and the server-side
  strategy wrapper that hands out budgets and aggregates them per round.
- `simulate` (`python3 -m jpower_client.flower.simulate`): a fleet of simulated boards
  training over Flower's own deployment (SuperLink, SuperNodes, `flwr run`).
"""

from .metrics import aggregate
from .modes import Mode, fastest_within, read_profile
from .round import BUDGET_KEY, NAME_RECORD, PowerRound, budget_for

__all__ = [
    "PowerRound",
    "budget_for",
    "BUDGET_KEY",
    "NAME_RECORD",
    "Mode",
    "read_profile",
    "fastest_within",
    "aggregate",
]
