"""Client of the jpower agent's Unix socket (protocol version 6).

The protocol is specified in docs/protocol.md; its Rust types are in agent/ipc/protocol.rs
and its framing in agent/ipc/codec.rs. Standard library only, Python 3.8+. Both encodings
are spoken: newline-delimited JSON, and bincode 2 frames (a hand-written encoder/decoder
driven by the schema table below). Whatever the encoding, requests are built and replies
returned as plain dicts in the JSON shape.

    from jpower_client import Client, AgentError

    with Client() as c:                       # default_socket(): $JPOWER_SOCKET, ...
        print(c.status()["gpu_hz"])           # [min, max, running]
        c.set_mode(preset="MODE_15W")         # a session lease: ends when `c` closes
        with c.minibatch("train", 1) as mb:
            train_step()
        print(mb["energy_j"], "J")
        for batch in c.loader(data_loader):   # any iterable of batches: fetch/compute markers
            train_step(batch)
        print(c.last_minibatch["fetch_ms"], "ms waiting for data")
        c.subscribe(100)
        for event in c.events(timeout=1.0):   # {"sample": {...}}, {"guard": {...}}, ...
            print(event)
        c.schedule_plan(max_batch=4, slo_ms=100)   # the real-time scheduler (version 6)
        with c.turn("train", 2):              # waits for the GPU, then marks the minibatch
            train_step()

A Client is not thread-safe: give each thread its own (two threads sharing one take each
other's replies). Replies and events are read only while a method runs: a subscription's
events pile up in the agent's socket buffer meanwhile, and a client that reads nothing for
5 s while they do is closed by the agent (its session lease ends), so read `events()` at
least that often while subscribed. A minibatch shorter than the sensors' refresh (each
rail's refresh_us in the ring's header; set_averaging's reply gives the slowest, 430 ms at
the simulated Orin AGX's default averaging) is measured with the power of an earlier one:
`set_averaging(4)` first (under a lease) for short minibatches.
"""

import collections
import contextlib
import json
import math
import os
import socket
import struct
import time
from typing import Any, Callable, Deque, Dict, Iterable, Iterator, List, Optional, Tuple

__all__ = [
    "Client",
    "AgentError",
    "ProtocolError",
    "PROTOCOL_VERSION",
    "MAX_FRAME",
    "MAX_QUEUED_EVENTS",
    "DEFAULT_SOCKET",
    "encode_bincode",
    "decode_bincode",
    "REQUEST",
    "REPLY",
]

PROTOCOL_VERSION = 6
"""The protocol version `hello` sends (the agent also speaks 3 to 5)."""
MAX_FRAME = 64 * 1024
"""The largest bincode frame payload or JSON line, bytes."""
DEFAULT_SOCKET = "/run/jpower/jpower.sock"
MAX_QUEUED_EVENTS = 10000
"""The most events a client keeps unread; older ones are dropped (`events_dropped`)."""


def default_socket() -> str:
    """The socket the CLI's defaults name (but for a `socket` set in the agent's
    configuration, which this client does not read): $JPOWER_SOCKET; else
    $JPOWER_RUNTIME_DIR/jpower.sock; else /run/jpower/jpower.sock where it exists; else
    $XDG_RUNTIME_DIR/jpower/jpower.sock where that exists (a user's agent); else
    /run/jpower/jpower.sock."""
    env = os.environ
    if env.get("JPOWER_SOCKET"):
        return env["JPOWER_SOCKET"]
    if env.get("JPOWER_RUNTIME_DIR"):
        return os.path.join(env["JPOWER_RUNTIME_DIR"], "jpower.sock")
    user = os.path.join(env.get("XDG_RUNTIME_DIR", ""), "jpower", "jpower.sock")
    if not os.path.exists(DEFAULT_SOCKET) and env.get("XDG_RUNTIME_DIR") and os.path.exists(user):
        return user
    return DEFAULT_SOCKET


class AgentError(Exception):
    """An error reply: `code` is one of the stable codes (``bad_request``, ``version``,
    ``busy``, ``forbidden``, ``not_found``, ``invalid_mode``, ``failed``)."""

    def __init__(self, code: str, message: str, id: int = 0):
        super().__init__("{} ({})".format(message, code))
        self.code = code
        self.message = message
        self.id = id

    def __reduce__(self) -> Any:
        # Picklable (multiprocessing, DataLoader workers): rebuilt from its own fields.
        return (AgentError, (self.code, self.message, self.id))


class ProtocolError(Exception):
    """The agent sent something this client cannot decode or did not expect."""


# --------------------------------------------------------------------------------------
# The schema: a mirror of agent/ipc/protocol.rs (and `Kind` in agent/telemetry/energy.rs).
# KEEP IN SYNC with those files: the order of enum variants and of struct fields is the
# bincode encoding (a variant is its index as u32, a struct its fields in order), and the
# names are the JSON encoding (snake_case, externally tagged).
#
# Types: "u8" "u32" "u64" "f64" "bool" "str"; ("opt", T) Option<T>; ("vec", T) Vec<T>;
# ("arr", T, n) [T; n] (no length prefix); ("struct", [(field, T), ...]);
# ("enum", [(variant, payload), ...]) where payload is None (unit variant), a list of
# fields (struct variant) or a type (newtype variant).
# --------------------------------------------------------------------------------------


def _struct(*fields: Tuple[str, Any]) -> Tuple[str, List[Tuple[str, Any]]]:
    return ("struct", list(fields))


def _enum(*variants: Tuple[str, Any]) -> Tuple[str, List[Tuple[str, Any]]]:
    return ("enum", list(variants))


KIND = _enum(("train", None), ("infer", None))
PHASE = _enum(("fetch", None), ("compute", None))
LEASE_KIND = _enum(("session", None), ("persistent", None))
ERROR_CODE = _enum(
    ("bad_request", None),
    ("version", None),
    ("busy", None),
    ("forbidden", None),
    ("not_found", None),
    ("invalid_mode", None),
    ("failed", None),
    ("conflict", None),
)
MODE_REQUEST = _enum(
    ("preset", [("name", "str")]),
    (
        "knobs",
        [
            ("cores", ("opt", "u32")),
            ("cpu_khz", ("opt", "u64")),
            ("gpu_hz", ("opt", "u64")),
            ("emc_hz", ("opt", "u64")),
            ("snap", "bool"),
        ],
    ),
)
PHASE_MODES = _struct(
    ("train_gpu_hz", "u64"),
    ("train_emc_hz", "u64"),
    ("infer_gpu_hz", "u64"),
    ("infer_emc_hz", "u64"),
)
SCHEDULE_PLAN = _struct(
    ("max_batch", "u32"),
    ("slo_ms", "f64"),
    ("rate_per_s", ("opt", "f64")),
    ("phase_modes", ("opt", PHASE_MODES)),
)
REQUEST_BODY = _enum(
    ("hello", [("version", "u32"), ("client", "str")]),
    ("status", None),
    ("modes", None),
    ("set_mode", [("mode", MODE_REQUEST), ("lease", LEASE_KIND), ("timeout_ms", ("opt", "u64"))]),
    ("renew", None),
    ("release", None),
    ("set_budget", [("watts", ("opt", "f64"))]),
    ("telemetry", [("window_ms", ("opt", "u64"))]),
    ("minibatch_begin", [("kind", KIND), ("id", "u64")]),
    ("minibatch_end", [("kind", KIND), ("id", "u64")]),
    ("subscribe", [("every_ms", "u64")]),
    ("set_averaging", [("samples", "u32")]),
    ("minibatch_phase", [("kind", KIND), ("id", "u64"), ("phase", PHASE)]),
    ("activity", None),
    ("minibatch_totals", None),
    ("schedule_plan", SCHEDULE_PLAN),
    ("schedule_gate", [("kind", KIND)]),
    ("schedule_submit", None),
    ("schedule_status", None),
)
REQUEST = _struct(("id", "u64"), ("body", REQUEST_BODY))

HOLDER = _struct(("client", "str"), ("pid", "u32"), ("uid", "u32"), ("lease", LEASE_KIND))
STATUS = _struct(
    ("board", "str"),
    ("soc", "str"),
    ("simulated", "bool"),
    ("online_cpus", ("vec", "u32")),
    ("cpu_khz", ("vec", ("arr", "u64", 3))),
    ("gpu_hz", ("opt", ("arr", "u64", 3))),
    ("emc_cap_hz", ("opt", "u64")),
    ("holder", ("opt", HOLDER)),
    ("budget_w", ("opt", "f64")),
    ("guard", ("opt", "str")),
    ("module_w", ("opt", "f64")),
    ("ring_path", "str"),
    ("last_switch_us", ("opt", "f64")),
)
PRESET_INFO = _struct(("id", "u32"), ("name", "str"), ("default", "bool"))
RAIL = _struct(("name", "str"), ("power_mw", "u64"))
SAMPLE = _struct(
    ("t_ns", "u64"), ("module_mw", "u64"), ("rails", ("vec", RAIL)), ("flags", "u32")
)
WINDOW = _struct(
    ("duration_ms", "f64"), ("samples", "u64"), ("mean_w", "f64"), ("energy_j", "f64")
)
TELEMETRY = _struct(("ring_path", "str"), ("latest", ("opt", SAMPLE)), ("window", ("opt", WINDOW)))
MINIBATCH = _struct(
    ("kind", KIND), ("id", "u64"), ("duration_ms", "f64"), ("mean_w", "f64"), ("energy_j", "f64")
)
PHASED_MINIBATCH = _struct(
    ("kind", KIND),
    ("id", "u64"),
    ("duration_ms", "f64"),
    ("mean_w", "f64"),
    ("energy_j", "f64"),
    ("fetch_ms", "f64"),
    ("fetch_j", "f64"),
    ("compute_ms", "f64"),
    ("compute_j", "f64"),
)
CPU_ACTIVITY = _struct(("cpu", "u32"), ("util_pm", ("opt", "u32")), ("khz", ("opt", "u32")))
DISK_ACTIVITY = _struct(
    ("name", "str"), ("major", "u32"), ("minor", "u32"), ("read_bps", ("opt", "u64"))
)
ACTIVITY = _struct(
    ("age_ms", "f64"),
    ("window_ms", "f64"),
    ("gpu_load_pm", ("opt", "u32")),
    ("gpu_hz", ("opt", "u64")),
    ("emc_activity_pm", ("opt", "u32")),
    ("emc_hz", ("opt", "u64")),
    ("fan_pwm", ("opt", "u32")),
    ("fan_rpm", ("opt", "u32")),
    ("ram_used_kb", ("opt", "u64")),
    ("ram_total_kb", ("opt", "u64")),
    ("swap_used_kb", ("opt", "u64")),
    ("swap_total_kb", ("opt", "u64")),
    ("cpus", ("vec", CPU_ACTIVITY)),
    ("disks", ("vec", DISK_ACTIVITY)),
)
KIND_TOTALS = _struct(
    ("minibatches", "u64"),
    ("phased", "u64"),
    ("duration_ms", "f64"),
    ("energy_j", "f64"),
    ("fetch_ms", "f64"),
    ("compute_ms", "f64"),
)
MINIBATCH_TOTALS = _struct(("train", KIND_TOTALS), ("infer", KIND_TOTALS))
TURN = _struct(("kind", KIND), ("turn", "u64"), ("requests", ("vec", "u64")))
TURN_TOTALS = _struct(
    ("granted", "u64"),
    ("ended", "u64"),
    ("aborted", "u64"),
    ("duration_ms", "f64"),
    ("energy_j", "f64"),
)
SCHEDULE = _struct(
    ("plan", ("opt", SCHEDULE_PLAN)),
    ("replan_pending", "bool"),
    ("replans", "u64"),
    ("mode_switches", "u64"),
    ("waiting", "u32"),
    ("queued", "u64"),
    ("served", "u64"),
    ("late", "u64"),
    ("latency_sum_ms", "f64"),
    ("latency_max_ms", "f64"),
    ("train", TURN_TOTALS),
    ("infer", TURN_TOTALS),
)
REPLY_BODY = _enum(
    ("hello", [("version", "u32"), ("agent", "str"), ("board", "str")]),
    ("status", STATUS),
    ("modes", [("presets", ("vec", PRESET_INFO)), ("space_size", "u64")]),
    ("mode_set", [("writes", "u32"), ("switch_us", "f64"), ("lease", LEASE_KIND), ("capped", "bool")]),
    ("released", [("restored", "bool")]),
    ("budget", [("watts", ("opt", "f64"))]),
    ("telemetry", TELEMETRY),
    ("minibatch", MINIBATCH),
    ("ok", None),
    ("sample", SAMPLE),
    ("guard", [("step", "str"), ("module_w", "f64"), ("budget_w", "f64")]),
    ("external_change", [("paths", ("vec", "str"))]),
    ("error", [("code", ERROR_CODE), ("message", "str")]),
    ("lease_ended", [("reason", "str")]),
    ("averaging", [("samples", "u32"), ("refresh_us", "u32"), ("rate_hz", "f64")]),
    ("phased_minibatch", PHASED_MINIBATCH),
    ("activity", ACTIVITY),
    ("minibatch_totals", MINIBATCH_TOTALS),
    ("turn", TURN),
    ("submitted", [("request", "u64")]),
    ("served", [("request", "u64"), ("latency_ms", "f64"), ("batch", "u32")]),
    ("schedule", SCHEDULE),
)
REPLY = _struct(("id", "u64"), ("body", REPLY_BODY))

# --------------------------------------------------------------------------------------
# bincode 2, config standard().with_little_endian().with_fixed_int_encoding()
# --------------------------------------------------------------------------------------

_INT_FORMATS = {"u8": ("<B", 0xFF), "u32": ("<I", 0xFFFFFFFF), "u64": ("<Q", 0xFFFFFFFFFFFFFFFF)}


def _variant(value: Any, where: str) -> Tuple[str, Any]:
    """A JSON-shaped enum value as (variant name, payload or None)."""
    if isinstance(value, str):
        return value, None
    if isinstance(value, dict) and len(value) == 1:
        ((name, payload),) = value.items()
        return name, payload
    raise ValueError("{}: an enum value is a string or a one-key dict, not {!r}".format(where, value))


def _encode(t: Any, value: Any, out: bytearray, where: str) -> None:
    if isinstance(t, str):
        if t in _INT_FORMATS:
            fmt, top = _INT_FORMATS[t]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
                raise ValueError("{}: {!r} is not a {}".format(where, value, t))
            out += struct.pack(fmt, value)
        elif t == "f64":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError("{}: {!r} is not a number".format(where, value))
            out += struct.pack("<d", float(value))
        elif t == "bool":
            if not isinstance(value, bool):
                raise ValueError("{}: {!r} is not a bool".format(where, value))
            out.append(1 if value else 0)
        elif t == "str":
            if not isinstance(value, str):
                raise ValueError("{}: {!r} is not a string".format(where, value))
            b = value.encode("utf-8")
            out += struct.pack("<Q", len(b)) + b
        else:
            raise AssertionError("unknown schema type " + t)
        return
    tag = t[0]
    if tag == "opt":
        if value is None:
            out.append(0)
        else:
            out.append(1)
            _encode(t[1], value, out, where)
    elif tag == "vec":
        out += struct.pack("<Q", len(value))
        for i, v in enumerate(value):
            _encode(t[1], v, out, "{}[{}]".format(where, i))
    elif tag == "arr":
        if len(value) != t[2]:
            raise ValueError("{}: expected {} elements".format(where, t[2]))
        for i, v in enumerate(value):
            _encode(t[1], v, out, "{}[{}]".format(where, i))
    elif tag == "struct":
        _encode_fields(t[1], value, out, where)
    elif tag == "enum":
        name, payload = _variant(value, where)
        for index, (vname, vtype) in enumerate(t[1]):
            if vname == name:
                break
        else:
            raise ValueError("{}: unknown variant {!r}".format(where, name))
        out += struct.pack("<I", index)
        if vtype is None:
            if payload is not None:
                raise ValueError("{}: {!r} is a unit variant".format(where, name))
        elif isinstance(vtype, list):
            _encode_fields(vtype, payload, out, where + "." + name)
        else:
            _encode(vtype, payload, out, where + "." + name)
    else:
        raise AssertionError("unknown schema type " + repr(tag))


def _encode_fields(fields: List[Tuple[str, Any]], value: Any, out: bytearray, where: str) -> None:
    if not isinstance(value, dict):
        raise ValueError("{}: expected an object, not {!r}".format(where, value))
    unknown = set(value) - {f for f, _ in fields}
    if unknown:
        raise ValueError("{}: unknown field(s) {}".format(where, ", ".join(sorted(unknown))))
    for fname, ftype in fields:
        if fname not in value and not (isinstance(ftype, tuple) and ftype[0] == "opt"):
            raise ValueError("{}: missing field {!r}".format(where, fname))
        # As in serde's JSON decoding, a missing Option field is None.
        _encode(ftype, value.get(fname), out, where + "." + fname)


class _Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int) -> memoryview:
        if self.pos + n > len(self.data):
            raise ProtocolError("bincode: truncated at byte {}".format(self.pos))
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str, n: int) -> Any:
        return struct.unpack(fmt, self.take(n))[0]


def _decode(t: Any, r: _Reader) -> Any:
    if isinstance(t, str):
        if t == "u8":
            return r.unpack("<B", 1)
        if t == "u32":
            return r.unpack("<I", 4)
        if t == "u64":
            return r.unpack("<Q", 8)
        if t == "f64":
            v = r.unpack("<d", 8)
            # serde_json writes non-finite floats as null; bincode keeps them.
            return v
        if t == "bool":
            b = r.unpack("<B", 1)
            if b > 1:
                raise ProtocolError("bincode: invalid bool {}".format(b))
            return b == 1
        if t == "str":
            n = r.unpack("<Q", 8)
            try:
                return bytes(r.take(n)).decode("utf-8")
            except UnicodeDecodeError as e:
                raise ProtocolError("bincode: invalid UTF-8: {}".format(e))
        raise AssertionError("unknown schema type " + t)
    tag = t[0]
    if tag == "opt":
        b = r.unpack("<B", 1)
        if b == 0:
            return None
        if b == 1:
            return _decode(t[1], r)
        raise ProtocolError("bincode: invalid Option tag {}".format(b))
    if tag == "vec":
        n = r.unpack("<Q", 8)
        if n > len(r.data):  # every element takes at least one byte
            raise ProtocolError("bincode: a Vec of {} elements cannot fit".format(n))
        return [_decode(t[1], r) for _ in range(n)]
    if tag == "arr":
        return [_decode(t[1], r) for _ in range(t[2])]
    if tag == "struct":
        return {fname: _decode(ftype, r) for fname, ftype in t[1]}
    if tag == "enum":
        index = r.unpack("<I", 4)
        if index >= len(t[1]):
            raise ProtocolError("bincode: unknown variant index {}".format(index))
        vname, vtype = t[1][index]
        if vtype is None:
            return vname
        if isinstance(vtype, list):
            return {vname: {fname: _decode(ftype, r) for fname, ftype in vtype}}
        return {vname: _decode(vtype, r)}
    raise AssertionError("unknown schema type " + repr(tag))


def encode_bincode(value: Dict[str, Any], schema: Any = REQUEST) -> bytes:
    """The bincode payload (no length prefix) of a JSON-shaped `value`."""
    out = bytearray()
    _encode(schema, value, out, "request")
    return bytes(out)


def decode_bincode(payload: bytes, schema: Any = REPLY) -> Dict[str, Any]:
    """A bincode payload (no length prefix) as its JSON-shaped value."""
    r = _Reader(payload)
    value = _decode(schema, r)
    if r.pos != len(payload):
        raise ProtocolError("bincode: {} trailing bytes".format(len(payload) - r.pos))
    return value


# --------------------------------------------------------------------------------------
# The client
# --------------------------------------------------------------------------------------


_CLIENT_TIMEOUT = object()
"""`Client.request`'s default wait: the client's own `timeout`."""


def _whole(value: Any, name: str) -> Optional[int]:
    """A knob's value as the integer the protocol takes (1.3e9 is 1300000000), or None."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise ValueError("{} is a whole number, not {!r}".format(name, value))


def _unwrap(body: Any, *variants: str) -> Dict[str, Any]:
    """The payload of reply `body` when it is one of `variants` (`{}` for a unit variant)."""
    name, payload = _variant(body, "reply")
    if name not in variants:
        raise ProtocolError("expected a {!r} reply, got {!r}".format(" or ".join(variants), body))
    return {} if payload is None else payload


class Client:
    """One connection to the agent. Not thread-safe: use one per thread (module docs).

    `path`: the socket (default: `default_socket()`: $JPOWER_SOCKET, else
    $JPOWER_RUNTIME_DIR/jpower.sock, else /run/jpower/jpower.sock or a user's agent's).
    `encoding`: "json" or "bincode". `name`: how the agent's logs and `status().holder`
    name this client. `timeout`: seconds to wait for each reply. The constructor says
    hello and keeps the agent's answer in `self.agent`.
    """

    def __init__(
        self,
        path: Optional[str] = None,
        encoding: str = "json",
        name: str = "python",
        timeout: float = 30.0,
    ):
        if encoding not in ("json", "bincode"):
            raise ValueError("encoding is 'json' or 'bincode', not {!r}".format(encoding))
        self.path = path or default_socket()
        self.encoding = encoding
        self.name = name
        self.timeout = timeout
        self.last_minibatch: Optional[Dict[str, Any]] = None
        self.guard_events = 0
        """The budget guard's steps received so far (`guard` events: a cap added or lifted
        on the board this connection holds), counted as the client reads them off the
        socket (in any call: a reply's wait, `events()`), whether `events()` yields them
        yet or not."""
        self.events_dropped = 0
        """Events dropped, oldest first, because more than `MAX_QUEUED_EVENTS` waited
        unread."""
        self._next_id = 1
        self._buf = bytearray()
        self._events: Deque[Dict[str, Any]] = collections.deque()
        self._sock: Optional[socket.socket] = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(timeout)
            try:
                self._sock.connect(self.path)
            except OSError as e:
                raise ConnectionError(
                    "no jpower agent at {}: {} (is `jpower agent` running? its socket is"
                    " named by $JPOWER_SOCKET or the path given)".format(self.path, e.strerror or e)
                ) from e
            self.agent = self.hello()
        except BaseException:
            self.close()
            raise

    # -- connection ------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection (a session lease ends: the agent restores the mode)."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def shutdown(self) -> None:
        """Ends the connection from another thread: a call waiting on it (at the gate)
        raises ConnectionError, and so does every later call."""
        sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # already closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def fileno(self) -> int:
        """The socket's descriptor (for select/poll on events). Events already read off
        the socket while a method waited for its reply are queued, and do not make it
        readable: take `pending_events()` before waiting on it."""
        return self._socket().fileno()

    def _socket(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionError("the client is closed")
        return self._sock

    def _send(self, msg: Dict[str, Any]) -> None:
        if self.encoding == "json":
            # Checked as bincode would be: the agent closes the connection (and ends its
            # lease) on a JSON request it cannot decode, a typo in a variant's name included.
            encode_bincode(msg, REQUEST)
            data = json.dumps(msg, separators=(",", ":"), allow_nan=False).encode("utf-8")
            if len(data) > MAX_FRAME:
                raise ValueError("request of {} bytes exceeds {}".format(len(data), MAX_FRAME))
            data += b"\n"
        else:
            payload = encode_bincode(msg, REQUEST)
            if len(payload) > MAX_FRAME:
                raise ValueError("request of {} bytes exceeds {}".format(len(payload), MAX_FRAME))
            data = struct.pack(">I", len(payload)) + payload
        try:
            self._socket().sendall(data)
        except (BrokenPipeError, ConnectionResetError) as e:
            raise self._closed_why() from e

    def _closed_why(self) -> Exception:
        """Why the agent closed this connection, from its last message if it sent one (an
        idle timeout, a full socket buffer, input it could not decode): an AgentError, or
        a ConnectionError. The client is closed."""
        try:
            sock = self._socket()
            sock.settimeout(0.1)
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                self._buf += chunk
        except OSError:
            pass
        last = None
        try:
            while True:
                msg = self._parse()
                if msg is None:
                    break
                if last is not None and last.get("id") == 0:
                    self._queue(last["body"])  # events before the last word stay readable
                last = msg
        except ProtocolError:
            pass
        self.close()
        body = last.get("body") if isinstance(last, dict) else None
        if isinstance(body, dict) and "error" in body:
            e = body["error"]
            return AgentError(e.get("code", "?"), e.get("message", ""), 0)
        return ConnectionError("the agent closed the connection (restarted or stopped?)")

    def _queue(self, event: Dict[str, Any]) -> None:
        if len(self._events) >= MAX_QUEUED_EVENTS:
            self._events.popleft()
            self.events_dropped += 1
        self._events.append(event)

    def _parse(self) -> Optional[Dict[str, Any]]:
        """The next whole message in the buffer, if any. A bincode connection's refusal
        (too many clients) comes as one JSON line whatever the encoding."""
        if self.encoding == "json" or self._buf[:1] == b"{":
            while True:
                end = self._buf.find(b"\n")
                if end < 0:
                    if len(self._buf) > MAX_FRAME:
                        raise ProtocolError("a reply line exceeds {} bytes".format(MAX_FRAME))
                    return None
                line = bytes(self._buf[:end])
                del self._buf[: end + 1]
                if line.strip():
                    try:
                        return json.loads(line.decode("utf-8"))
                    except ValueError as e:
                        raise ProtocolError("malformed JSON reply: {}".format(e))
        if len(self._buf) < 4:
            return None
        (n,) = struct.unpack(">I", self._buf[:4])
        if n > MAX_FRAME:
            raise ProtocolError("reply frame of {} bytes exceeds {}".format(n, MAX_FRAME))
        if len(self._buf) < 4 + n:
            return None
        payload = bytes(self._buf[4 : 4 + n])
        del self._buf[: 4 + n]
        return decode_bincode(payload, REPLY)

    def _receive(self, deadline: Optional[float]) -> Optional[Dict[str, Any]]:
        """The next message, or None when `deadline` (a time.monotonic()) passes first.
        A deadline already past still takes what the socket holds, without waiting."""
        sock = self._socket()
        polled = False
        while True:
            msg = self._parse()
            if msg is not None:
                if not isinstance(msg, dict) or "id" not in msg or "body" not in msg:
                    raise ProtocolError("unexpected message {!r}".format(msg))
                if msg["id"] == 0 and isinstance(msg["body"], dict) and "guard" in msg["body"]:
                    self.guard_events += 1
                return msg
            if deadline is None:
                sock.settimeout(None)
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    if polled:
                        return None
                    polled = True
                    left = 0.0  # non-blocking
                sock.settimeout(left)
            try:
                chunk = sock.recv(65536)
            except (socket.timeout, BlockingIOError):
                return None
            finally:
                sock.settimeout(self.timeout)
            if not chunk:
                self.close()
                raise ConnectionError("the agent closed the connection")
            self._buf += chunk

    def _raise_if_error(self, msg: Dict[str, Any]) -> None:
        body = msg["body"]
        if isinstance(body, dict) and "error" in body:
            e = body["error"]
            if msg["id"] == 0:
                # Input the agent could not decode: it closes the connection after this.
                self.close()
            raise AgentError(e.get("code", "?"), e.get("message", ""), msg["id"])

    def request(self, body: Any, wait: Any = _CLIENT_TIMEOUT) -> Any:
        """Sends one request body (JSON shape, e.g. ``"status"`` or
        ``{"telemetry": {"window_ms": 500}}``) and returns its reply body (JSON shape).
        Raises AgentError for an error reply. Events that arrive meanwhile are queued for
        `events()`. An error with id 0 (the agent is closing this connection because of
        malformed input) is raised too. `wait`: seconds to wait for the reply (None:
        forever; by default the client's `timeout`). A request that timed out may still
        take effect (a `set_mode` may take the lease): its late reply is dropped when it
        comes. The request is checked against the protocol's types before it is sent, in
        either encoding: a malformed one (an unknown variant, a missing or unknown field,
        a wrong type) raises ValueError and the connection stays open."""
        wait = self.timeout if wait is _CLIENT_TIMEOUT else wait
        rid = self._next_id
        self._next_id += 1
        self._send({"id": rid, "body": body})
        deadline = None if wait is None else time.monotonic() + wait
        while True:
            msg = self._receive(deadline)
            if msg is None:
                raise TimeoutError("no reply to request {} within {} s".format(rid, wait))
            if msg["id"] == rid:
                self._raise_if_error(msg)
                return msg["body"]
            if msg["id"] == 0:
                self._raise_if_error(msg)
                self._queue(msg["body"])
            elif msg["id"] > rid:
                raise ProtocolError("reply to unknown request {}: {!r}".format(msg["id"], msg))
            # Else the late reply to an earlier request that timed out: dropped.

    # -- requests --------------------------------------------------------------------

    def hello(self, version: int = PROTOCOL_VERSION) -> Dict[str, Any]:
        """{"version", "agent", "board"}. The constructor calls it."""
        return _unwrap(self.request({"hello": {"version": version, "client": self.name}}), "hello")

    def status(self) -> Dict[str, Any]:
        """The board and what it does: board, soc, simulated, online_cpus, cpu_khz (per
        cluster [min, max, running]), gpu_hz ([min, max, running] or None), emc_cap_hz,
        holder, budget_w, guard, module_w, ring_path, last_switch_us (protocol.md's
        `Status` has them all)."""
        return _unwrap(self.request("status"), "status")

    def modes(self) -> Dict[str, Any]:
        """{"presets": [{"id", "name", "default"}], "space_size"}."""
        return _unwrap(self.request("modes"), "modes")

    def set_mode(
        self,
        preset: Optional[str] = None,
        cores: Optional[int] = None,
        cpu_khz: Optional[int] = None,
        gpu_hz: Optional[int] = None,
        emc_hz: Optional[int] = None,
        snap: bool = False,
        lease: str = "session",
        timeout_ms: Optional[int] = None,
    ) -> Dict[str, Any]:
        """Applies a preset (name or id, as a string) or pinned knobs (any subset; the
        others keep their requested values) under a lease: "session" (ends when this
        connection closes, or after `timeout_ms` without `renew()`) or "persistent"
        (until `release()`). Returns {"writes", "switch_us", "lease", "capped"}."""
        knobs = {
            "cores": _whole(cores, "cores"),
            "cpu_khz": _whole(cpu_khz, "cpu_khz"),
            "gpu_hz": _whole(gpu_hz, "gpu_hz"),
            "emc_hz": _whole(emc_hz, "emc_hz"),
        }
        if preset is None and all(v is None for v in knobs.values()):
            raise ValueError("set_mode needs a preset or at least one knob")
        if preset is not None:
            if any(v is not None for v in knobs.values()) or snap:
                raise ValueError("pass a preset or knobs, not both")
            mode = {"preset": {"name": str(preset)}}  # type: Dict[str, Any]
        else:
            knobs["snap"] = bool(snap)
            mode = {"knobs": knobs}
        body = {"set_mode": {"mode": mode, "lease": lease, "timeout_ms": timeout_ms}}
        return _unwrap(self.request(body), "mode_set")

    def renew(self) -> Dict[str, Any]:
        """Renews this client's lease (restarts its timeout). Returns {}."""
        return _unwrap(self.request("renew"), "ok")

    def release(self) -> Dict[str, Any]:
        """Ends this client's lease, restoring the settings from before it.
        Returns {"restored": bool} (False when no lease was held)."""
        return _unwrap(self.request("release"), "released")

    def set_budget(self, watts: Optional[float]) -> Dict[str, Any]:
        """Sets the power budget in watts (None clears it). Returns {"watts"}."""
        w = None if watts is None else float(watts)
        if w is not None and not math.isfinite(w):
            raise ValueError("a budget is a finite number of watts")
        return _unwrap(self.request({"set_budget": {"watts": w}}), "budget")

    def telemetry(self, window_ms: Optional[int] = None) -> Dict[str, Any]:
        """{"ring_path", "latest": {"t_ns", "module_mw", "rails": [{"name", "power_mw"}],
        "flags"} or None, "window": {"duration_ms", "samples", "mean_w", "energy_j"} or
        None (without `window_ms`)}."""
        return _unwrap(self.request({"telemetry": {"window_ms": window_ms}}), "telemetry")

    def minibatch_begin(self, kind: str, id: int) -> Dict[str, Any]:
        """Marks the start of minibatch `id` of `kind` ("train" or "infer"). Returns {}."""
        return _unwrap(self.request({"minibatch_begin": {"kind": kind, "id": id}}), "ok")

    def minibatch_phase(self, kind: str, id: int, phase: str) -> Dict[str, Any]:
        """Marks that open minibatch `id` enters `phase` ("fetch": waiting for data, the
        phase a minibatch begins in; "compute"). Returns {}."""
        body = {"minibatch_phase": {"kind": kind, "id": id, "phase": phase}}
        return _unwrap(self.request(body), "ok")

    def minibatch_end(self, kind: str, id: int) -> Dict[str, Any]:
        """Marks its end: {"kind", "id", "duration_ms", "mean_w", "energy_j"}, and after a
        phase marker also {"fetch_ms", "fetch_j", "compute_ms", "compute_j"}."""
        body = self.request({"minibatch_end": {"kind": kind, "id": id}})
        mb = _unwrap(body, "minibatch", "phased_minibatch")
        self.last_minibatch = mb
        return mb

    def loader(
        self,
        batches: Iterable[Any],
        kind: str = "train",
        first_id: int = 0,
        on_minibatch: Optional[Callable[[Dict[str, Any]], None]] = None,
    ) -> Iterator[Any]:
        """Yields the batches of `batches` (any iterable: a list, a generator, PyTorch's
        DataLoader; nothing is imported) with phase markers around each, numbered from
        `first_id`: a minibatch begins (in "fetch") when the loop asks for the next batch,
        enters "compute" when it arrives and ends when the loop asks for the one after,
        leaves the loop or raises. Each end's reply goes to `on_minibatch` (and
        `self.last_minibatch`). A fetch that finds the iterable exhausted (or that
        raises) has begun a minibatch the agent cannot take back: it is ended at once
        and its reply dropped, and `minibatch_totals` counts it (one minibatch more than
        the batches, without phases, of the empty fetch's time)."""
        it = iter(batches)
        id = first_id
        nothing = object()
        while True:
            self.minibatch_begin(kind, id)
            batch = nothing
            try:
                batch = next(it)
            except StopIteration:
                pass
            finally:
                if batch is nothing:  # ended or raised: no batch, no minibatch
                    self.request({"minibatch_end": {"kind": kind, "id": id}})
            if batch is nothing:
                return
            self.minibatch_phase(kind, id, "compute")
            try:
                yield batch
            finally:
                mb = self.minibatch_end(kind, id)
                if on_minibatch is not None:
                    on_minibatch(mb)
            id += 1

    @contextlib.contextmanager
    def minibatch(self, kind: str, id: int) -> Iterator[Dict[str, Any]]:
        """Brackets a block with minibatch markers. Yields a dict that is filled with the
        `minibatch_end` reply when the block ends (also kept in `self.last_minibatch`);
        the end marker is sent even when the block raises."""
        result = {}  # type: Dict[str, Any]
        self.minibatch_begin(kind, id)
        try:
            yield result
        finally:
            result.update(self.minibatch_end(kind, id))

    def subscribe(self, every_ms: int) -> Dict[str, Any]:
        """Asks for a {"sample": ...} event every `every_ms` (at least 10; 0 stops).
        Returns {}. Read them with `events()`, at least every few seconds: a client that
        reads nothing for 5 s while its socket buffer is full is closed by the agent, and
        its session lease ends (module docs)."""
        return _unwrap(self.request({"subscribe": {"every_ms": every_ms}}), "ok")

    def set_averaging(self, samples: int) -> Dict[str, Any]:
        """Sets every INA3221 to average `samples` conversions (1, 4, 16, ..., 1024) under
        this client's lease (a session lease unless it holds one): the averaging from
        before comes back when the lease ends. Returns {"samples", "refresh_us",
        "rate_hz"}; the agent's sampler restarts in a new ring at the same path."""
        return _unwrap(self.request({"set_averaging": {"samples": samples}}), "averaging")

    def activity(self) -> Dict[str, Any]:
        """The newest record of the agent's activity counters: {"age_ms", "window_ms",
        "gpu_load_pm", "gpu_hz", "emc_activity_pm", "emc_hz", "fan_pwm", "fan_rpm",
        "ram_used_kb", "ram_total_kb", "swap_used_kb", "swap_total_kb", "cpus": [{"cpu",
        "util_pm", "khz"}], "disks": [{"name", "major", "minor", "read_bps"}]}; a counter the
        board lacks is None. Raises AgentError `not_found` when the agent runs with the
        counters off (or before its first record)."""
        return _unwrap(self.request("activity"), "activity")

    def minibatch_totals(self) -> Dict[str, Any]:
        """Every connection's ended minibatches summed since the agent started, per kind
        (protocol version 5): {"train": {...}, "infer": {...}}, each {"minibatches",
        "phased", "duration_ms", "energy_j", "fetch_ms", "compute_ms"} (the phase times of
        the minibatches that had phase markers). Read it before and after another
        program's work and take the difference."""
        return _unwrap(self.request("minibatch_totals"), "minibatch_totals")

    # -- the real-time scheduler (protocol version 6) -----------------------------------

    def schedule_plan(
        self,
        max_batch: int,
        slo_ms: float,
        rate_per_s: Optional[float] = None,
        phase_modes: Optional[Dict[str, int]] = None,
    ) -> Dict[str, Any]:
        """Sets the real-time schedule: inference batches of at most `max_batch` requests,
        a latency target of `slo_ms` (served later counts as late), a declared arrival
        rate (the agent queues requests itself; None: only submitted ones) and optional
        per-phase modes {"train_gpu_hz", "train_emc_hz", "infer_gpu_hz", "infer_emc_hz"}
        (switched at phase changes under this client's session lease). Taken at the next
        turn boundary, queued requests kept. Returns the schedule, as `schedule_status`."""
        plan = {
            "max_batch": max_batch,
            "slo_ms": float(slo_ms),
            "rate_per_s": None if rate_per_s is None else float(rate_per_s),
            "phase_modes": phase_modes,
        }
        return _unwrap(self.request({"schedule_plan": plan}), "schedule")

    def gate(self, kind: str, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Waits for this client's turn on the GPU to run a minibatch of `kind` ("train"
        or "infer"): {"kind", "turn", "requests"} (an inference batch's request numbers,
        at most the plan's max_batch; empty for training). The turn ends at this client's
        next `minibatch_end` of `kind`. Waits forever by default: the agent may hold the
        gate as long as others run. A wait that raises (the timeout's TimeoutError, a
        Ctrl-C) closes this client: the gate stays pending in the agent, whose turn would
        otherwise come unheard and hold the GPU until this client's next end marker or
        its idle timeout; the closed connection withdraws it."""
        try:
            return _unwrap(self.request({"schedule_gate": {"kind": kind}}, wait=timeout), "turn")
        except (AgentError, ProtocolError, ValueError):
            # Refused or malformed: answered, nothing pending; the client stays open.
            raise
        except BaseException:
            self.close()
            raise

    @contextlib.contextmanager
    def turn(self, kind: str, id: int) -> Iterator[Dict[str, Any]]:
        """One scheduled minibatch: begins minibatch `id` of `kind` (in "fetch": waiting
        for the turn), waits at the gate, marks "compute" and yields the turn; when the
        block ends marks the end, which ends the turn. The yielded dict gets the end's
        reply under "minibatch". A training block that raises still ends its turn. A wait
        at the gate that raises (Ctrl-C), or an inference block that raises, closes this
        client instead: the agent reads nothing more from a connection whose gate is
        pending, so an end marker would end the next turn as if it had run, and an
        inference batch that did not run must not be reported served; the closed
        connection aborts the turn and queues its requests again for the next server."""
        self.minibatch_begin(kind, id)
        t = self.gate(kind)
        try:
            self.minibatch_phase(kind, id, "compute")
            yield t
        except BaseException:
            if kind == "infer":
                self.close()
            else:
                with contextlib.suppress(Exception):
                    t["minibatch"] = self.minibatch_end(kind, id)
            raise
        t["minibatch"] = self.minibatch_end(kind, id)

    def submit(self) -> int:
        """Queues one inference request; returns its number. A {"served": {"request",
        "latency_ms", "batch"}} event follows when the batch that held it ends (read it
        with `events()`)."""
        return _unwrap(self.request("schedule_submit"), "submitted")["request"]

    def schedule_status(self) -> Dict[str, Any]:
        """The scheduler's plan (None before one was set) and accounting: {"plan",
        "replan_pending", "replans", "mode_switches", "waiting", "queued", "served",
        "late", "latency_sum_ms", "latency_max_ms", "train", "infer"}, the last two
        {"granted", "ended", "aborted", "duration_ms", "energy_j"}."""
        return _unwrap(self.request("schedule_status"), "schedule")

    def events(self, timeout: Optional[float] = None) -> Iterator[Dict[str, Any]]:
        """Yields events (id-0 messages) as JSON-shaped bodies: {"sample": {...}},
        {"guard": {"step", "module_w", "budget_w"}}, {"external_change": {"paths"}},
        {"served": {"request", "latency_ms", "batch"}}, {"lease_ended": {"reason"}}.
        Queued events come first. Ends when none arrives within `timeout` seconds
        (None: waits forever; 0: only what has already arrived). Requests may be made
        between iterations."""
        while True:
            if self._events:
                yield self._events.popleft()
                continue
            deadline = None if timeout is None else time.monotonic() + timeout
            msg = self._receive(deadline)
            if msg is None:
                return
            if 0 < msg["id"] < self._next_id:
                continue  # the late reply to a request that timed out or was interrupted
            if msg["id"] != 0:
                raise ProtocolError("reply to no request sent: {!r}".format(msg))
            self._raise_if_error(msg)
            yield msg["body"]

    def pending_events(self) -> List[Dict[str, Any]]:
        """The events received so far, without waiting (queued and already readable)."""
        return list(self.events(timeout=0))
