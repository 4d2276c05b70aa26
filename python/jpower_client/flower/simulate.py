"""A federated-training fleet of simulated Jetsons under Flower, with and without jpower.

    FLWR_TELEMETRY_ENABLED=0 python3 -m jpower_client.flower.simulate \\
        --boards orin-agx,xavier-agx,xavier-nx,nano --rounds 3 --json

Starts and stops everything it needs, in a temporary directory: one `jpower agent --sim
BOARD` per board (each with its own runtime directory and socket, where `jpower profile`
writes the board's profile of the workload), Flower's SuperLink and one SuperNode per board
on loopback, and submits the app of `fleet` three times with `flwr run`: `jpower`, a power
budget for each board (`--budget-fraction` of its fastest profiled mode's power, handed out
by `JpowerStrategy`); `jpower-but-straggler`, the same but for the straggler (the board
slowest at its fastest mode, which every round waits for); and `no-budget`, every board at
its fastest profiled mode (what it does without jpower's choice). Flower's telemetry and its
runtime dependency installation are off. Needs a `jpower` binary: on PATH, or named by
`--jpower` or `$JPOWER_BIN`. A SIGTERM stops everything it started, as an error does.

Asserts that every round completes on every board, that each client's reported energy is
within `--energy-tolerance` of the simulated board's true energy over its marked
minibatches, that no board's true mean power exceeded its budget, and that every board is back
at its starting settings with no lease held at the end. Prints per run and round: the wall
time, the slowest client's training time, the fleet's and each board's energy.
"""

import argparse
import json
import os
import shutil
import socket
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

from .. import Client
from .modes import fastest_within, read_profile

APP_PYPROJECT = """\
[project]
name = "jpower-fleet"
version = "1.0.0"

[tool.flwr.app]
publisher = "jpower"

[tool.flwr.app.components]
serverapp = "jpower_client.flower.fleet:server_app"
clientapp = "jpower_client.flower.fleet:client_app"

[tool.flwr.app.config]
num-server-rounds = 3
nodes = 1
lr = 0.5
minibatches = 6
jpower-budgets = "{}"
jpower-report = ""
"""


def _args(argv: List[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python3 -m jpower_client.flower.simulate", description=__doc__.split("\n")[0]
    )
    p.add_argument(
        "--boards",
        default="orin-agx,xavier-agx,xavier-nx,nano",
        help="simulated boards, comma-separated",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--minibatches", type=int, default=6, help="minibatches each client trains per round"
    )
    p.add_argument(
        "--workload",
        default="resnet18",
        help="the simulated training workload that paces the clients",
    )
    p.add_argument(
        "--budget-fraction",
        type=float,
        default=0.6,
        help="each board's budget: this share of its fastest profiled mode's power",
    )
    p.add_argument(
        "--energy-tolerance",
        type=float,
        default=0.02,
        help="reported against true energy, relative",
    )
    p.add_argument(
        "--jpower",
        default=os.environ.get("JPOWER_BIN") or "jpower",
        help="the jpower binary [$JPOWER_BIN, else jpower]",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _tool(name: str) -> str:
    """A Flower command: beside this Python (a virtual environment's bin), else on PATH."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if not found:
        raise SystemExit("{} not found: pip install './python[flower]' from a jpower checkout".format(name))
    return found


def _wait(what: str, ready, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError("{} not ready after {} s".format(what, timeout))
        time.sleep(0.1)


def _settings(status: Dict[str, Any]) -> Dict[str, Any]:
    """What a restore brings back: the knobs' requested values and the lease holder."""
    keys = ("online_cpus", "cpu_khz", "gpu_hz", "emc_cap_hz", "holder")
    s = {k: status[k] for k in keys}
    s["cpu_khz"] = [c[:2] for c in s["cpu_khz"]]  # [min, max]: the running clock follows load
    s["gpu_hz"] = s["gpu_hz"] and s["gpu_hz"][:2]
    return s


class Fleet:
    """The processes of one simulation, stopped in reverse order by `close`."""

    def __init__(self, base: Path, args: argparse.Namespace):
        self.base, self.args = base, args
        self.boards = args.boards.split(",")
        self.procs: List[subprocess.Popen] = []
        self.env = dict(os.environ, FLWR_TELEMETRY_ENABLED="0", FLWR_HOME=str(base / "flwr"))
        # The processes Flower spawns (flower-superexec, flwr-serverapp, flwr-clientapp)
        # find its commands on PATH and this package on PYTHONPATH.
        tools = str(Path(_tool("flwr")).parent)
        package_root = str(Path(__file__).resolve().parents[2])
        self.env["PATH"] = os.pathsep.join((tools, os.environ.get("PATH", "")))
        self.env["PYTHONPATH"] = os.pathsep.join(
            p for p in (package_root, os.environ.get("PYTHONPATH")) if p
        )

    def _start(self, cmd: List[str], log: str) -> None:
        out = open(self.base / log, "w")
        # A session of its own: `close` stops the process and whatever it spawned (Flower's
        # superexec, serverapp and clientapps) together.
        self.procs.append(
            subprocess.Popen(
                cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        )

    def _jpower(self, board: str, *args: str) -> List[str]:
        return [self.args.jpower, "--sim", board, "--runtime-dir", str(self.base / board), *args]

    def start_agents(self) -> Dict[str, Dict[str, Any]]:
        """Profiles each board and starts its agent; returns each board's settings."""
        settings = {}
        for b in self.boards:
            profile = self.base / b / "profile-{}.csv".format(self.args.workload)
            (self.base / b).mkdir()
            subprocess.run(
                self._jpower(
                    b,
                    "profile",
                    "--workload",
                    self.args.workload,
                    "--modes",
                    "20",
                    "--out",
                    str(profile),
                ),
                check=True,
                capture_output=True,
            )
            self._start(self._jpower(b, "agent"), "agent-{}.log".format(b))
            sock = self.base / b / "jpower.sock"
            _wait("the {} agent".format(b), sock.exists)
            with Client(str(sock), name="simulate") as c:
                settings[b] = _settings(c.status())
        return settings

    def start_flower(self) -> None:
        """The SuperLink, one SuperNode per board, and the `flwr` connection to them."""
        port = _free_port()
        self._start(
            [
                _tool("flower-superlink"),
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--disable-runtime-dependency-installation",
            ],
            "superlink.log",
        )
        _wait("the SuperLink", lambda: _listening(port))
        for b in self.boards:
            rt = self.base / b
            node = {
                "jpower-name": b,
                "jpower-sim": b,
                "jpower-bin": self.args.jpower,
                "jpower-runtime-dir": str(rt),
                "jpower-socket": str(rt / "jpower.sock"),
                "jpower-profile": str(rt / "profile-{}.csv".format(self.args.workload)),
                "jpower-workload": self.args.workload,
                "jpower-log": str(rt / "rounds.jsonl"),
            }
            self._start(
                [
                    _tool("flower-supernode"),
                    "--insecure",
                    "--superlink",
                    "127.0.0.1:{}".format(port),
                    "--port",
                    str(_free_port()),
                    "--node-config",
                    " ".join("{}={}".format(k, json.dumps(v)) for k, v in node.items()),
                ],
                "supernode-{}.log".format(b),
            )
        home = self.base / "flwr"
        home.mkdir(exist_ok=True)
        (home / "config.toml").write_text(
            '[superlink]\ndefault = "fleet"\n\n'
            '[superlink.fleet]\naddress = "127.0.0.1:{}"\ninsecure = true\n'.format(port)
        )
        app = self.base / "app"
        app.mkdir()
        (app / "pyproject.toml").write_text(APP_PYPROJECT)

    def run(self, name: str, budgets: Dict[str, float]) -> Dict[str, Any]:
        """One `flwr run` of the app; returns the server's rounds and each board's log."""
        report = self.base / "report-{}.json".format(name)
        overrides = self.base / "run-{}.toml".format(name)
        overrides.write_text(
            "num-server-rounds = {}\nnodes = {}\nminibatches = {}\n"
            "jpower-budgets = {}\njpower-report = {}\n".format(
                self.args.rounds,
                len(self.boards),
                self.args.minibatches,
                json.dumps(json.dumps(budgets)),
                json.dumps(str(report)),
            )
        )
        with open(self.base / "flwr-run-{}.log".format(name), "w") as log:
            subprocess.run(
                [
                    _tool("flwr"),
                    "run",
                    str(self.base / "app"),
                    "fleet",
                    "--run-config",
                    str(overrides),
                    "--stream",
                ],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=600,
            )
        _wait("the {} run's report".format(name), report.exists, timeout=600)
        logs = {}
        for b in self.boards:
            # A board whose rounds all failed wrote no log: `_check` says which rounds.
            path = self.base / b / "rounds.jsonl"
            logs[b] = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
            if path.exists():
                path.unlink()
        return {"rounds": json.loads(report.read_text()), "boards": logs}

    def close(self) -> None:
        for p in reversed(self.procs):
            _signal_group(p, signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                _signal_group(p, signal.SIGKILL)
                p.wait()
            # What the process spawned and left behind goes with it.
            _signal_group(p, signal.SIGKILL)


def _signal_group(p: subprocess.Popen, sig: int) -> None:
    """Sends `sig` to `p`'s process group (its session's), gone or not."""
    try:
        os.killpg(p.pid, sig)
    except ProcessLookupError:
        pass


def _check(
    name: str, run: Dict[str, Any], budgets: Dict[str, float], args: argparse.Namespace
) -> None:
    """The run's asserts (see the module's docstring)."""
    assert [r["round"] for r in run["rounds"]] == list(range(1, args.rounds + 1)), run["rounds"]
    for r in run["rounds"]:
        assert sorted(r["clients"]) == sorted(run["boards"]), "round {}: {}".format(
            r["round"], sorted(r["clients"])
        )
    for b, rounds in run["boards"].items():
        assert sorted(r["round"] for r in rounds) == list(range(1, args.rounds + 1)), (
            name,
            b,
            rounds,
        )
        for r in rounds:
            err = abs(r["energy_j"] - r["true_energy_j"]) / r["true_energy_j"]
            assert (
                err <= args.energy_tolerance
            ), "{} {} round {}: {:.3f} J reported, {:.3f} J true".format(
                name, b, r["round"], r["energy_j"], r["true_energy_j"]
            )
            # The board's true draw: the telemetry's reading of it is the one checked above.
            true_w = r["true_energy_j"] / r["train_time_s"]
            if b in budgets:
                assert (
                    true_w <= budgets[b]
                ), "{} {} round {}: {:.3f} W over its {:.2f} W budget".format(
                    name, b, r["round"], true_w, budgets[b]
                )


def _table(run: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Per round: the server's view, and each board's metrics with its true energy."""
    truth = {
        (b, r["round"]): r["true_energy_j"] for b, rounds in run["boards"].items() for r in rounds
    }
    keys = (
        "energy_j",
        "train_time_s",
        "mean_power_w",
        "budget_w",
        "mode_cores",
        "mode_cpu_khz",
        "mode_gpu_hz",
        "mode_emc_hz",
    )
    return [
        {
            "round": r["round"],
            "wall_s": r["wall_s"],
            "slowest_train_time_s": r["fleet"]["slowest_train_time_s"],
            "energy_j": r["fleet"]["energy_j"],
            "boards": {
                b: dict({k: c[k] for k in keys}, true_energy_j=truth[b, r["round"]])
                for b, c in sorted(r["clients"].items())
            },
        }
        for r in run["rounds"]
    ]


def main(argv: List[str]) -> int:
    args = _args(argv)
    if shutil.which(args.jpower) is None:
        print(
            "jpower-flower-simulate: no jpower binary at {!r}: put jpower on PATH, or name it"
            " with --jpower or $JPOWER_BIN".format(args.jpower),
            file=sys.stderr,
        )
        return 2
    # A SIGTERM (a CI timeout, `timeout`) stops the fleet as an error does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    base = Path(tempfile.mkdtemp(prefix="jpower-flower-"))
    fleet = Fleet(base, args)
    started = time.monotonic()
    try:
        before = fleet.start_agents()
        fastest = {
            b: fastest_within(
                read_profile(str(base / b / "profile-{}.csv".format(args.workload))), None
            )
            for b in fleet.boards
        }
        budgets = {b: round(args.budget_fraction * m.power_w, 2) for b, m in fastest.items()}
        # The straggler: the board slowest at its fastest mode, which every round waits for.
        straggler = max(fleet.boards, key=lambda b: fastest[b].time_ms)
        plans = {
            "jpower": budgets,
            "jpower-but-straggler": {b: w for b, w in budgets.items() if b != straggler},
            "no-budget": {},
        }
        fleet.start_flower()
        runs = {name: fleet.run(name, plan) for name, plan in plans.items()}
        for name, plan in plans.items():
            _check(name, runs[name], plan, args)
        for b in fleet.boards:
            with Client(str(base / b / "jpower.sock"), name="simulate") as c:
                after = _settings(c.status())
            assert after == before[b], "{} not restored: {} then {}".format(b, before[b], after)
    except BaseException:
        print("the simulation failed; its logs are in {}".format(base), file=sys.stderr)
        fleet.close()
        raise
    fleet.close()
    shutil.rmtree(base)
    out = {
        "budgets_w": budgets,
        "straggler": straggler,
        "seconds": time.monotonic() - started,
        "runs": {name: _table(run) for name, run in runs.items()},
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        for name, rows in out["runs"].items():
            print("{}:".format(name))
            for r in rows:
                per = "  ".join(
                    "{} {:.1f} J".format(b, c["energy_j"]) for b, c in r["boards"].items()
                )
                print(
                    "  round {round}: wall {wall_s:.2f} s, slowest {slowest_train_time_s:.2f} s,"
                    " fleet {energy_j:.1f} J  ({per})".format(per=per, **r)
                )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
