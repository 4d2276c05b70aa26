"""A Flower round's jpower metrics, aggregated over the clients that reported them.

Each client's train reply carries the metrics of `PowerRound.metrics()`; the fleet's view of
a round is the sum of their energies, the slowest client's training time (the round waits for
it: the straggler), the fastest's, and how many clients drew more than their budget.
Standard library only.
"""

from typing import Dict, List, Mapping

__all__ = ["aggregate"]


def aggregate(clients: List[Mapping[str, float]]) -> Dict[str, float]:
    """`clients`: one mapping of `PowerRound.metrics()` per client. Returns `clients`,
    `energy_j` (the fleet's), `slowest_train_time_s`, `fastest_train_time_s`,
    `mean_power_w` (the fleet's energy over the slowest client's time: the fleet's mean
    draw while the round trains), `over_budget` (clients whose mean power exceeded
    their `budget_w`; 0 is no budget) and `capped` (clients whose agent's budget guard
    held the board below the round's mode)."""
    if not clients:
        raise ValueError("no client reported metrics")
    energy = sum(c["energy_j"] for c in clients)
    slowest = max(c["train_time_s"] for c in clients)
    return {
        "clients": len(clients),
        "energy_j": energy,
        "slowest_train_time_s": slowest,
        "fastest_train_time_s": min(c["train_time_s"] for c in clients),
        "mean_power_w": energy / slowest if slowest > 0 else 0.0,
        "over_budget": sum(1 for c in clients if 0 < c["budget_w"] < c["mean_power_w"]),
        "capped": sum(1 for c in clients if c.get("capped", 0) > 0),
    }
