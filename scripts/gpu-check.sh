#!/usr/bin/env bash
# Verifies jpower's GPU path on any machine with an NVIDIA GPU, in one command, in a few
# minutes: runs the GPU tests (every kernel against the CPU reference, bit-exact where the
# reference is, the CNN on both), measures the roofline with NVML energy (or, on a Jetson,
# the INA3221 rails over the board's presets), checks NVML's energy counter against its
# power readings, reports how each kernel module was loaded (by default: the build's
# prebuilt SASS where it has some; then NVRTC's CUBIN alone and its PTX alone), trains the built-in CNN, and writes one summary with a pass/fail per check.
#
# Needs: the NVIDIA driver, and NVRTC unless the binary embeds prebuilt kernels (the CUDA
# toolkit's lib64, or an nvidia-cuda-nvrtc Python wheel: both are found). Runs either
# from a checkout with cargo (it builds), or with prebuilt binaries carried over:
# JPOWER_BIN (jpower) and JPOWER_TEST_BIN (the `jpower` integration-test executable); a
# machine without Rust needs nothing else. Results land in target/gpu-check/ (or
# $GPU_CHECK_OUT): summary.txt, summary.json and every step's raw output.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${GPU_CHECK_OUT:-target/gpu-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)
started=$(date +%s)
step() { printf '\n==== %s\n' "$*"; }
fail() { echo "gpu-check: $*" >&2; exit 2; }

step "GPU"
command -v nvidia-smi >/dev/null && nvidia-smi -L || echo "(no nvidia-smi: a Jetson, or a minimal image)"

# NVRTC: cudarc looks for libnvrtc.so, .so.11 or .so.12; newer releases ship .so.13 and
# wheels ship no unversioned name, so link whichever is found under the name it tries.
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so '; then
  lib=$( { ls /usr/local/cuda/lib64/libnvrtc.so* 2>/dev/null;
           python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null \
             | xargs -I{} find {} -path '*nvidia*' -name 'libnvrtc.so*' 2>/dev/null; } \
         | grep -v builtins | head -n1 || true)
  if [ -n "$lib" ]; then
    mkdir -p "$out/lib"
    ln -sf "$(readlink -f "$lib")" "$out/lib/libnvrtc.so"
    for b in "$(dirname "$(readlink -f "$lib")")"/libnvrtc-builtins.so*; do ln -sf "$b" "$out/lib/"; done
    export LD_LIBRARY_PATH="$out/lib:$(dirname "$(readlink -f "$lib")")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "NVRTC: $lib"
  else
    echo "NVRTC not found: kernels load only from a prebuilt fatbin"
  fi
fi

if [ -z "${JPOWER_BIN:-}" ]; then
  step "build (release; nvcc: $(command -v nvcc || echo none))"
  if command -v nvidia-smi >/dev/null; then
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '.')
    [ -n "$cap" ] && export CUDA_COMPUTE_CAP="$cap"
  fi
  cargo build --release || fail "the release build failed"
  JPOWER_BIN=target/release/jpower
  JPOWER_TEST_BIN=$(cargo test --release --test jpower --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "jpower" and m["profile"]["test"]:
        print(m["executable"])' | tail -n1)
fi
# Absolute paths: the tests run the binary from their own directories, and the test
# executable, built elsewhere, finds jpower only through JPOWER_BIN.
for v in JPOWER_BIN JPOWER_TEST_BIN; do
  [ -n "${!v:-}" ] && [ -x "${!v}" ] || fail "$v (${!v:-unset}) is not an executable file"
  export "$v=$(readlink -f "${!v}")"
done
echo "jpower: $JPOWER_BIN"
echo "tests:  $JPOWER_TEST_BIN"

jetson=false
[ -e /etc/nv_tegra_release ] && jetson=true

step "GPU tests: every kernel against the CPU reference, the CNN on both"
JPOWER_REQUIRE_NVRTC=${JPOWER_REQUIRE_NVRTC:-1} "$JPOWER_TEST_BIN" gpu:: --include-ignored --test-threads 1 \
  >"$out/tests.log" 2>&1
echo "exit status $?" >>"$out/tests.log"
tail -n 30 "$out/tests.log"

step "roofline (1 s per point)"
# Off a Jetson: 1024 iterations (the per-launch load and store weigh under 2% of the
# time, so the FP32 point nears the peak), and NVML checked against itself.
extra=()
$jetson || extra=(--max-iters 1024 --nvml-check 12)
"$JPOWER_BIN" --json roofline --point-seconds 1 --settle 0.5 --svg "$out/roofline.svg" \
  --csv "$out/points.csv" --modes-csv "$out/modes.csv" "${extra[@]}" "$@" \
  >"$out/roofline.json" 2>"$out/roofline.err"
echo "exit status $?"; cat "$out/roofline.err"

# Each load path alone, on a short sweep: NVRTC's CUBIN, then its PTX through the JIT.
for way in cubin ptx; do
  step "load path: $way alone"
  JPOWER_KERNEL_LOAD=$way "$JPOWER_BIN" --json roofline --point-seconds 0.05 --settle 0 \
    --max-iters 1 --elements 1048576 "$@" >"$out/roofline-$way.json" 2>"$out/roofline-$way.err"
  echo "exit status $?"; cat "$out/roofline-$way.err"
done

step "train the built-in CNN on the GPU"
"$JPOWER_BIN" --json train --steps 200 --batch 64 >"$out/train.json" 2>"$out/train.err"
echo "exit status $?"; cat "$out/train.err"

step "summary"
python3 - "$out" "$started" <<'PY'
import json, os, re, sys, time
out, started = sys.argv[1], int(sys.argv[2])
checks, figures = [], {}

def check(name, ok, detail):
    checks.append({"check": name, "pass": bool(ok), "detail": detail})

def load(name):
    try:
        with open(os.path.join(out, name)) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        check(f"{name} readable", False, str(e))
        return None

def within(v, lo, hi):
    return v is not None and lo <= v <= hi

log = open(os.path.join(out, "tests.log"), errors="replace").read()
m = re.search(r"test result: (\w+)\. (\d+) passed; (\d+) failed; (\d+) ignored", log)
figures["tests"] = m.group(0) if m else None
failed = re.findall(r"^test (\S+) \.\.\. FAILED", log, re.M)
check("GPU tests (every kernel vs the CPU reference, bit-exact where documented)",
      m and m.group(1) == "ok" and int(m.group(3)) == 0,
      figures["tests"] or "no test summary" + (f"; failed: {', '.join(failed)}" if failed else ""))

r = load("roofline.json")
if r:
    gpu = r.get("gpu") or {}
    figures.update(device=r["device"], power=r["power"], gpu=gpu)
    v = gpu.get("versions", {})
    check("driver and NVRTC versions reported", v.get("driver") is not None,
          f"driver {v.get('driver')}, NVRTC {v.get('nvrtc')}")
    mods = {m["file"]: m["path"] for m in gpu.get("modules", [])}
    check("every module loaded, path named", len(mods) == 2, str(mods))
    if gpu.get("nvml_pci_bus_id") is not None:
        check("NVML meters the CUDA device (PCI bus id)", gpu.get("nvml_matches_cuda"),
              f"CUDA {gpu.get('cuda_pci_bus_id')}, NVML {gpu.get('nvml_pci_bus_id')}")
    a = gpu.get("nvml_check")
    if a is not None:
        check("NVML energy counter vs mean power readings within 5% (copy, 2 s dropped)",
              abs(a["rel_diff"]) <= 0.05,
              f"counter {a['counter_w']:.1f} W, readings {a['readings_w']:.1f} W "
              f"({a['readings']} over {a['seconds']:.1f} s): {100 * a['rel_diff']:+.2f}%")
    for mode in r["modes"]:
        t, e = mode["time"], mode["energy"]
        tag = mode["mode"]
        hz = mode.get("gpu_hz")
        figures.setdefault("modes", []).append({
            "mode": tag, "gpu_mhz": hz and hz / 1e6, "emc_mhz": mode.get("emc_hz") and mode["emc_hz"] / 1e6,
            "fp32_tflops": t["peak_f32_flops"] / 1e12, "fp16_tflops": t["peak_f16_flops"] / 1e12,
            "dram_gb_s": t["peak_bytes_per_s"] / 1e9, "ridge_f32": t["ridge_f32"],
            "f32_fraction": mode.get("f32_fraction_of_peak"), "f16_over_f32": mode.get("f16_over_f32"),
            "f32_doubling": mode.get("f32_doubling"),
            "copy_fraction": mode.get("copy_fraction_of_dram_peak"),
            "triad_fraction": mode.get("triad_fraction_of_dram_peak"),
            "eps_flop_pj": e["eps_flop_j"] * 1e12, "eps_byte_pj": e["eps_byte_j"] * 1e12,
            "pi0_w": e["pi0_w"], "energy_fit_error": e["rms_rel_error"],
            "points": [{"label": p["label"], "best_s": p["run"]["best_s"], "single_s": p["run"]["single_s"],
                        "gflops": p["flops_per_s"] / 1e9, "gb_s": p["bytes_per_s"] / 1e9,
                        "power_w": p["power_w"]} for p in mode["points"]],
        })
        f = lambda x: "n/a" if x is None else f"{x:.3f}"
        check(f"{tag}: time at 2N iterations about twice that at N (nothing folded)",
              within(mode.get("f32_doubling"), 1.8, 2.2), f(mode.get("f32_doubling")))
        check(f"{tag}: FP32 >= 0.95 of cores x 2 x the measured SM clock",
              (mode.get("f32_fraction_of_peak") or 0) >= 0.95,
              f"{f(mode.get('f32_fraction_of_peak'))} at {f(hz and hz / 1e6)} MHz")
        check(f"{tag}: FP16 / FP32 about 2", within(mode.get("f16_over_f32"), 1.8, 2.2),
              f(mode.get("f16_over_f32")))
        for k in ("copy", "triad"):
            x = mode.get(f"{k}_fraction_of_dram_peak")
            check(f"{tag}: {k} >= 0.8 of the vendor DRAM peak", (x or 0) >= 0.8, f(x))
        check(f"{tag}: energy roofline fitted, error stated", e["rms_rel_error"] is not None,
              f"{e['eps_flop_j'] * 1e12:.2f} pJ/FLOP, {e['eps_byte_j'] * 1e12:.1f} pJ/byte, "
              f"{e['pi0_w']:.1f} W constant, fit error {100 * e['rms_rel_error']:.1f}%")

for way, path in (("cubin", "nvrtc_cubin"), ("ptx", "nvrtc_ptx")):
    r2 = load(f"roofline-{way}.json")
    if r2:
        mods = {m["file"]: m["path"] for m in (r2.get("gpu") or {}).get("modules", [])}
        figures[f"modules_{way}_only"] = mods
        check(f"modules load by the {way} way alone", mods and all(p == path for p in mods.values()),
              str(mods))

tr = load("train.json")
if tr:
    figures["train"] = {k: tr.get(k) for k in ("steps", "batch", "first_loss", "final_loss", "held_out_accuracy",
                                               "mean_minibatch_s", "mean_w", "energy_per_minibatch_j", "notes")}
    check("the CNN trains on the GPU (loss falls)", tr["final_loss"] < tr["first_loss"],
          f"loss {tr['first_loss']:.3f} -> {tr['final_loss']:.3f}, accuracy {100 * tr['held_out_accuracy']:.1f}%, "
          f"{1e3 * tr['mean_minibatch_s']:.2f} ms and {tr['mean_w']:.1f} W per minibatch")

elapsed = time.time() - started
check("the whole check takes under 5 minutes", elapsed < 300, f"{elapsed:.0f} s")
summary = {"pass": all(c["pass"] for c in checks), "checks": checks, "figures": figures}
json.dump(summary, open(os.path.join(out, "summary.json"), "w"), indent=1)
lines = [f"{'PASS' if c['pass'] else 'FAIL'}  {c['check']}: {c['detail']}" for c in checks]
for mode in figures.get("modes", []):
    mhz = "?" if mode["gpu_mhz"] is None else f"{mode['gpu_mhz']:.0f}"
    lines.append(f"\n{mode['mode']}: GPU {mhz} MHz")
    for p in mode["points"]:
        lines.append(f"  {p['label']:<9} batched {1e6 * p['best_s']:9.1f} us, single {1e6 * p['single_s']:9.1f} us, "
                     f"{p['gflops']:9.1f} GFLOP/s, {p['gb_s']:7.1f} GB/s, {p['power_w']:6.1f} W")
lines.append(f"\ngpu-check: {'PASS' if summary['pass'] else 'FAIL'} "
             f"({sum(c['pass'] for c in checks)} of {len(checks)} checks)")
open(os.path.join(out, "summary.txt"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if summary["pass"] else 1)
PY
