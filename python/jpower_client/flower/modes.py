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


KNOBS = ("cores", "cpu_khz", "gpu_hz", "emc_hz")
FIGURES = ("time_ms", "power_w")


def read_profile(path: str) -> List[Mode]:
    """The rows of a `jpower profile` CSV, its `#` comment lines and blank lines skipped (a
    simulated profile begins with ``# jpower: simulated WORKLOAD on BOARD``), its columns in
    any order, others (the standard deviations, a note) ignored. Checked as jpower checks a
    profile: knobs positive integers, time and power numbers from 1e-6 to 1e6, each mode
    once. Raises ValueError naming the file and line of what is wrong, or a file without
    rows."""
    with open(path, newline="", encoding="utf-8-sig") as f:
        lines = [(n, line) for n, line in enumerate(f, 1)
                 if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise ValueError("{}: a profile without rows".format(path))
    (head_line, head), rows = lines[0], lines[1:]
    header = [h.strip() for h in next(csv.reader([head]))]
    missing = [c for c in KNOBS + FIGURES if c not in header]
    if missing:
        raise ValueError("{}:{}: not a jpower profile: no {} column(s) in {}".format(
            path, head_line, ", ".join(missing), header))
    at = {c: header.index(c) for c in KNOBS + FIGURES}
    modes, seen = [], {}  # type: List[Mode], Dict[tuple, int]
    for n, line in rows:
        fields = [x.strip() for x in next(csv.reader([line]))]
        where = "{}:{}".format(path, n)
        if len(fields) < len(header):
            raise ValueError("{}: {} fields, expected {}".format(where, len(fields), len(header)))
        knobs = []
        for c in KNOBS:
            try:
                v = int(fields[at[c]])
            except ValueError:
                v = 0
            if v <= 0:
                raise ValueError("{}: {} is not a positive integer: {!r}".format(
                    where, c, fields[at[c]]))
            knobs.append(v)
        figures = []
        for c in FIGURES:
            try:
                v = float(fields[at[c]])
            except ValueError:
                v = float("nan")
            if not 1e-6 <= v <= 1e6:  # NaN and infinities fail too
                raise ValueError("{}: {} is not a number from 1e-6 to 1e6: {!r}".format(
                    where, c, fields[at[c]]))
            figures.append(v)
        key = tuple(knobs)
        if key in seen:
            raise ValueError("{}: the mode of line {} again".format(where, seen[key]))
        seen[key] = n
        modes.append(Mode(*knobs, *figures))
    if not modes:
        raise ValueError("{}: a profile without rows".format(path))
    return modes


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
