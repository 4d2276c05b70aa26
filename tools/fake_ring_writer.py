#!/usr/bin/env python3
"""Write a jpower telemetry ring without jpower, to test the ring's readers.

Follows docs/telemetry-ring.md's layout and writer protocol: the file is created mode 0600,
its header written with version 0, then version 1 is published and the mode set to 0640;
sample ``n`` is written as ``seq = 2n + 1``, the data, ``seq = 2n + 2``, ``write_seq = n + 1``.
The power trace is constant per rail (plus ``n % 1000`` microwatts per rail with ``wobble``,
which lets a test tell a torn read from a clean one). Standard library only, Python 3.8+.

As a script::

    fake_ring_writer.py RING [--rail NAME:ROLE:WATTS[:VOLTS[:REFRESH_US]]]... [--slot-count N]
        [--rate HZ] [--samples N] [--duration S] [--no-sleep] [--wobble]
        [--publish-delay S] [--board NAME] [--broken MODE]

It prints ``published RING`` once the ring is published, then writes ``--samples`` samples at
once (timestamps ``period`` apart, ending now), then samples in real time for ``--duration``
seconds. ``--broken`` writes one of the rings a reader must refuse (see BROKEN_MODES).

Memory ordering: CPython has no fence. Each atomic field is stored as one item of a
``memoryview`` cast to ``Q`` (or ``I``), which is a single aligned store, in program order;
``struct.pack_into`` would not do, as it zero-fills the bytes before packing and a reader
could see the 0. x86-64 keeps stores in order, so there the protocol holds exactly; on a
weakly ordered CPU (AArch64) the order is not guaranteed, which is acceptable for a test
helper. jpower itself uses release stores. Needs a little-endian host.
"""

import argparse
import mmap
import os
import struct
import sys
import time
from typing import List, NamedTuple, Optional, Tuple

HEADER_SIZE = 4096
MAGIC = b"JPWRRING"
MAX_RAILS = 16
TEMP_UNREADABLE = -(2 ** 31)

_HEADER = struct.Struct("<8sIIIIIIQqQQQQIibbbBI32s")
_RAIL = struct.Struct("<24sB3sIQQ16s")
_ZONE = struct.Struct("<20siQ")
_SLOT_BODY = struct.Struct("<QIIII")  # slot bytes 8..31: t_ns, flags, fresh, totals
_SLOT_RAIL = struct.Struct("<III")

_OFF_VERSION = 8
_OFF_WRITE_SEQ = 56
_OFF_OVERRUNS = 64
_OFF_RAILS = 128
_OFF_ZONES = 1152

ROLES = {"input": 0, "module": 1, "sub": 2, "carrier": 3}

# Header fields overridden by each broken mode; "truncated" and "tiny" cut the file after
# publishing, "version-0" never publishes.
BROKEN_MODES = {
    "bad-magic": {"magic": b"NOTARING"},
    "version-2": {"version": 2},
    "version-0": {"version": 0},
    "header-size": {"header_size": 6144},
    "slot-count-3": {"slot_count": 3},
    "slot-size-16": {"slot_size": 16},
    "rails-17": {"rail_count": 17},
    "truncated": {},
    "tiny": {},
}

# The thermal zones every fake ring carries: (type, milli-degrees C).
ZONES = [("cpu-thermal", 45500), ("gpu-thermal", TEMP_UNREADABLE)]


class RailSpec(NamedTuple):
    """One rail of the fake trace: constant ``power_w`` at ``voltage_v``; a new value every
    ``refresh_us`` (0: every sample)."""
    name: str
    role: int = 2
    power_w: float = 1.0
    voltage_v: float = 5.0
    refresh_us: int = 0


DEFAULT_RAILS = [RailSpec("VDD_IN", 0, 5.0, 5.0), RailSpec("VDD_CPU_GPU_CV", 2, 2.0, 5.0),
                 RailSpec("VDD_SOC", 2, 1.5, 5.0)]


def monotonic_ns() -> int:
    """Return ``CLOCK_MONOTONIC`` in nanoseconds."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def slot_size_for(rail_count: int) -> int:
    """``32 + 12 * rail_count`` rounded up to a multiple of 8."""
    return (32 + 12 * rail_count + 7) // 8 * 8


class FakeRing:
    """A ring file being written by the writer protocol.

    ``create()`` makes the file with version 0, ``publish()`` publishes it, ``write(n, t_ns)``
    writes sample ``n``; ``expected(n)`` gives the raw values sample ``n`` holds. Usable as a
    context manager (closes the mapping).
    """

    def __init__(self, path: str, rails: List[RailSpec], slot_count: int = 1024,
                 period_ns: int = 1_000_000, board: str = "fake-board",
                 wobble: bool = False, broken: Optional[str] = None) -> None:
        if len(rails) > MAX_RAILS:
            raise ValueError("at most {} rails".format(MAX_RAILS))
        if sys.byteorder != "little":
            raise RuntimeError("the fake writer stores native words: needs a little-endian host")
        self.path = path
        self.rails = list(rails)
        self.slot_count = slot_count
        self.period_ns = period_ns
        self.board = board
        self.wobble = wobble
        self.broken = broken
        self.input_rail = next((r for r, s in enumerate(rails) if s.role == 0), -1)
        self.module_mask = sum(1 << r for r, s in enumerate(rails) if s.role == 1)
        self._fields = dict(magic=MAGIC, version=1, header_size=HEADER_SIZE,
                            slot_size=slot_size_for(len(rails)), slot_count=slot_count,
                            rail_count=len(rails))
        self._fields.update(BROKEN_MODES[broken] if broken else {})
        self._last_fresh = [None] * len(rails)  # type: List[Optional[int]]
        self._fresh_count = [0] * len(rails)
        self._fd = -1
        self._mm = None  # type: Optional[mmap.mmap]
        self._words = None  # type: Optional[memoryview]

    # -- file lifetime ----------------------------------------------------------------------

    def file_size(self) -> int:
        """The size the header's geometry calls for."""
        f = self._fields
        return f["header_size"] + f["slot_count"] * f["slot_size"]

    def create(self) -> None:
        """Create the file (replacing any), mode 0600, with the header at version 0."""
        if os.path.lexists(self.path):
            os.unlink(self.path)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.fchmod(self._fd, 0o600)
        os.ftruncate(self._fd, self.file_size())
        self._mm = mmap.mmap(self._fd, self.file_size())
        self._words = memoryview(self._mm).cast("Q")
        self._write_header()

    def publish(self) -> None:
        """Publish the version (last), then give the file mode 0640; apply a broken mode."""
        version = self._fields["version"]
        if version == 0:
            return
        with memoryview(self._mm).cast("I") as u32:
            u32[_OFF_VERSION // 4] = version
        os.fchmod(self._fd, 0o640)
        if self.broken == "truncated":
            self._cut(self.file_size() - 8)
        elif self.broken == "tiny":
            self._cut(100)

    def _cut(self, size: int) -> None:
        self._unmap()
        os.ftruncate(self._fd, size)

    def _unmap(self) -> None:
        if self._mm is not None:
            self._words.release()
            self._mm.close()
            self._words = self._mm = None

    def close(self) -> None:
        """Unmap and close the file (it stays on disk)."""
        self._unmap()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "FakeRing":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- header -----------------------------------------------------------------------------

    def _write_header(self) -> None:
        f = self._fields
        _HEADER.pack_into(
            self._mm, 0, f["magic"], 0, f["header_size"], f["slot_size"], f["slot_count"],
            f["rail_count"], 1, os.getpid(), time.time_ns() - monotonic_ns(), self.period_ns,
            0, 0, 0, self.module_mask, self.input_rail, -6, -3, -3, 0, 0,
            self.board.encode()[:32])
        for r, rail in enumerate(self.rails):
            _RAIL.pack_into(self._mm, _OFF_RAILS + 64 * r, rail.name.encode()[:24], rail.role,
                            bytes(3), rail.refresh_us, 0, 0, bytes(16))
        for z, (name, temp_mc) in enumerate(ZONES):
            _ZONE.pack_into(self._mm, _OFF_ZONES + 32 * z, name.encode(), temp_mc,
                            monotonic_ns())

    def _store(self, offset: int, value: int) -> None:
        """Store an atomic u64 field with one aligned 8-byte store."""
        self._words[offset // 8] = value

    def add_overrun(self) -> None:
        """Count one missed sampler period."""
        self._store(_OFF_OVERRUNS, self._words[_OFF_OVERRUNS // 8] + 1)

    # -- samples ----------------------------------------------------------------------------

    def expected(self, n: int) -> Tuple[int, int, List[Tuple[int, int, int]]]:
        """``(module_uw, input_uw, [(power_uw, voltage_mv, current_ma)])`` of sample ``n``."""
        extra = n % 1000 if self.wobble else 0
        rails = []
        for rail in self.rails:
            p = round(rail.power_w * 1e6) + extra
            v = round(rail.voltage_v * 1e3)
            rails.append((p, v, p // v if v else 0))
        input_uw = rails[self.input_rail][0] if self.input_rail >= 0 else 0
        module_uw = input_uw if self.input_rail >= 0 else sum(
            rails[r][0] for r in range(len(rails)) if self.module_mask >> r & 1)
        return module_uw, input_uw, rails

    def _fresh_bits(self, t_ns: int) -> int:
        """Which rails have a new value at ``t_ns``; updates the rail table's counters."""
        bits = 0
        for r, rail in enumerate(self.rails):
            last = self._last_fresh[r]
            if last is None or t_ns - last >= rail.refresh_us * 1000:
                bits |= 1 << r
                self._last_fresh[r] = t_ns
                self._fresh_count[r] += 1
                base = _OFF_RAILS + 64 * r
                self._store(base + 32, self._fresh_count[r])
                self._store(base + 40, t_ns)
        return bits

    def write(self, n: int, t_ns: int, flags: int = 0) -> None:
        """Write sample ``n`` taken at ``t_ns`` by the writer protocol."""
        module_uw, input_uw, rails = self.expected(n)
        fresh = self._fresh_bits(t_ns)
        off = HEADER_SIZE + (n % self.slot_count) * self._fields["slot_size"]
        self._store(off, 2 * n + 1)
        _SLOT_BODY.pack_into(self._mm, off + 8, t_ns, flags, fresh, module_uw, input_uw)
        for r, values in enumerate(rails):
            _SLOT_RAIL.pack_into(self._mm, off + 32 + 12 * r, *values)
        self._store(off, 2 * n + 2)
        self._store(_OFF_WRITE_SEQ, n + 1)

    def write_burst(self, first: int, count: int) -> None:
        """Write samples ``first .. first + count - 1``, ``period_ns`` apart, the last now."""
        end = monotonic_ns()
        for i in range(count):
            self.write(first + i, end - (count - 1 - i) * self.period_ns)

    def write_live(self, first: int, duration_s: float, sleep: bool = True) -> int:
        """Write samples from ``first`` on, one per period (as fast as possible without
        ``sleep``), for ``duration_s``; a late wake-up counts an overrun. Returns the next
        sample number."""
        start = monotonic_ns()
        stop = start + int(duration_s * 1e9)
        n = first
        while True:
            due = start + (n - first) * self.period_ns
            now = monotonic_ns()
            if sleep and due > now:
                time.sleep((due - now) / 1e9)
            elif sleep and now - due > self.period_ns:
                self.add_overrun()
            t = monotonic_ns()
            if t >= stop:
                return n
            self.write(n, t)
            n += 1


def build(path: str, rails: Optional[List[RailSpec]] = None, samples: int = 0,
          **options: object) -> FakeRing:
    """Create and publish a ring, write ``samples`` samples at once, and return it open."""
    ring = FakeRing(path, DEFAULT_RAILS if rails is None else rails, **options)
    ring.create()
    ring.publish()
    if ring.broken is None:
        ring.write_burst(0, samples)
    return ring


# -- command line ---------------------------------------------------------------------------

def parse_rail(text: str) -> RailSpec:
    """Parse ``NAME:ROLE:WATTS[:VOLTS[:REFRESH_US]]``; ROLE is input, module, sub, carrier
    or 0-3."""
    parts = text.split(":")
    if not 3 <= len(parts) <= 5 or not parts[0]:
        raise argparse.ArgumentTypeError("expected NAME:ROLE:WATTS[:VOLTS[:REFRESH_US]]")
    try:
        role = ROLES[parts[1]] if parts[1] in ROLES else int(parts[1])
        volts = float(parts[3]) if len(parts) > 3 else 5.0
        refresh = int(parts[4]) if len(parts) > 4 else 0
        return RailSpec(parts[0], role, float(parts[2]), volts, refresh)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e


def _parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Write a fake jpower telemetry ring.")
    p.add_argument("ring", help="the file to create (replaced if it exists)")
    p.add_argument("--rail", type=parse_rail, action="append", metavar="SPEC",
                   help="NAME:ROLE:WATTS[:VOLTS[:REFRESH_US]], repeatable (default: "
                        "VDD_IN 5 W, VDD_CPU_GPU_CV 2 W, VDD_SOC 1.5 W)")
    p.add_argument("--slot-count", type=int, default=1024)
    p.add_argument("--rate", type=float, default=1000.0, help="samples per second")
    p.add_argument("--samples", type=int, default=0, help="samples written at once")
    p.add_argument("--duration", type=float, default=0.0,
                   help="then write in real time for this many seconds")
    p.add_argument("--no-sleep", action="store_true",
                   help="in real time, write as fast as possible (stress test)")
    p.add_argument("--wobble", action="store_true",
                   help="add n %% 1000 uW to every rail of sample n")
    p.add_argument("--publish-delay", type=float, default=0.0,
                   help="keep version 0 this many seconds before publishing")
    p.add_argument("--board", default="fake-board")
    p.add_argument("--broken", choices=sorted(BROKEN_MODES), help="write a bad ring")
    return p.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = _parse_args(argv)
    ring = FakeRing(args.ring, args.rail or DEFAULT_RAILS, slot_count=args.slot_count,
                    period_ns=round(1e9 / args.rate), board=args.board, wobble=args.wobble,
                    broken=args.broken)
    with ring:
        ring.create()
        time.sleep(args.publish_delay)
        ring.publish()
        print("published", args.ring, flush=True)
        if args.broken is None:
            ring.write_burst(0, args.samples)
            ring.write_live(args.samples, args.duration, sleep=not args.no_sleep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
