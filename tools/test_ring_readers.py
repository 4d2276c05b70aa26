#!/usr/bin/env python3
"""Tests of the telemetry ring readers (jpower_ring.py, include/jpower_ring.h) against rings
written by fake_ring_writer.py, without jpower.

Run: ``python3 tools/test_ring_readers.py`` (stdlib unittest; Python 3.8+; the C reader tests
are skipped with a notice when there is no ``cc``).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

TOOLS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(TOOLS)
sys.path.insert(0, TOOLS)
sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree

import fake_ring_writer as fake  # noqa: E402
import jpower_ring as jr  # noqa: E402

WRITER = os.path.join(TOOLS, "fake_ring_writer.py")
READER = os.path.join(TOOLS, "jpower_ring.py")
C_READER = os.path.join(TOOLS, "jpower_ring_reader.c")
INCLUDE = os.path.join(ROOT, "include")

RAILS = [fake.RailSpec("VDD_IN", 0, 5.0, 5.0), fake.RailSpec("VDD_CPU_GPU_CV", 2, 2.0, 5.0),
         fake.RailSpec("VDD_SOC", 2, 1.5, 5.0)]

# Broken mode -> words the error must contain.
BROKEN = {
    "bad-magic": "bad magic",
    "version-2": "unsupported layout version 2",
    "header-size": "header_size is 6144",
    "slot-count-3": "slot_count 3 is not a power of two",
    "slot-size-16": "slot_size 16",
    "rails-17": "rail_count is 17",
    "truncated": "too short",
    "tiny": "too short",
}


def raw(sample):
    """A sample dict's values back in integer units, as the writer's ``expected`` gives them."""
    rails = [(round(r["power_w"] * 1e6), round(r["voltage_v"] * 1e3), round(r["current_a"] * 1e3))
             for r in sample["rails"]]
    return round(sample["module_w"] * 1e6), round(sample["input_w"] * 1e6), rails


class RingTest(unittest.TestCase):
    """Gives each test a scratch directory, and helpers to make rings in it."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="jpower-ring-test-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, name="test.ring"):
        return os.path.join(self.dir, name)

    def build(self, samples=0, rails=RAILS, **options):
        """Write a ring in-process; returns the open FakeRing."""
        ring = fake.build(self.path(), rails, samples, **options)
        self.addCleanup(ring.close)
        return ring

    def open_ring(self, **kwargs):
        ring = jr.Ring(self.path(), **kwargs)
        self.addCleanup(ring.close)
        return ring

    def start_writer(self, *args, wait_published=True):
        """Run fake_ring_writer.py on this test's ring; returns the process."""
        proc = subprocess.Popen([sys.executable, WRITER, self.path()] + list(args),
                                stdout=subprocess.PIPE, universal_newlines=True)
        self.addCleanup(self._stop, proc)
        if wait_published:
            self.assertTrue(proc.stdout.readline().startswith("published"))
        return proc

    @staticmethod
    def _stop(proc):
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()

    def assert_sample_is(self, sample, writer):
        """The sample holds exactly what the writer put in sample ``sample["n"]``."""
        self.assertEqual(raw(sample), writer.expected(sample["n"]))


class HeaderTest(RingTest):
    def test_static_fields(self):
        self.build(samples=10, slot_count=64, period_ns=2_000_000, board="orin-nano-fake")
        ring = self.open_ring()
        self.assertEqual(ring.board, "orin-nano-fake")
        self.assertEqual(ring.rails, [{"name": r.name, "role": r.role, "refresh_us": 0}
                                      for r in RAILS])
        self.assertEqual(ring.writer_pid, os.getpid())
        self.assertEqual(ring.period_ns, 2_000_000)
        self.assertEqual(ring.slot_count, 64)
        self.assertEqual(ring.input_rail, 0)
        self.assertEqual(ring.module_mask, 0)
        self.assertTrue(ring.simulated)
        realtime = jr.monotonic_ns() + ring.realtime_offset_ns
        self.assertLess(abs(realtime - time.time_ns()), 1_000_000_000)

    def test_counters_and_thermal(self):
        self.build(samples=10)
        ring = self.open_ring()
        self.assertEqual(ring.write_seq(), 10)
        self.assertEqual((ring.overruns(), ring.read_errors(), ring.throttle()), (0, 0, 0))
        self.assertEqual(ring.thermal(), [("cpu-thermal", 45.5), ("gpu-thermal", None)])

    def test_rail_stats_count_fresh_values(self):
        rails = [fake.RailSpec("FAST", 1, 1.0), fake.RailSpec("SLOW", 1, 1.0, 5.0, 5000)]
        self.build(samples=1000, rails=rails, slot_count=1024)
        ring = self.open_ring()
        newest = ring.latest()
        stats = ring.rail_stats()
        self.assertEqual([s["fresh_count"] for s in stats], [1000, 200])
        self.assertEqual(stats[0]["last_fresh_ns"], newest["t_ns"])
        self.assertEqual(newest["t_ns"] - stats[1]["last_fresh_ns"], 4 * ring.period_ns)
        self.assertEqual([r["fresh"] for r in ring.sample(995)["rails"]], [True, True])
        self.assertEqual([r["fresh"] for r in newest["rails"]], [True, False])
        self.assertEqual(ring.input_rail, -1)
        self.assertEqual(ring.module_mask, 3)
        self.assertAlmostEqual(newest["module_w"], 2.0)

    def test_file_modes(self):
        self.build()
        self.assertEqual(os.stat(self.path()).st_mode & 0o777, 0o640)
        self.build(broken="version-0")
        self.assertEqual(os.stat(self.path()).st_mode & 0o777, 0o600)


class SampleTest(RingTest):
    def test_latest_matches_written(self):
        writer = self.build(samples=50, wobble=True)
        s = self.open_ring().latest()
        self.assertEqual(s["n"], 49)
        self.assert_sample_is(s, writer)
        self.assertEqual(s["fresh"], 0b111)
        self.assertAlmostEqual(s["module_w"], 5.000049)
        self.assertAlmostEqual(s["rails"][1]["current_a"], 0.4)

    def test_no_sample_yet(self):
        self.build(samples=0)
        ring = self.open_ring()
        self.assertIsNone(ring.latest())
        self.assertIsNone(ring.sample(0))
        self.assertEqual(ring.range(0, 10), ([], 0))
        self.assertEqual(ring.since(0), [])
        self.assertEqual(ring.energy(0, 2 ** 63)["samples"], 0)

    def test_sample_and_range(self):
        writer = self.build(samples=100, wobble=True)
        ring = self.open_ring()
        self.assert_sample_is(ring.sample(42), writer)
        self.assertIsNone(ring.sample(100))
        samples, lost = ring.range(10, 20)
        self.assertEqual(([s["n"] for s in samples], lost), (list(range(10, 20)), 0))
        samples, lost = ring.range(95, 200)
        self.assertEqual(([s["n"] for s in samples], lost), (list(range(95, 100)), 0))

    def test_since(self):
        self.build(samples=1000, period_ns=1_000_000)
        ring = self.open_ring()
        newest = ring.latest()["t_ns"]
        recent = ring.since(newest - 100_000_000)
        self.assertEqual([s["n"] for s in recent], list(range(899, 1000)))
        self.assertEqual(len(ring.since(0)), 1000)
        self.assertEqual(ring.since(newest + 1), [])

    def test_lapped_samples_are_lost_not_garbage(self):
        writer = self.build(samples=100, slot_count=16, wobble=True)
        ring = self.open_ring()
        samples, lost = ring.range(0, 100)
        self.assertEqual(lost, 84)
        self.assertEqual([s["n"] for s in samples], list(range(84, 100)))
        for s in samples:
            self.assert_sample_is(s, writer)
        self.assertIsNone(ring.sample(0))
        self.assertIsNone(ring.sample(83))
        self.assertEqual(len(ring.since(0)), 16)

    def test_energy_of_constant_trace_is_exact(self):
        self.build(samples=1001, period_ns=1_000_000, slot_count=2048)
        ring = self.open_ring()
        t1 = ring.latest()["t_ns"]
        e = ring.energy(t1 - 1_000_000_000, t1)
        self.assertEqual(e["samples"], 1001)
        self.assertAlmostEqual(e["duration_s"], 1.0)
        self.assertAlmostEqual(e["rate_hz"], 1001.0)
        self.assertAlmostEqual(e["module_j"], 5.0, places=9)
        self.assertEqual(sorted(e["rails_j"]), sorted(r.name for r in RAILS))
        for rail in RAILS:
            self.assertAlmostEqual(e["rails_j"][rail.name], rail.power_w, places=9)

    def test_energy_window_excludes_later_samples(self):
        self.build(samples=1000, period_ns=1_000_000)
        ring = self.open_ring()
        t1 = ring.latest()["t_ns"] - 500_000_000
        e = ring.energy(t1 - 200_000_000, t1)
        self.assertEqual(e["samples"], 201)
        self.assertAlmostEqual(e["module_j"], 1.0, places=9)

    def test_energy_holds_the_edges_as_the_agent_does(self):
        # Found by a review: the window's energy counted only the span between its first
        # and last sample (16.5 J over 1.72 s where the agent said 19.26 J over 2 s).
        # Between two samples 10 ms apart, a 5 ms window inside them is 5 W x 5 ms.
        self.build(samples=10, period_ns=10_000_000)
        ring = self.open_ring()
        t = ring.sample(5)["t_ns"]
        e = ring.energy(t + 2_000_000, t + 7_000_000)
        self.assertEqual(e["samples"], 0)
        self.assertAlmostEqual(e["module_j"], 5.0 * 0.005, places=9)
        self.assertAlmostEqual(e["duration_s"], 0.005)


class LiveTest(RingTest):
    """A writer process runs while the reader reads."""

    def test_energy_of_live_constant_trace_within_half_percent(self):
        proc = self.start_writer("--rate", "1000", "--duration", "1.3", "--slot-count", "2048")
        proc.wait(timeout=10)
        ring = self.open_ring()
        t1 = ring.latest()["t_ns"]
        e = ring.energy(t1 - 1_000_000_000, t1)
        self.assertLess(abs(e["module_j"] - 5.0) / 5.0, 0.005, e)
        for rail in RAILS:
            self.assertLess(abs(e["rails_j"][rail.name] - rail.power_w) / rail.power_w, 0.005)
        self.assertGreater(e["samples"], 500)

    def test_no_torn_reads_against_a_lapping_writer(self):
        self.start_writer("--slot-count", "2", "--no-sleep", "--wobble", "--duration", "3")
        model = fake.FakeRing(self.path(), fake.DEFAULT_RAILS, wobble=True)
        ring = self.open_ring()
        checked = 0
        stop = time.monotonic() + 1.0
        while time.monotonic() < stop:
            s = ring.latest()
            if s is None:
                continue
            self.assert_sample_is(s, model)
            samples, lost = ring.range(s["n"] - 6, s["n"] + 1)
            for older in samples:
                self.assert_sample_is(older, model)
            self.assertLessEqual(len(samples), 2)
            self.assertEqual(len(samples) + lost, min(7, s["n"] + 1))
            checked += 1 + len(samples)
        self.assertGreater(checked, 1000)

    def test_waits_while_the_writer_initialises(self):
        self.start_writer("--publish-delay", "2.0", "--samples", "5", wait_published=False)
        deadline = time.monotonic() + 5
        while not (os.path.exists(self.path()) and os.path.getsize(self.path()) >= 4096):
            self.assertLess(time.monotonic(), deadline, "the writer never created the ring")
            time.sleep(0.01)
        # The writer publishes 2 s after creating the ring: a loaded host that starts
        # this reader late still finds it unpublished.
        start = time.monotonic()
        ring = self.open_ring(init_wait_s=10)
        self.assertGreater(time.monotonic() - start, 0.1)
        self.assertEqual(ring.board, "fake-board")


class BrokenRingTest(RingTest):
    def assert_refused(self, words, **kwargs):
        with self.assertRaises(jr.RingError) as caught:
            jr.Ring(self.path(), **kwargs)
        message = str(caught.exception)
        self.assertIn(self.path(), message)
        self.assertIn(words, message)

    def test_each_broken_ring_is_refused(self):
        for mode, words in BROKEN.items():
            with self.subTest(mode=mode):
                self.build(broken=mode).close()
                self.assert_refused(words)

    def test_missing_file(self):
        self.assert_refused("cannot open")

    def test_version_0_forever_is_refused_after_about_a_second(self):
        self.build(broken="version-0")
        start = time.monotonic()
        self.assert_refused("still initialising")
        self.assertGreaterEqual(time.monotonic() - start, 0.9)

    def test_all_zero_file_counts_as_initialising(self):
        with open(self.path(), "wb") as f:
            f.write(bytes(8192))
        self.assert_refused("still initialising", init_wait_s=0.2)


class CliTest(RingTest):
    def run_cli(self, *args):
        return subprocess.run([sys.executable, READER, self.path()] + list(args),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              universal_newlines=True, timeout=20)

    def test_latest_json_and_text(self):
        writer = self.build(samples=20, wobble=True)
        out = self.run_cli("--json")
        self.assertEqual(out.returncode, 0, out.stderr)
        s = json.loads(out.stdout)
        self.assertEqual(s["n"], 19)
        self.assert_sample_is(s, writer)
        text = self.run_cli("--latest").stdout
        self.assertIn("sample 19", text)
        self.assertIn("VDD_CPU_GPU_CV", text)

    def test_since_and_energy(self):
        self.build(samples=1000, period_ns=1_000_000)
        samples = json.loads(self.run_cli("--since", "60", "--json").stdout)
        self.assertEqual([s["n"] for s in samples], list(range(1000)))
        # The agent's window: the sensor's value held where the samples do not reach, so
        # a constant 5 W over the last 60 s is 300 J whatever the samples cover.
        e = json.loads(self.run_cli("--energy", "60", "--json").stdout)
        self.assertEqual(e["samples"], 1000)
        self.assertAlmostEqual(e["module_j"], 5.0 * 60, places=3)
        self.assertAlmostEqual(e["duration_s"], 60.0, places=3)
        self.assertIn("module 300.0", self.run_cli("--energy", "60").stdout)
        self.assertEqual(len(self.run_cli("--since", "60").stdout.splitlines()), 1001)

    def test_bad_ring_exits_1_with_one_line(self):
        self.build(broken="version-2").close()
        out = self.run_cli()
        self.assertEqual(out.returncode, 1)
        self.assertEqual(out.stdout, "")
        self.assertEqual(len(out.stderr.splitlines()), 1)
        self.assertIn("unsupported layout version 2", out.stderr)


@unittest.skipUnless(shutil.which("cc"), "no cc: the C reader is not tested")
class CReaderTest(RingTest):
    """include/jpower_ring.h through tools/jpower_ring_reader.c."""

    @classmethod
    def setUpClass(cls):
        cls.bin_dir = tempfile.mkdtemp(prefix="jpower-ring-c-")
        cls.binary = os.path.join(cls.bin_dir, "jpower_ring_reader")
        subprocess.run(["cc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2",
                        "-D_DEFAULT_SOURCE", "-I" + INCLUDE, C_READER, "-o", cls.binary],
                       check=True, timeout=60)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.bin_dir, True)

    def run_reader(self, *args):
        return subprocess.run([self.binary, self.path()] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, universal_newlines=True, timeout=20)

    def test_prints_the_latest_sample(self):
        self.build(samples=30)
        out = self.run_reader("3")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(re.findall(r"^module_w=(\S+)$", out.stdout, re.M), ["5.000000"] * 3)
        self.assertEqual(out.stdout.count("sample n=29 "), 3)
        self.assertRegex(out.stdout, r"VDD_SOC +1\.500000 W")

    def test_agrees_with_a_live_writer(self):
        self.start_writer("--slot-count", "4", "--rate", "2000", "--wobble", "--duration", "5")
        model = fake.FakeRing(self.path(), fake.DEFAULT_RAILS, wobble=True)
        # "published" comes before the first sample: on a loaded host the reader could
        # rightly find none yet, so it starts once the writer has written one.
        ring = self.open_ring()
        deadline = time.monotonic() + 10
        while ring.write_seq() == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        out = self.run_reader("3")
        self.assertEqual(out.returncode, 0, out.stderr)
        pairs = re.findall(r"^sample n=(\d+) .*?^module_w=(\S+)$", out.stdout, re.M | re.S)
        self.assertEqual(len(pairs), 3, out.stdout)
        for n, watts in pairs:
            self.assertEqual(round(float(watts) * 1e6), model.expected(int(n))[0])

    def test_bad_rings_exit_1(self):
        for mode in ("bad-magic", "version-2", "truncated", "slot-count-3"):
            with self.subTest(mode=mode):
                self.build(broken=mode).close()
                out = self.run_reader()
                self.assertEqual(out.returncode, 1)
                self.assertIn(BROKEN[mode], out.stderr)
                self.assertIn(self.path(), out.stderr)

    def test_version_0_forever_exits_1(self):
        self.build(broken="version-0")
        out = self.run_reader()
        self.assertEqual(out.returncode, 1)
        self.assertIn("still initialising", out.stderr)

    @unittest.skipUnless(shutil.which("c++"), "no c++: the header is not checked as C++")
    def test_header_compiles_as_cxx(self):
        subprocess.run(["c++", "-x", "c++", "-std=c++17", "-Wall", "-Werror", "-fsyntax-only",
                        "-I" + INCLUDE, C_READER], check=True, timeout=60)


def main():
    if not shutil.which("cc"):
        print("notice: no cc on PATH: skipping the C reader tests", file=sys.stderr)
    unittest.main(verbosity=2)


if __name__ == "__main__":
    main()
