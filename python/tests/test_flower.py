#!/usr/bin/env python3
"""Tests of the Flower integration's pure-Python parts: the budget-to-mode choice, the
round's metrics and lease, the budgets a train config hands out, and the fleet aggregate.

    python3 python/tests/test_flower.py

Needs neither flwr nor an agent (a stand-in records what a round asks of the agent; the
fleet simulation, `python3 -m jpower_client.flower.simulate`, drives the real ones).
"""

import contextlib
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from jpower_client import AgentError  # noqa: E402
from jpower_client.flower import (  # noqa: E402
    Mode,
    PowerRound,
    aggregate,
    budget_for,
    fastest_within,
    read_profile,
)

PROFILE = """cores,cpu_khz,gpu_hz,emc_hz,time_ms,power_w,time_std_ms,power_std_w
4,1190400,1109250000,1600000000,200.0,11.0,1.0,0.1
4,883200,752250000,1331200000,300.0,6.5,1.0,0.1
2,729600,510000000,1331200000,450.0,4.0,1.0,0.1
6,1190400,510000000,1600000000,440.0,6.5,1.0,0.1
"""


def profile():
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
        f.write(PROFILE)
    try:
        return read_profile(f.name)
    finally:
        os.unlink(f.name)


class ModeChoice(unittest.TestCase):
    def test_a_profile_reads_as_modes(self):
        modes = profile()
        self.assertEqual(len(modes), 4)
        self.assertEqual(modes[1], Mode(4, 883200, 752250000, 1331200000, 300.0, 6.5))
        self.assertEqual(
            modes[1].knobs(),
            {"cores": 4, "cpu_khz": 883200, "gpu_hz": 752250000, "emc_hz": 1331200000},
        )

    def test_a_simulated_profiles_comment_line_is_skipped(self):
        # `jpower --sim BOARD profile` begins with one; csv.DictReader took it as the header.
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write("# jpower: simulated resnet18 on orin-agx@r35\n" + PROFILE)
        try:
            self.assertEqual(read_profile(f.name), profile())
        finally:
            os.unlink(f.name)

    def test_a_file_that_is_not_a_profile_is_refused(self):
        for text in ("cores,cpu_khz\n", "cores,cpu_khz\n4,x\n", "a,b\n1,2\n"):
            with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
                f.write(text)
            try:
                with self.assertRaises(ValueError):
                    read_profile(f.name)
            finally:
                os.unlink(f.name)

    def test_a_bad_value_is_refused_with_its_line(self):
        # Found by a review: a zero, negative or NaN power or time was read, and that mode
        # then chosen for every budget (a zero-watt mode fits a 5 W one); a repeated mode
        # was kept. Refused as jpower's own reader refuses them, naming the line.
        head, first = PROFILE.splitlines()[:2]
        cases = [
            ("4,1190400,1109250000,1600000000,200.0,0,1.0,0.1", ":4: power_w"),
            ("4,1190400,1109250000,1600000000,200.0,-1,1.0,0.1", ":4: power_w"),
            ("4,1190400,1109250000,1600000000,nan,11.0,1.0,0.1", ":4: time_ms"),
            ("4,1190400,1109250000,1600000000,inf,11.0,1.0,0.1", ":4: time_ms"),
            ("0,1190400,1109250000,1600000000,200.0,11.0,1.0,0.1", ":4: cores"),
            ("4,1190400,1109250000", ":4: 3 fields"),
            (first, ":4: the mode of line 3 again"),
        ]
        for row, why in cases:
            with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
                f.write("# recorded\n" + head + "\n" + first + "\n" + row + "\n")
            try:
                with self.assertRaisesRegex(ValueError, why):
                    read_profile(f.name)
            finally:
                os.unlink(f.name)

    def test_spaces_blank_lines_and_column_order_are_read(self):
        text = ("time_ms, power_w, cores, cpu_khz, gpu_hz, emc_hz\n\n"
                "200.0, 11.0, 4, 1190400, 1109250000, 1600000000\n   \n")
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(text)
        try:
            self.assertEqual(read_profile(f.name), profile()[:1])
        finally:
            os.unlink(f.name)

    def test_the_fastest_mode_within_the_budget(self):
        modes = profile()
        self.assertEqual(fastest_within(modes, None).time_ms, 200.0)
        self.assertEqual(fastest_within(modes, 11.0).time_ms, 200.0)  # the budget itself fits
        self.assertEqual(fastest_within(modes, 10.99).time_ms, 300.0)
        self.assertEqual(fastest_within(modes, 5.0).time_ms, 450.0)

    def test_no_mode_within_the_budget_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "lowest draws 4.0 W"):
            fastest_within(profile(), 3.9)


class Budgets(unittest.TestCase):
    def test_a_clients_own_budget_comes_before_the_fleets(self):
        config = {"jpower-budget-w": 10.0, "jpower-budget-w.nano": 4.0, "lr": 0.1}
        self.assertEqual(budget_for(config, "nano"), 4.0)
        self.assertEqual(budget_for(config, "orin-agx"), 10.0)
        self.assertIsNone(budget_for({"lr": 0.1}, "nano"))


class Agent:
    """Stands in for `jpower_client.Client`: records the round's requests (status and
    renew left out); `lapse_at`: the minibatch whose renew finds the lease ended, `gone_at`
    the one whose end finds the agent gone, `guard`: the budget guard's caps, `steps`:
    how many guard events arrive as minibatch N ends (`guard_events` counts them, as the
    Client does)."""

    def __init__(self, budget_w=None, lapse_at=None, gone_at=None, guard=None, steps=None):
        self.budget_w = budget_w
        self.calls = []
        self.guard_events = 0
        self.steps = steps or {}
        self.lapse_at, self.gone_at, self.guard = lapse_at, gone_at, guard
        self.taken = False  # another client took the board after the lease lapsed
        self.path = "/run/jpower/jpower.sock"

    def status(self):
        return {"budget_w": self.budget_w, "guard": self.guard}

    def set_mode(self, **kw):
        self.calls.append(("set_mode", kw))
        return {"writes": 1, "switch_us": 1.0, "lease": "session", "capped": False}

    def renew(self):
        if self.taken or (self.lapse_at is not None and len(self.calls) == self.lapse_at):
            raise AgentError("not_found", "you hold no lease to renew")
        return {}

    def release(self):
        if self.gone_at is not None:
            raise BrokenPipeError(32, "Broken pipe")
        if self.taken:  # another client's persistent lease: a release would end it
            self.calls.append(("released another's lease", {}))
        self.calls.append(("release", {}))

    def minibatch_begin(self, kind, id):
        self.calls.append(("minibatch", {"kind": kind, "id": id}))
        return {}

    def minibatch_end(self, kind, id):
        if id == self.gone_at:
            raise ConnectionResetError(104, "Connection reset by peer")
        self.guard_events += self.steps.get(id, 0)
        return {"duration_ms": 500.0, "energy_j": 2.0 + id}


class Round(unittest.TestCase):
    def test_a_round_pins_the_mode_under_a_session_lease_and_meters_its_minibatches(self):
        agent = Agent()
        with PowerRound(agent, profile(), 7.0) as rnd:
            for _ in range(2):
                with rnd.minibatch():
                    pass
        self.assertEqual(
            agent.calls,
            [
                (
                    "set_mode",
                    {
                        "lease": "session",
                        "cores": 4,
                        "cpu_khz": 883200,
                        "gpu_hz": 752250000,
                        "emc_hz": 1331200000,
                    },
                ),
                ("minibatch", {"kind": "train", "id": 1}),
                ("minibatch", {"kind": "train", "id": 2}),
                ("release", {}),
            ],
        )
        m = rnd.metrics()
        self.assertEqual(m["energy_j"], 7.0)
        self.assertEqual(m["train_time_s"], 1.0)
        self.assertEqual(m["mean_power_w"], 7.0)
        self.assertEqual(m["budget_w"], 7.0)
        self.assertEqual((m["mode_cores"], m["mode_gpu_hz"]), (4, 752250000))

    def test_without_a_budget_from_the_server_the_agents_applies(self):
        with PowerRound(Agent(budget_w=5.0), profile()) as rnd:
            pass
        self.assertEqual(rnd.mode.time_ms, 450.0)
        self.assertEqual(rnd.metrics()["budget_w"], 5.0)
        with PowerRound(Agent(), profile()) as rnd:
            pass
        self.assertEqual(rnd.mode.time_ms, 200.0)
        self.assertEqual(rnd.metrics()["budget_w"], 0.0)

    def test_the_tighter_of_the_servers_and_the_agents_budget_holds(self):
        # Found by a review: the server's 50 W replaced the board's own 5 W.
        with PowerRound(Agent(budget_w=5.0), profile(), 50.0) as rnd:
            pass
        self.assertEqual(rnd.mode.time_ms, 450.0)
        self.assertEqual(rnd.metrics()["budget_w"], 5.0)
        with PowerRound(Agent(budget_w=50.0), profile(), 7.0) as rnd:
            pass
        self.assertEqual(rnd.metrics()["budget_w"], 7.0)

    def test_a_round_the_guard_capped_says_so(self):
        with PowerRound(Agent(guard=["GPU <= 522.75 MHz"]), profile(), 7.0) as rnd:
            pass
        self.assertEqual(rnd.metrics()["capped"], 1.0)
        self.assertEqual(aggregate([rnd.metrics()])["capped"], 1)

    def test_a_cap_lifted_before_the_rounds_end_still_says_capped(self):
        # Found by a review: a stale profile had the guard cap the GPU through training
        # and lift the caps while the round idled before its end, which then reported the
        # pinned mode as what ran. Steps before the round are not its own.
        agent = Agent(steps={1: 1, 2: 1})  # a cap, then its lift
        agent.guard_events = 3  # heard by an earlier round
        with PowerRound(agent, profile(), 7.0) as rnd:
            for _ in range(2):
                with rnd.minibatch():
                    pass
        self.assertEqual(rnd.metrics()["capped"], 1.0)
        calm = Agent()
        calm.guard_events = 5  # heard by earlier rounds
        with PowerRound(calm, profile(), 7.0) as rnd:
            with rnd.minibatch():
                pass
        self.assertEqual(rnd.metrics()["capped"], 0.0)

    def test_a_lapse_in_the_last_minibatch_is_counted(self):
        # Found by a review: the round's end found the lease gone and said nothing.
        agent = Agent(lapse_at=3)  # the renew at the round's end, after two minibatches
        with PowerRound(agent, profile(), 7.0) as rnd:
            for _ in range(2):
                with rnd.minibatch():
                    pass
        self.assertEqual(rnd.metrics()["lease_lapses"], 1.0)
        self.assertNotIn("release", [c[0] for c in agent.calls])

    def test_a_lease_that_ended_mid_round_is_taken_again_and_counted(self):
        # Found by a review: under `lease_timeout_ms` the lease expired after its timeout
        # and the round went on at the board's old mode, reporting the pinned one.
        agent = Agent(lapse_at=2)  # the renew before minibatch 2
        with PowerRound(agent, profile(), 7.0) as rnd:
            for _ in range(2):
                with rnd.minibatch():
                    pass
        self.assertEqual([c[0] for c in agent.calls],
                         ["set_mode", "minibatch", "set_mode", "minibatch", "release"])
        self.assertEqual(rnd.metrics()["lease_lapses"], 1.0)

    def test_an_agent_gone_mid_round_is_named(self):
        # Found by a review: a bare BrokenPipeError from the release hid the reset.
        with self.assertRaises(ConnectionError) as e:
            with PowerRound(Agent(gone_at=1), profile(), 7.0) as rnd:
                with rnd.minibatch():
                    pass
        self.assertIn("/run/jpower/jpower.sock went away in minibatch 1", str(e.exception))
        self.assertIsInstance(e.exception.__cause__, ConnectionResetError)

    def test_a_board_taken_after_a_lapse_ends_the_round_quietly(self):
        # Found by a review: the release's `busy` replaced the round's own outcome, a
        # KeyboardInterrupt included.
        agent = Agent()
        with PowerRound(agent, profile(), 7.0) as rnd:
            agent.taken = True
        self.assertEqual(rnd.metrics()["budget_w"], 7.0)
        self.assertNotIn(("released another's lease", {}), agent.calls)
        with self.assertRaises(KeyboardInterrupt):
            with PowerRound(agent, profile(), 7.0):
                raise KeyboardInterrupt

    def test_a_slow_agent_is_a_timeout_not_a_lost_one(self):
        agent = Agent(gone_at=1)

        def slow(kind, id):
            raise TimeoutError("timed out")

        agent.minibatch_end = slow
        with self.assertRaises(TimeoutError) as e:
            with PowerRound(agent, profile(), 7.0) as rnd:
                with rnd.minibatch():
                    pass
        self.assertIn("did not answer in minibatch 1", str(e.exception))

    def test_the_lease_is_released_when_training_fails(self):
        agent = Agent()
        with self.assertRaises(ZeroDivisionError):
            with PowerRound(agent, profile(), 7.0) as rnd:
                with rnd.minibatch():
                    1 / 0
        self.assertEqual(agent.calls[-1], ("release", {}))


class Aggregate(unittest.TestCase):
    def test_the_fleet_sums_energy_and_waits_for_its_straggler(self):
        clients = [
            {"energy_j": 10.0, "train_time_s": 1.0, "mean_power_w": 10.0, "budget_w": 12.0},
            {"energy_j": 6.0, "train_time_s": 4.0, "mean_power_w": 1.5, "budget_w": 1.0},
            {"energy_j": 4.0, "train_time_s": 2.0, "mean_power_w": 2.0, "budget_w": 0.0},
        ]
        a = aggregate(clients)
        self.assertEqual(a["clients"], 3)
        self.assertEqual(a["energy_j"], 20.0)
        self.assertEqual(a["slowest_train_time_s"], 4.0)
        self.assertEqual(a["fastest_train_time_s"], 1.0)
        self.assertEqual(a["mean_power_w"], 5.0)
        self.assertEqual(a["over_budget"], 1)  # 0 W is no budget

    def test_a_round_without_clients_is_an_error(self):
        with self.assertRaises(ValueError):
            aggregate([])


class StrategyNames(unittest.TestCase):
    """`JpowerStrategy` keys each client's metrics by the name it reports (needs flwr: run
    with it on PYTHONPATH, as CI's fleet step has it; skipped without)."""

    def test_two_clients_of_one_name_are_both_counted(self):
        # Found by a review: two replies named alike became one client and half the
        # fleet's energy, with no word.
        try:
            from jpower_client.flower.strategy import JpowerStrategy
        except ImportError:
            self.skipTest("flwr is not installed")

        s = JpowerStrategy(Inner())
        with self.assertLogs(level="WARNING") as logged:
            s.aggregate_train(1, [Reply("a", 11), Reply("a", 12)])
        self.assertIn("two clients call themselves 'a'", logged.output[0])
        clients = s.rounds[-1]["clients"]
        self.assertEqual(sorted(clients), ["a", "a (node 12)"])
        self.assertEqual(s.rounds[-1]["fleet"]["energy_j"], 20.0)

    def test_a_reply_without_jpower_records_is_left_out_with_a_warning(self):
        # Found by a review: one plain reply (a client not using train_reply) raised
        # KeyError in the ServerApp after the inner aggregate had succeeded.
        try:
            from jpower_client.flower.strategy import JpowerStrategy
        except ImportError:
            self.skipTest("flwr is not installed")
        s = JpowerStrategy(Inner())
        with self.assertLogs(level="WARNING") as logged:
            s.aggregate_train(1, [Reply("a", 11), Reply(None, 12)])
        self.assertIn("node 12 carries no jpower metrics", logged.output[0])
        self.assertEqual(sorted(s.rounds[-1]["clients"]), ["a"])

    def test_a_failed_client_is_logged_and_counted(self):
        # Found by a review: a board whose client failed (its agent down) vanished from
        # the round without a word.
        try:
            from jpower_client.flower.strategy import JpowerStrategy
        except ImportError:
            self.skipTest("flwr is not installed")
        s = JpowerStrategy(Inner())
        with self.assertLogs(level="WARNING") as logged:
            s.aggregate_train(1, [Reply("a", 11), Reply("b", 13, "no jpower agent at /run")])
        self.assertIn("node 13 failed (no jpower agent at /run)", logged.output[0])
        self.assertEqual(s.rounds[-1]["fleet"]["failed"], 1)
        self.assertEqual(s.rounds[-1]["failed"], [13])
        self.assertEqual(sorted(s.rounds[-1]["clients"]), ["a"])

    def test_each_round_sends_the_budgets_in_force_then(self):
        # Found by a review: flwr passes one config object to every round, and budgets
        # lifted between rounds stayed in it (and in the caller's).
        try:
            from flwr.app import ConfigRecord
            from jpower_client.flower.strategy import JpowerStrategy
        except ImportError:
            self.skipTest("flwr is not installed")
        s = JpowerStrategy(Inner(), budgets={"nano": 3.0}, budget_w=20.0)
        config = ConfigRecord({"lr": 0.1})
        first = s.configure_train(1, None, config, None)
        self.assertEqual(
            dict(first), {"lr": 0.1, "jpower-budget-w": 20.0, "jpower-budget-w.nano": 3.0}
        )
        s.budgets.pop("nano")
        s.budget_w = None
        self.assertEqual(dict(s.configure_train(2, None, config, None)), {"lr": 0.1})
        self.assertEqual(dict(config), {"lr": 0.1}, "the caller's config is untouched")


class Inner:
    """A stand-in inner strategy: its train messages are the config it was given."""

    def aggregate_train(self, server_round, replies):
        return None, None

    def configure_train(self, server_round, arrays, config, grid):
        return config


class Content:
    """A stand-in reply's records: jpower's name record and metrics, unless `name` is
    None (a plain Flower reply)."""

    def __init__(self, name):
        self.name = name
        metrics = {"energy_j": 10.0, "train_time_s": 2.0, "budget_w": 5.0, "mean_power_w": 5.0}
        self.metric_records = {"metrics": metrics} if name else {"m": {"loss": 1.0}}

    def __contains__(self, key):
        from jpower_client.flower.round import NAME_RECORD

        return key == NAME_RECORD and self.name is not None

    def __getitem__(self, key):
        assert key in self
        return {"name": self.name}


class Reply:
    """A stand-in train reply of node `node`; `error`: the reason of a failed one."""

    def __init__(self, name, node, error=None):
        from types import SimpleNamespace

        self.content = Content(name)
        self.metadata = SimpleNamespace(src_node_id=node)
        self.error = SimpleNamespace(code=0, reason=error)

    def has_error(self):
        return self.error.reason is not None


if __name__ == "__main__":
    unittest.main()
