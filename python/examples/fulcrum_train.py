#!/usr/bin/env python3
"""A training loop scheduled by the jpower agent's real-time scheduler (protocol version 6).

Sets the schedule (inference batches of at most --max-batch requests, a latency target,
optionally a declared arrival rate and a pair of per-phase modes), then runs --steps
training minibatches, each in its own turn on the GPU: the minibatch begins ("fetch":
waiting for the turn), the gate grants the turn, the minibatch computes and ends, which
hands the GPU back (to inference first when requests wait). Prints one JSON line: every
minibatch's reply and their sums.

    jpower --runtime-dir /tmp/fulcrum --sim orin-agx agent &
    export JPOWER_SOCKET=/tmp/fulcrum/jpower.sock
    python3 python/examples/fulcrum_train.py --steps 50 &
    python3 python/examples/fulcrum_infer.py --requests 100 --rate 40
"""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jpower_client import Client  # noqa: E402


def train_step(batch, step_ms):
    """Stands in for the forward pass, the backward pass and the optimiser step."""
    time.sleep(step_ms / 1000.0)


def main():
    ap = argparse.ArgumentParser(description="A training loop under jpower's scheduler.")
    ap.add_argument("--steps", type=int, default=50, help="training minibatches")
    ap.add_argument("--step-ms", type=float, default=20.0, help="compute time of each")
    ap.add_argument("--max-batch", type=int, default=4, help="most requests per inference batch")
    ap.add_argument("--slo-ms", type=float, default=100.0, help="the latency target")
    ap.add_argument("--rate", type=float, help="declare an arrival rate, requests per second")
    ap.add_argument(
        "--phase-modes",
        metavar="TRAIN_GPU_HZ,TRAIN_EMC_HZ,INFER_GPU_HZ,INFER_EMC_HZ",
        help="switch the GPU and EMC clocks at every phase change",
    )
    ap.add_argument("--encoding", choices=["json", "bincode"], default="json")
    args = ap.parse_args()

    phase_modes = None
    if args.phase_modes:
        train_gpu, train_emc, infer_gpu, infer_emc = (int(x) for x in args.phase_modes.split(","))
        phase_modes = {
            "train_gpu_hz": train_gpu,
            "train_emc_hz": train_emc,
            "infer_gpu_hz": infer_gpu,
            "infer_emc_hz": infer_emc,
        }
    with Client(encoding=args.encoding, name="trainer") as c:
        c.schedule_plan(
            max_batch=args.max_batch,
            slo_ms=args.slo_ms,
            rate_per_s=args.rate,
            phase_modes=phase_modes,
        )
        turns, minibatches = [], []
        for step in range(args.steps):
            batch = step  # the data loader's batch, fetched before asking for the GPU
            with c.turn("train", step) as turn:
                train_step(batch, args.step_ms)
            turns.append(turn["turn"])
            minibatches.append(turn["minibatch"])
        print(
            json.dumps(
                {
                    "role": "train",
                    "turns": turns,
                    "minibatches": minibatches,
                    "duration_ms": sum(m["duration_ms"] for m in minibatches),
                    "energy_j": sum(m["energy_j"] for m in minibatches),
                    "waited_ms": sum(m["fetch_ms"] for m in minibatches),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
