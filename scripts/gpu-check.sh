#!/usr/bin/env bash
# Verifies jpower's GPU path on any machine with an NVIDIA GPU, in one command, in a few
# minutes: builds with CUDA (nvcc when present), runs the GPU tests (every kernel against
# the CPU reference, the CNN on both), measures the roofline with NVML energy (or, on a
# Jetson, the INA3221 rails over the board's presets) and prints the achieved fractions
# of peak and the fitted energy roofline, then trains the built-in CNN for 200 steps.
#
# Needs: the NVIDIA driver, NVRTC (the CUDA toolkit's lib64, or the nvidia-cuda-nvrtc
# Python wheel: both are found), and either cargo or prebuilt binaries given as
# JPOWER_BIN (jpower) and JPOWER_TEST_BIN (the `jpower` integration-test executable).
# Results land in target/gpu-check/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=target/gpu-check
mkdir -p "$out"
step() { printf '\n==== %s\n' "$*"; }

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
    export LD_LIBRARY_PATH="$PWD/$out/lib:$(dirname "$(readlink -f "$lib")")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "NVRTC: $lib"
  else
    echo "NVRTC not found: kernels load only from an nvcc-built fatbin"
  fi
fi

if [ -z "${JPOWER_BIN:-}" ]; then
  step "build (release; nvcc: $(command -v nvcc || echo none))"
  if command -v nvidia-smi >/dev/null; then
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n1 | tr -d '.')
    [ -n "$cap" ] && export CUDA_COMPUTE_CAP="$cap"
  fi
  cargo build --release
  JPOWER_BIN=target/release/jpower
  JPOWER_TEST_BIN=$(cargo test --release --test jpower --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "jpower" and m["profile"]["test"]:
        print(m["executable"])' | tail -n1)
fi

step "GPU tests: every kernel against the CPU reference, the CNN on both"
JPOWER_REQUIRE_NVRTC=1 "$JPOWER_TEST_BIN" gpu:: --include-ignored --test-threads 1 2>&1 | tee "$out/tests.log"

step "roofline (1 s per point)"
"$JPOWER_BIN" --json roofline --point-seconds 1 --settle 0.5 --svg "$out/roofline.svg" \
  --csv "$out/points.csv" --modes-csv "$out/modes.csv" "$@" >"$out/roofline.json"
python3 - "$out/roofline.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"device: {r['device']}  power: {r['power']}  simulated: {r['simulated']}")
for m in r["modes"]:
    t, e = m["time"], m["energy"]
    pct = lambda v: "-" if v is None else f"{100 * v:.0f}%"
    print(f"{m['mode']}: GPU {m['gpu_hz'] and m['gpu_hz'] / 1e6:.0f} MHz")
    print(f"  FP32 {t['peak_f32_flops'] / 1e12:.2f} TFLOP/s = {pct(m['f32_fraction_of_peak'])} of cores x 2 x clock (target >= 90%)")
    print(f"  FP16 {t['peak_f16_flops'] / 1e12:.2f} TFLOP/s; DRAM {t['peak_bytes_per_s'] / 1e9:.0f} GB/s, copy = {pct(m['copy_fraction_of_dram_peak'])} of the vendor peak (target >= 80%)")
    print(f"  energy roofline: {e['eps_flop_j'] * 1e12:.2f} pJ/FLOP, {e['eps_byte_j'] * 1e12:.1f} pJ/byte, {e['pi0_w']:.1f} W constant (fit error {100 * e['rms_rel_error']:.1f}%)")
for n in r.get("notes", []):
    print("note:", n)
PY

step "train the built-in CNN on the GPU"
"$JPOWER_BIN" train --steps 200 --batch 64 | tee "$out/train.txt"
echo "gpu-check: done; results in $out/"
