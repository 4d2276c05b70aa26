#!/usr/bin/env python3
"""An inference server and its users, scheduled by the jpower agent's real-time scheduler
(protocol version 6).

Two connections in two threads. The users submit --requests requests, Poisson at --rate
per second, and wait for each one's `served` event. The server waits at the gate for
inference turns; each turn names the requests of one batch (the scheduler chose its
size), which the server runs between the trainer's minibatches, marking the batch as an
inference minibatch; its end serves the batch. The server stops once every request its
users submitted is served, by it or by another server (a batch may also hold requests the
agent queued itself, for a rate a trainer declared with `fulcrum_train.py --rate`, or
another client's). Prints one JSON line: what was submitted, each `served` event, the
batches the server ran and their energy (and `lost`, why, where the agent went away);
exits 1, saying how many, where requests went unserved for --timeout seconds or the agent
went away.

    jpower --runtime-dir /tmp/fulcrum --sim orin-agx agent &
    export JPOWER_SOCKET=/tmp/fulcrum/jpower.sock
    python3 python/examples/fulcrum_train.py --steps 50 &
    python3 python/examples/fulcrum_infer.py --requests 100 --rate 40
"""

import argparse
import contextlib
import json
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jpower_client import Client  # noqa: E402


def run_batch(requests, batch_ms, per_request_ms):
    """Stands in for one forward pass over the batch's inputs."""
    time.sleep((batch_ms + per_request_ms * len(requests)) / 1000.0)


def serve(c, args, result, all_served):
    """The inference server, one turn per batch, until every request the users submitted
    is served (by this server or by another one: any number may connect). It goes to the
    gate only while the agent has a request waiting; when another server took that batch
    first, it waits there until the next request, or until the users, all served, shut
    its connection."""
    batches = []
    try:
        while not all_served.is_set():
            if c.schedule_status()["waiting"] == 0:
                time.sleep(0.002)
                continue
            with c.turn("infer", len(batches)) as turn:
                run_batch(turn["requests"], args.batch_ms, args.per_request_ms)
            batches.append(
                {
                    "turn": turn["turn"],
                    "requests": turn["requests"],
                    "energy_j": turn["minibatch"]["energy_j"],
                    "duration_ms": turn["minibatch"]["duration_ms"],
                    "compute_j": turn["minibatch"]["compute_j"],
                    "compute_ms": turn["minibatch"]["compute_ms"],
                }
            )
    except ConnectionError as e:
        if not all_served.is_set():
            result.setdefault("lost", str(e))
    result["batches"] = batches


def use(args, result, all_served, server):
    """The users: submit at a Poisson rate, wait for every `served` event, then stop the
    server."""
    gaps = random.Random(args.seed)
    submitted, served = result["submitted"], []

    def note(events):
        for event in events:
            if "served" in event:
                served.append(event["served"])
                if {s["request"] for s in served} >= set(submitted):
                    return

    with Client(encoding=args.encoding, name="users") as c:
        try:
            for _ in range(args.requests):
                submitted.append(c.submit())
                time.sleep(gaps.expovariate(args.rate))
            if submitted:
                note(c.events(timeout=args.timeout))
        except ConnectionError as e:
            # The agent went away: what was served until then still counts (the events
            # that came while submitting are queued in the client).
            result.setdefault("lost", str(e))
            with contextlib.suppress(ConnectionError):
                note(c.events(timeout=0))
    result["served"] = served
    all_served.set()
    server.shutdown()


def main():
    ap = argparse.ArgumentParser(description="An inference server under jpower's scheduler.")
    ap.add_argument("--requests", type=int, default=100, help="requests to submit and serve")
    ap.add_argument("--rate", type=float, default=40.0, help="mean arrivals per second")
    ap.add_argument("--batch-ms", type=float, default=4.0, help="fixed time of a batch")
    ap.add_argument("--per-request-ms", type=float, default=1.0, help="time per request")
    ap.add_argument("--timeout", type=float, default=30.0, help="seconds to wait for an event")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--encoding", choices=["json", "bincode"], default="json")
    args = ap.parse_args()

    result = {"role": "infer", "submitted": []}
    all_served = threading.Event()
    with Client(encoding=args.encoding, name="infer-server") as server:
        threads = [
            threading.Thread(target=serve, args=(server, args, result, all_served)),
            threading.Thread(target=use, args=(args, result, all_served, server)),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    latencies = sorted(s["latency_ms"] for s in result.get("served", []))
    result["latency_ms"] = {
        "p50": latencies[len(latencies) // 2] if latencies else None,
        "max": latencies[-1] if latencies else None,
    }
    print(json.dumps(result), flush=True)
    unserved = set(result["submitted"]) - {s["request"] for s in result.get("served", [])}
    if "lost" in result:
        sys.exit(
            "fulcrum_infer: the agent went away ({}) with {} of {} requests served".format(
                result["lost"], len(result["submitted"]) - len(unserved), len(result["submitted"])
            )
        )
    if unserved:
        sys.exit(
            "fulcrum_infer: {} of {} requests were not served within {} s of the last event".format(
                len(unserved), len(result["submitted"]), args.timeout
            )
        )


if __name__ == "__main__":
    main()
