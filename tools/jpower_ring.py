#!/usr/bin/env python3
"""Reader of jpower's shared-memory telemetry ring (layout version 1).

The byte layout and the reader protocol are specified in docs/telemetry-ring.md; this module
follows that document and nothing else. Standard library only, Python 3.8+.

As a module::

    from jpower_ring import Ring
    with Ring("/run/jpower/telemetry/orin-nano.ring") as ring:
        print(ring.latest())

As a script::

    python3 tools/jpower_ring.py RING [--latest | --since SECONDS | --energy SECONDS | --activity]
        [--json]

Memory ordering: CPython offers no fence. Each atomic field is read with one aligned 8- or
4-byte ``struct.unpack_from``, and a slot is copied with one slice between its two ``seq``
loads (the copy's own ``seq`` is checked too). x86-64 keeps loads in order, so there the
protocol holds exactly; on AArch64 the loads are thousands of interpreter instructions apart,
far beyond what the CPU reorders in practice, though no fence guarantees it (see the
document's "Memory ordering" section for what a Python reader can rely on).

Writer lifecycle: ``Ring.writer()`` reads the writer section (generation, live / closed /
replaced); ``Ring.silent_ns()`` says how long a live-looking writer has published nothing.
The script warns on stderr when the writer is gone or replaced.

Activity counters: ``Ring.activity()`` reads the activity section's newest record (GPU load and
clock, each CPU's utilisation and clock, EMC activity and clock, RAM, swap, fan, disk read
rates), a counter the board lacks as None.
"""

import argparse
import json
import mmap
import os
import struct
import sys
import time
from typing import Dict, List, Optional, Tuple

MAGIC = b"JPWRRING"
VERSION = 1
HEADER_SIZE = 4096
MAX_RAILS = 16
MAX_ZONES = 16
SLOT_HEAD_SIZE = 32
SLOT_RAIL_SIZE = 12
TEMP_UNREADABLE = -(2 ** 31)
EXT_OFFSET = 1664
SECTION_END = 0
SECTION_WRITER = 1
WRITER_LIVE = 1
WRITER_CLOSED = 2
WRITER_REPLACED = 3
SECTION_ACTIVITY = 2
ACTIVITY_ABSENT_U32 = 0xFFFFFFFF
ACTIVITY_ABSENT_U64 = 0xFFFFFFFFFFFFFFFF

INIT_WAIT_S = 1.0
INIT_POLL_S = 0.1
LATEST_TRIES = 1000

_HEADER = struct.Struct("<8sIIIIIIQqQQQQIibbbBI32s")  # offsets 0..127
_RAIL = struct.Struct("<24sB3sIQQ16s")  # 64 bytes
_ZONE = struct.Struct("<20siQ")  # 32 bytes
_SLOT_HEAD = struct.Struct("<QQIIII")  # 32 bytes
# Slot flags bit RAIL_FAILED_SHIFT + r: rail r's last read failed, its values held.
RAIL_FAILED_SHIFT = 16
_SLOT_RAIL = struct.Struct("<III")  # 12 bytes
_WRITER = struct.Struct("<IIQIIQ")  # 32 bytes
_ACTIVITY = struct.Struct("<IIQQIIQQIIIIQQQQQQ128s256s")  # 496 bytes
_ACTIVITY_CPU = struct.Struct("<II")  # 8 bytes
_ACTIVITY_DISK = struct.Struct("<16sIIQ")  # 32 bytes
_SECTION_HEAD = struct.Struct("<II")
_U64 = struct.Struct("<Q")
_U32 = struct.Struct("<I")

_OFF_VERSION = 8
_OFF_WRITE_SEQ = 56
_OFF_OVERRUNS = 64
_OFF_READ_ERRORS = 72
_OFF_THROTTLE = 92
_OFF_RAILS = 128
_OFF_ZONES = 1152
_OFF_RAIL_FRESH_COUNT = 32
_OFF_RAIL_LAST_FRESH = 40

Sample = Dict[str, object]


def _activity(raw: bytes) -> Dict[str, object]:
    """An activity record copied whole out of its section."""
    (_, _, _, window_ns, cpu_count, disk_count, _, t_ns, *counters, cpus,
     disks) = _ACTIVITY.unpack(raw)

    def opt(v: int, absent: int = ACTIVITY_ABSENT_U32) -> Optional[int]:
        return None if v == absent else v
    names = ["gpu_load_pm", "emc_activity_pm", "fan_pwm", "fan_rpm", "gpu_hz", "emc_hz",
             "ram_used_kb", "ram_total_kb", "swap_used_kb", "swap_total_kb"]
    out = {"t_ns": t_ns, "window_ns": window_ns}
    for i, (name, v) in enumerate(zip(names, counters)):
        out[name] = opt(v, ACTIVITY_ABSENT_U32 if i < 4 else ACTIVITY_ABSENT_U64)
    out["cpus"] = []
    for c in range(min(cpu_count, 16)):
        util, khz = _ACTIVITY_CPU.unpack_from(cpus, 8 * c)
        out["cpus"].append({"util_pm": opt(util), "khz": opt(khz)})
    out["disks"] = []
    for d in range(min(disk_count, 8)):
        name, major, minor, bps = _ACTIVITY_DISK.unpack_from(disks, 32 * d)
        out["disks"].append({"name": _cstr(name), "major": major, "minor": minor,
                             "read_bps": opt(bps, ACTIVITY_ABSENT_U64)})
    return out


class RingError(Exception):
    """The ring file cannot be read: missing, unreadable, malformed or not yet published."""


def monotonic_ns() -> int:
    """Return ``CLOCK_MONOTONIC`` in nanoseconds, the clock of the ring's timestamps."""
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


def _cstr(raw: bytes) -> str:
    """Decode a NUL-padded UTF-8 field."""
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace")


def _is_power_of_two(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


def _map_file(path: str) -> mmap.mmap:
    """Map the whole file read-only; refuse one too short to hold a header."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise RingError("{}: cannot open: {}".format(path, e.strerror)) from e
    try:
        size = os.fstat(fd).st_size
        if size < HEADER_SIZE:
            raise RingError("{}: too short: {} bytes, the header alone is {}".format(
                path, size, HEADER_SIZE))
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ)
    finally:
        os.close(fd)


def _map_published(path: str, wait_s: float) -> mmap.mmap:
    """Map the ring, retrying for up to ``wait_s`` while its writer is still initialising it."""
    deadline = time.monotonic() + wait_s
    while True:
        mm = _map_file(path)
        version = _U32.unpack_from(mm, _OFF_VERSION)[0]
        if version != 0 or mm[:8] not in (MAGIC, bytes(8)):
            return mm
        mm.close()
        if time.monotonic() >= deadline:
            raise RingError("{}: version 0: the writer is still initialising the ring "
                            "(waited {:.1f} s)".format(path, wait_s))
        time.sleep(INIT_POLL_S)


def _check_header(path: str, h: tuple, file_size: int) -> None:
    """Apply the checks of the layout doc's "Checking a ring" section."""
    magic, version, header_size, slot_size, slot_count, rail_count = h[:6]

    def fail(what: str) -> None:
        raise RingError("{}: {}".format(path, what))

    if magic != MAGIC:
        fail("bad magic {!r}: not a jpower telemetry ring".format(magic))
    if version != VERSION:
        fail("unsupported layout version {} (this reader knows {})".format(version, VERSION))
    if header_size < HEADER_SIZE or header_size % HEADER_SIZE:
        fail("header_size is {}, expected a multiple of {}".format(header_size, HEADER_SIZE))
    if rail_count > MAX_RAILS:
        fail("rail_count is {}, at most {}".format(rail_count, MAX_RAILS))
    need = SLOT_HEAD_SIZE + SLOT_RAIL_SIZE * rail_count
    if slot_size < need or slot_size % 8:
        fail("slot_size {} is not a multiple of 8 of at least {} for {} rails".format(
            slot_size, need, rail_count))
    if not _is_power_of_two(slot_count):
        fail("slot_count {} is not a power of two".format(slot_count))
    want = header_size + slot_count * slot_size
    if file_size < want:
        fail("too short: {} bytes, {} slots of {} bytes need {}".format(
            file_size, slot_count, slot_size, want))


class Ring:
    """A read-only view of one telemetry ring file.

    ``Ring(path)`` maps the file and validates its header (retrying for about a second while
    the version is 0); it raises :class:`RingError` naming the file and the problem. The
    static header fields are properties; the atomic counters are methods, read anew on each
    call. Samples are dicts::

        {"n", "t_ns", "flags", "fresh", "module_w", "input_w",
         "rails": [{"name", "power_w", "voltage_v", "current_a", "fresh", "failed"}, ...]}
    """

    def __init__(self, path: str, init_wait_s: float = INIT_WAIT_S) -> None:
        self._path = os.fspath(path)
        self._mm = _map_published(self._path, init_wait_s)
        try:
            self._load_header()
        except RingError:
            self._mm.close()
            raise

    def _load_header(self) -> None:
        h = _HEADER.unpack_from(self._mm, 0)
        _check_header(self._path, h, len(self._mm))
        (_, _, self._header_size, self._slot_size, self._slot_count, self._rail_count, self._flags,
         self._writer_pid, self._realtime_offset_ns, self._period_ns, _, _, _,
         self._module_mask, self._input_rail, power_exp, voltage_exp, current_exp, _, _,
         board) = h
        self._board = _cstr(board)
        self._scale = (10.0 ** power_exp, 10.0 ** voltage_exp, 10.0 ** current_exp)
        self._rails = [self._rail_info(r) for r in range(self._rail_count)]
        self._used = SLOT_HEAD_SIZE + SLOT_RAIL_SIZE * self._rail_count
        self._writer_at = self._find_section(SECTION_WRITER, _WRITER.size)
        self._activity_at = self._find_section(SECTION_ACTIVITY, _ACTIVITY.size)

    def _find_section(self, wanted: int, min_size: int) -> Optional[int]:
        """The offset of section ``wanted`` (at least ``min_size`` bytes), or None; unknown
        sections are skipped, a malformed list refuses the ring."""
        off = EXT_OFFSET
        found = None
        while off + 8 <= self._header_size:
            sid, size = _SECTION_HEAD.unpack_from(self._mm, off)
            if sid == SECTION_END:
                break
            if size < 8 or size % 8 or off + size > self._header_size:
                raise RingError("{}: malformed section list at offset {}".format(self._path, off))
            if sid == wanted and size >= min_size and found is None:
                found = off
            off += size
        return found

    def _rail_info(self, r: int) -> Dict[str, object]:
        name, role, _, refresh_us, _, _, _ = _RAIL.unpack_from(self._mm, _OFF_RAILS + 64 * r)
        return {"name": _cstr(name), "role": role, "refresh_us": refresh_us}

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Unmap the ring."""
        self._mm.close()

    def __enter__(self) -> "Ring":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- static header fields ---------------------------------------------------------------

    @property
    def path(self) -> str:
        """The ring file's path."""
        return self._path

    @property
    def rails(self) -> List[Dict[str, object]]:
        """The rail table: ``[{"name", "role", "refresh_us"}]`` (role 0 input, 1 module,
        2 sub-rail, 3 carrier)."""
        return [dict(r) for r in self._rails]

    @property
    def board(self) -> str:
        """The board model."""
        return self._board

    @property
    def simulated(self) -> bool:
        """True when the board is simulated (header flags bit 0)."""
        return bool(self._flags & 1)

    @property
    def writer_pid(self) -> int:
        """The sampler's process id."""
        return self._writer_pid

    @property
    def period_ns(self) -> int:
        """The requested sampling period."""
        return self._period_ns

    @property
    def realtime_offset_ns(self) -> int:
        """Add to a sample's ``t_ns`` to get ``CLOCK_REALTIME`` nanoseconds."""
        return self._realtime_offset_ns

    @property
    def module_mask(self) -> int:
        """Bit ``r`` set: rail ``r`` is summed into module power."""
        return self._module_mask

    @property
    def input_rail(self) -> int:
        """Index of the module's input rail, or -1."""
        return self._input_rail

    @property
    def slot_count(self) -> int:
        """Number of slots: how many of the newest samples the ring holds."""
        return self._slot_count

    # -- atomic header fields ---------------------------------------------------------------

    def _u64(self, offset: int) -> int:
        return _U64.unpack_from(self._mm, offset)[0]

    def write_seq(self) -> int:
        """Samples published so far; the newest is sample ``write_seq() - 1``."""
        return self._u64(_OFF_WRITE_SEQ)

    def overruns(self) -> int:
        """Sampler periods missed."""
        return self._u64(_OFF_OVERRUNS)

    def read_errors(self) -> int:
        """Failed rail reads."""
        return self._u64(_OFF_READ_ERRORS)

    def throttle(self) -> int:
        """The current throttle flags (bit 0 throttled, 1 warning alarm, 2 critical alarm)."""
        return _U32.unpack_from(self._mm, _OFF_THROTTLE)[0]

    def thermal(self) -> List[Tuple[str, Optional[float]]]:
        """``[(zone name, °C)]`` for the zones in use; the temperature is None when
        unreadable."""
        zones = []
        for z in range(MAX_ZONES):
            name, temp_mc, _ = _ZONE.unpack_from(self._mm, _OFF_ZONES + 32 * z)
            if name.strip(b"\0"):
                temp = None if temp_mc == TEMP_UNREADABLE else temp_mc / 1000.0
                zones.append((_cstr(name), temp))
        return zones

    def rail_stats(self) -> List[Dict[str, object]]:
        """``[{"name", "fresh_count", "last_fresh_ns"}]`` per rail (``last_fresh_ns`` 0:
        no fresh value yet)."""
        stats = []
        for r, rail in enumerate(self._rails):
            base = _OFF_RAILS + 64 * r
            stats.append({"name": rail["name"],
                          "fresh_count": self._u64(base + _OFF_RAIL_FRESH_COUNT),
                          "last_fresh_ns": self._u64(base + _OFF_RAIL_LAST_FRESH)})
        return stats

    def writer(self) -> Optional[Dict[str, object]]:
        """The writer section: ``{"generation", "state", "ended_ns"}`` with state ``"live"``,
        ``"closed"`` (stopped cleanly), ``"replaced"`` (a newer ring is at the path: reopen
        it) or ``"unknown"``; None for a ring without the section (an older writer)."""
        if self._writer_at is None:
            return None
        _, _, generation, state, _, ended_ns = _WRITER.unpack_from(self._mm, self._writer_at)
        names = {WRITER_LIVE: "live", WRITER_CLOSED: "closed", WRITER_REPLACED: "replaced"}
        return {"generation": generation, "state": names.get(state, "unknown"),
                "ended_ns": ended_ns}

    def activity(self) -> Optional[Dict[str, object]]:
        """The newest record of the activity section: ``{"t_ns", "window_ns", "gpu_load_pm",
        "emc_activity_pm", "fan_pwm", "fan_rpm", "gpu_hz", "emc_hz", "ram_used_kb",
        "ram_total_kb", "swap_used_kb", "swap_total_kb", "cpus": [{"util_pm", "khz"}],
        "disks": [{"name", "major", "minor", "read_bps"}]}``, a counter the board lacks as
        None; None for a ring without the section or before its first record."""
        at = self._activity_at
        if at is None:
            return None
        for _ in range(LATEST_TRIES):
            seq = self._u64(at + 32)
            if seq == 0:
                return None
            if seq % 2:
                continue
            raw = bytes(self._mm[at:at + _ACTIVITY.size])
            if self._u64(at + 32) != seq or _U64.unpack_from(raw, 32)[0] != seq:
                continue
            return _activity(raw)
        return None

    def silent_ns(self, now_ns: Optional[int] = None) -> Optional[int]:
        """How long the ring has gone without a sample, when that is longer than a live
        writer leaves it (four periods, at least a second): a killed writer stays "live"
        and falls silent. None while samples come (or before the first)."""
        s = self.latest()
        if s is None:
            return None
        quiet = (monotonic_ns() if now_ns is None else now_ns) - s["t_ns"]
        return quiet if quiet > max(4 * self._period_ns, 1_000_000_000) else None

    def writer_warning(self) -> Optional[str]:
        """A sentence when the writer is gone, closed or replaced; None while it publishes."""
        w = self.writer()
        if w is None:
            return None
        if w["state"] == "closed":
            return "the writer (pid {}) closed this ring: no sample will follow".format(
                self._writer_pid)
        if w["state"] == "replaced":
            return "a newer ring (generation {}) replaced this one: reopen the path".format(
                w["generation"] + 1)
        quiet = self.silent_ns() if w["state"] == "live" else None
        if quiet is not None:
            return "the writer (pid {}) has published nothing for {:.1f} s".format(
                self._writer_pid, quiet / 1e9)
        return None

    # -- samples ----------------------------------------------------------------------------

    def _copy_slot(self, n: int) -> Optional[bytes]:
        """Copy sample ``n``'s slot, or None when the slot does not hold sample ``n`` intact
        (being written, overwritten, or not yet written)."""
        off = self._header_size + (n % self._slot_count) * self._slot_size
        want = 2 * n + 2
        if self._u64(off) != want:
            return None
        data = self._mm[off:off + self._used]
        if self._u64(off) != want or _U64.unpack_from(data, 0)[0] != want:
            return None
        return data

    def _decode(self, n: int, data: bytes) -> Sample:
        _, t_ns, flags, fresh, module_uw, input_uw = _SLOT_HEAD.unpack_from(data, 0)
        pw, vv, ia = self._scale
        rails = []
        for r, info in enumerate(self._rails):
            p, v, i = _SLOT_RAIL.unpack_from(data, SLOT_HEAD_SIZE + SLOT_RAIL_SIZE * r)
            rails.append({"name": info["name"], "power_w": p * pw, "voltage_v": v * vv,
                          "current_a": i * ia, "fresh": bool(fresh >> r & 1),
                          # Its read failed: the values are the last good ones, held.
                          "failed": bool(flags >> (RAIL_FAILED_SHIFT + r) & 1)})
        return {"n": n, "t_ns": t_ns, "flags": flags, "fresh": fresh,
                "module_w": module_uw * pw, "input_w": input_uw * pw, "rails": rails}

    def latest(self) -> Optional[Sample]:
        """The newest sample, or None before the first one; retries while the writer is in
        the slot or has lapped it (RingError after LATEST_TRIES attempts)."""
        for _ in range(LATEST_TRIES):
            w = self.write_seq()
            if w == 0:
                return None
            data = self._copy_slot(w - 1)
            if data is not None:
                return self._decode(w - 1, data)
        raise RingError("{}: no consistent copy of the newest sample in {} tries".format(
            self._path, LATEST_TRIES))

    def sample(self, n: int) -> Optional[Sample]:
        """Sample number ``n``, or None when it is overwritten or not written yet."""
        if n < 0:
            return None
        data = self._copy_slot(n)
        return None if data is None else self._decode(n, data)

    def range(self, a: int, b: int) -> Tuple[List[Sample], int]:
        """Samples ``a <= n < b`` still in the ring, and how many of them were lost
        (overwritten). Numbers at or past ``write_seq()`` are neither returned nor counted."""
        end = min(b, self.write_seq())
        start = max(a, 0, end - self._slot_count)
        samples = []
        for n in range(start, end):
            s = self.sample(n)
            if s is not None:
                samples.append(s)
        return samples, max(0, end - max(a, 0)) - len(samples)

    def since(self, t_ns: int) -> List[Sample]:
        """The samples with ``t_ns`` at or after ``t_ns``, oldest first, walking back from
        the newest until an earlier or overwritten sample."""
        w = self.write_seq()
        found = []
        for n in range(w - 1, max(w - 1 - self._slot_count, -1), -1):
            s = self.sample(n)
            if s is None or s["t_ns"] < t_ns:
                break
            found.append(s)
        found.reverse()
        return found

    def energy(self, t0_ns: int, t1_ns: int) -> Dict[str, object]:
        """Energy from ``t0_ns`` to ``t1_ns`` as the agent takes it (``telemetry``'s window):
        the trapezoid rule over the samples inside, the segments across each edge cut there
        by linear interpolation, and where the samples do not cover the window the sensor's
        held value (the first sample's before it, the last one's after it). Uses the
        samples inside, the last one at or before ``t0_ns`` however old, and those up to
        two periods after ``t1_ns``. ``{"module_j", "rails_j": {name: J}, "samples"
        (inside the window), "duration_s" (of the window), "rate_hz"}``."""
        margin = 2 * self._period_ns
        w = self.write_seq()
        used = []  # newest first
        for n in range(w - 1, max(w - 1 - self._slot_count, -1), -1):
            s = self.sample(n)
            if s is None:
                break
            if s["t_ns"] <= t1_ns + margin:
                used.append(s)
            if s["t_ns"] <= t0_ns:
                break
        used.reverse()
        module_j = 0.0
        rails_j = [0.0] * self._rail_count

        def add(pa: Sample, pb: Sample, ta: int, tb: int) -> None:
            """Adds the trapezoid of segment pa..pb cut to [ta, tb]."""
            nonlocal module_j
            span = pb["t_ns"] - pa["t_ns"]

            def at(wa: float, wb: float, t: int) -> float:
                return wa + (t - pa["t_ns"]) / span * (wb - wa)

            dt = (tb - ta) / 1e9
            module_j += 0.5 * (at(pa["module_w"], pb["module_w"], ta)
                               + at(pa["module_w"], pb["module_w"], tb)) * dt
            for r in range(self._rail_count):
                wa, wb = pa["rails"][r]["power_w"], pb["rails"][r]["power_w"]
                rails_j[r] += 0.5 * (at(wa, wb, ta) + at(wa, wb, tb)) * dt

        for a, b in zip(used, used[1:]):
            ta, tb = max(a["t_ns"], t0_ns), min(b["t_ns"], t1_ns)
            if tb > ta and b["t_ns"] > a["t_ns"]:
                add(a, b, ta, tb)
        if used:
            # The sensor holds its value before the first sample and after the last.
            for s, frm, to in ((used[0], t0_ns, min(used[0]["t_ns"], t1_ns)),
                               (used[-1], max(used[-1]["t_ns"], t0_ns), t1_ns)):
                if to > frm:
                    dt = (to - frm) / 1e9
                    module_j += s["module_w"] * dt
                    for r in range(self._rail_count):
                        rails_j[r] += s["rails"][r]["power_w"] * dt
        inside = sum(1 for s in used if t0_ns <= s["t_ns"] <= t1_ns)
        duration_s = max(t1_ns - t0_ns, 0) / 1e9
        return {"module_j": module_j,
                "rails_j": {rail["name"]: j for rail, j in zip(self._rails, rails_j)},
                "samples": inside, "duration_s": duration_s,
                "rate_hz": inside / duration_s if duration_s > 0 else 0.0}


# -- command line ---------------------------------------------------------------------------

def _format_sample(s: Sample) -> str:
    lines = ["sample {}  t={:.6f} s  flags=0x{:x}  fresh=0x{:x}".format(
        s["n"], s["t_ns"] / 1e9, s["flags"], s["fresh"])]
    for rail in s["rails"]:
        lines.append("  {:<24} {:9.3f} W {:8.3f} V {:8.3f} A{}".format(
            rail["name"], rail["power_w"], rail["voltage_v"], rail["current_a"],
            "  (read failed: last good value)" if rail["failed"]
            else "" if rail["fresh"] else "  (stale)"))
    lines.append("  {:<24} {:9.3f} W".format("module", s["module_w"]))
    return "\n".join(lines)


def _format_samples(samples: List[Sample]) -> str:
    if not samples:
        return "no samples"
    names = [rail["name"] for rail in samples[0]["rails"]]
    lines = ["\t".join(["n", "t_ns", "module_w"] + names)]
    for s in samples:
        watts = ["{:.6f}".format(rail["power_w"]) for rail in s["rails"]]
        lines.append("\t".join([str(s["n"]), str(s["t_ns"]), "{:.6f}".format(s["module_w"])]
                               + watts))
    return "\n".join(lines)


def _format_energy(e: Dict[str, object]) -> str:
    lines = ["module {:.6f} J over {:.3f} s ({} samples, {:.1f} Hz)".format(
        e["module_j"], e["duration_s"], e["samples"], e["rate_hz"])]
    for name, j in e["rails_j"].items():
        lines.append("  {:<24} {:.6f} J".format(name, j))
    return "\n".join(lines)


def _parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Read a jpower telemetry ring.")
    p.add_argument("ring", help="the ring file (jpower status --json prints ring_path)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--latest", action="store_true", help="the newest sample (default)")
    mode.add_argument("--since", type=float, metavar="SECONDS",
                      help="the samples of the last SECONDS")
    mode.add_argument("--energy", type=float, metavar="SECONDS",
                      help="the energy over the last SECONDS")
    mode.add_argument("--activity", action="store_true",
                      help="the newest record of the activity counters (GPU, CPU, EMC, RAM, fan, disks)")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p.parse_args(argv)


def _run(ring: Ring, args: argparse.Namespace) -> Tuple[object, str]:
    """Return the result for the chosen mode and its text form."""
    now = monotonic_ns()
    if args.since is not None:
        samples = ring.since(now - int(args.since * 1e9))
        return samples, _format_samples(samples)
    if args.energy is not None:
        e = ring.energy(now - int(args.energy * 1e9), now)
        return e, _format_energy(e)
    if args.activity:
        a = ring.activity()
        return a, "no activity record" if a is None else json.dumps(a, indent=2)
    s = ring.latest()
    return s, "no sample yet" if s is None else _format_sample(s)


def main(argv: Optional[List[str]] = None) -> int:
    """Command-line entry point; returns the exit status."""
    args = _parse_args(argv)
    try:
        with Ring(args.ring) as ring:
            result, text = _run(ring, args)
            warning = ring.writer_warning()
        if warning:
            print("jpower_ring: warning: {}".format(warning), file=sys.stderr)
    except RingError as e:
        print("jpower_ring: {}".format(e), file=sys.stderr)
        return 1
    print(json.dumps(result) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
