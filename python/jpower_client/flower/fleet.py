"""The Flower app of the fleet simulation (`simulate`): a ServerApp running FedAvg under
`JpowerStrategy`, and a ClientApp that trains a small numpy model on synthetic data on a
simulated board. Needs flwr and numpy.

Each train round of the ClientApp, on the board its SuperNode names in its node config:
the agent pins the fastest profiled mode within the round's budget (`PowerRound`); `jpower
sim load` loads the simulated board as training `jpower-workload` does at that mode and says
how long one of its minibatches takes there; after the rails have settled, every minibatch
runs a numpy SGD step and then waits out the rest of the board's minibatch time, between
the agent's markers; then the board idles and the lease ends. Each round is appended to the
board's log (`jpower-log`, JSON lines) with the simulated board's true energy for the
marked window, which `simulate` checks the reported energy against.
"""

import json
import subprocess
import time
from typing import Any, Dict, List, Tuple

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from .. import Client
from .client import train_reply
from .modes import read_profile
from .round import PowerRound, budget_for
from .strategy import JpowerStrategy

FEATURES = 16
BATCH = 16
SETTLE_S = 1.0
"""Two of the simulated sensors' refresh intervals (about 430 ms at the INA3221's default
averaging, docs/telemetry-ring.md; the first value after a change averages across it), so
the marked window starts with the rails settled."""

server_app = ServerApp()
client_app = ClientApp()


@server_app.main()
def server(grid: Grid, context: Context) -> None:
    """FedAvg over every node, `num-server-rounds` rounds, the budgets of the run config's
    `jpower-budgets` (JSON: name -> W); the rounds go to `jpower-report` (JSON)."""
    cfg = context.run_config
    nodes = int(cfg["nodes"])
    inner = FedAvg(fraction_evaluate=0.0, min_train_nodes=nodes, min_available_nodes=nodes)
    strategy = JpowerStrategy(inner, budgets=json.loads(str(cfg["jpower-budgets"])))
    start = ConfigRecord({"lr": float(cfg["lr"]), "minibatches": int(cfg["minibatches"])})
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord([np.zeros(FEATURES + 1)]),
        num_rounds=int(cfg["num-server-rounds"]),
        train_config=start,
    )
    with open(str(cfg["jpower-report"]), "w") as f:
        json.dump(strategy.rounds, f)


def _data(name: str, n: int) -> Tuple[np.ndarray, np.ndarray]:
    """The client's shard: a linear classification task shared by the fleet, each board's
    samples its own."""
    w = np.random.default_rng(0).normal(size=FEATURES)
    x = np.random.default_rng(sum(name.encode())).normal(size=(n, FEATURES))
    return x, (x @ w > 0).astype(float)


def _sgd_step(w: np.ndarray, x: np.ndarray, y: np.ndarray, lr: float) -> np.ndarray:
    """One logistic-regression step (the last weight is the bias)."""
    p = 1.0 / (1.0 + np.exp(-(x @ w[:-1] + w[-1])))
    g = p - y
    return w - lr * np.concatenate([x.T @ g, [g.sum()]]) / len(y)


def _sim_load(node: Dict[str, Any], workload: str = "") -> Dict[str, Any]:
    """`jpower sim load` on this node's simulated board (idle without a workload)."""
    cmd = [str(node["jpower-bin"]), "--sim", str(node["jpower-sim"])]
    cmd += ["--runtime-dir", str(node["jpower-runtime-dir"]), "--json", "sim", "load"]
    if workload:
        cmd += ["--workload", workload]
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    """One round on this node's simulated board (see the module's docstring)."""
    node = context.node_config
    name = str(node["jpower-name"])
    config = msg.content["config"]
    minibatches, lr = int(config["minibatches"]), float(config["lr"])
    (w,) = msg.content["arrays"].to_numpy_ndarrays()
    x, y = _data(name, minibatches * BATCH)
    modes = read_profile(str(node["jpower-profile"]))
    windows: List[Tuple[float, float]] = []
    with Client(str(node["jpower-socket"]), name="flower-" + name) as agent:
        with PowerRound(agent, modes, budget_for(config, name)) as rnd:
            loaded = _sim_load(node, str(node["jpower-workload"]))
            time.sleep(SETTLE_S)
            try:
                for i in range(minibatches):
                    with rnd.minibatch() as mb:
                        t0 = time.monotonic()
                        batch = slice(i * BATCH, (i + 1) * BATCH)
                        w = _sgd_step(w, x[batch], y[batch], lr)
                        time.sleep(max(0.0, loaded["minibatch_s"] - (time.monotonic() - t0)))
                    windows.append((mb["duration_ms"] / 1e3, loaded["module_w"]))
            finally:
                _sim_load(node)
    record = {"round": int(config["server-round"]), "name": name, **rnd.metrics()}
    record["true_energy_j"] = sum(s * watts for s, watts in windows)
    with open(str(node["jpower-log"]), "a") as f:
        f.write(json.dumps(record) + "\n")
    return train_reply(msg, ArrayRecord([w]), rnd, name, len(y))
