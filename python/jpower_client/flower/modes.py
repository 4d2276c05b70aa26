"""The fastest mode within a power budget, from a board's profile.

A profile is the CSV `jpower profile` writes (``cores,cpu_khz,gpu_hz,emc_hz,time_ms,power_w``
and optionally the standard deviations): one row per power mode with its measured minibatch
time and module power. On a Jetson, `jpower profile --live` measures it by training there; for
a simulated board, `jpower --sim BOARD profile` computes it from the board's model. The choice
is the fastest profiled mode whose measured power is within the budget: no fit, no
extrapolation beyond what was measured. Standard library only.
"""

import csv
from typing import Dict, List, NamedTuple, Optional

__all__ = ["Mode", "read_profile", "fastest_within"]


class Mode(NamedTuple):
    """One profiled power mode: its knobs, and the minibatch time and power measured there."""

    cores: int
    cpu_khz: int
    gpu_hz: int
    emc_hz: int
    time_ms: float
    power_w: float

    def knobs(self) -> Dict[str, int]:
        """The keyword arguments of `Client.set_mode` that pin this mode."""
        return {
            "cores": self.cores,
            "cpu_khz": self.cpu_khz,
            "gpu_hz": self.gpu_hz,
            "emc_hz": self.emc_hz,
        }


def read_profile(path: str) -> List[Mode]:
    """The rows of a `jpower profile` CSV, its `#` comment lines skipped (a simulated
    profile begins with ``# jpower: simulated WORKLOAD on BOARD``). Raises ValueError for a
    file without rows or with a row that does not parse."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    if not rows:
        raise ValueError("{}: a profile without rows".format(path))
    try:
        return [
            Mode(
                int(r["cores"]),
                int(r["cpu_khz"]),
                int(r["gpu_hz"]),
                int(r["emc_hz"]),
                float(r["time_ms"]),
                float(r["power_w"]),
            )
            for r in rows
        ]
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError("{}: not a jpower profile ({!r})".format(path, e)) from None


def fastest_within(modes: List[Mode], budget_w: Optional[float]) -> Mode:
    """The fastest mode whose profiled power is at most `budget_w` (any mode without a
    budget). Raises ValueError when every profiled mode draws more than the budget."""
    fitting = [m for m in modes if budget_w is None or m.power_w <= budget_w]
    if not fitting:
        lowest = min(m.power_w for m in modes)
        raise ValueError(
            "no profiled mode fits a {} W budget (the lowest draws {} W)".format(budget_w, lowest)
        )
    return min(fitting, key=lambda m: (m.time_ms, m.power_w))
