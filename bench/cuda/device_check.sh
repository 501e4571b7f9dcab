#!/usr/bin/env bash
# GPU check of the CUDA / Thrust / NCCL backends, for a machine with one NVIDIA GPU (written for
# the lent H200: sm_90, CUDA toolkit in /usr/local/cuda, no network).
#
#   bench/cuda/device_check.sh                   configure + build (CUDA arch 90) only the GPU
#                                                tests and the gather benchmark, run them, write
#                                                results to $OUT (default: <build>/out)
#   bench/cuda/device_check.sh --stage-deps DIR  run on a machine WITHOUT a GPU that has doctest
#                                                and Google Benchmark installed: copies their
#                                                headers, CMake package files and libraries into
#                                                the prefix DIR, for a GPU machine that lacks them
#                                                (carry DIR there; set ORCHMLLM_DEVICE_DEPS=DIR);
#                                                with Debian's OpenMPI installed, also its runtime
#                                                files (DIR/mpiroot) and the CUDA runtime library
#
# On the GPU machine, when mpirun is missing and DEPS/mpiroot exists, the staged OpenMPI runtime
# is copied into / without overwriting anything (cp -n; meant for a bare, throw-away machine),
# and the NCCL library is looked up on the machine (e.g. the PyTorch wheel's) for the loader.
# With ORCHMLLM_PREBUILT=1 and BUILD_DIR pointing at binaries built elsewhere (same layout:
# tests/backend/cuda/*, bench/cuda/cuda_gather_bench), nothing is compiled there.
#
# Environment: OUT (results folder), ORCHMLLM_DEVICE_DEPS (prefix from --stage-deps, added to
# CMAKE_PREFIX_PATH; default <repo>/.device-deps when that folder exists), CUDA_HOME (default /usr/local/cuda), BUILD_DIR (default
# build/device-check), JOBS (default: all cores), BENCH_MIN_TIME (seconds, default 0.2),
# ORCHMLLM_PREBUILT=1 (skip configure + build; run the binaries already in BUILD_DIR).
#
# Steps (each under `timeout`): GPU / driver / toolkit / NCCL / MPI report; configure; build
# backend_cuda_device_mover_test, backend_nccl_communicator_test (when MPI and NCCL are found),
# backend_thrust_gather_cpp_test and cuda_gather_bench; run the tests (the NCCL one under
# mpirun -np 1); run the benchmark (JSON). Writes $OUT/device_check.json (summary: versions,
# test outcomes, GB/s per method and its ratio to a device-to-device copy of the same bytes),
# $OUT/gather_bench.json (Google Benchmark output) and $OUT/device_check.log (all output).
# Exit status: 0 when every test that ran passed and the benchmark ran, else 1.
set -u -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# ---------------------------------------------------------------------------------------------
if [[ "${1:-}" == "--stage-deps" ]]; then
  DEST=${2:?usage: device_check.sh --stage-deps DIR}
  mkdir -p "$DEST/include" "$DEST/lib/cmake" "$DEST/lib/x86_64-linux-gnu/cmake"
  cp -r /usr/include/doctest "$DEST/include/"
  cp -r /usr/lib/cmake/doctest "$DEST/lib/cmake/"
  cp -r /usr/include/benchmark "$DEST/include/"
  cp -r /usr/lib/x86_64-linux-gnu/cmake/benchmark "$DEST/lib/x86_64-linux-gnu/cmake/"
  # The library under every name the package files and the loader use (real file, SONAME).
  for f in /usr/lib/x86_64-linux-gnu/libbenchmark.so* /usr/lib/x86_64-linux-gnu/libbenchmark_main.a; do
    cp -L "$f" "$DEST/lib/x86_64-linux-gnu/"
  done
  if dpkg -L libopenmpi3 >/dev/null 2>&1; then
    for p in libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libevent-core-2.1-7 \
      libevent-pthreads-2.1-7; do
      dpkg -L "$p" | while read -r f; do
        [[ -f "$f" || -L "$f" ]] || continue
        case "$f" in /usr/share/doc/* | /usr/share/man/* | /usr/share/lintian/*) continue ;; esac
        mkdir -p "$DEST/mpiroot$(dirname "$f")"
        cp -a "$f" "$DEST/mpiroot$f"
      done
    done
    # Libraries MPI needs that a minimal image may lack; used only when the loader finds none.
    mkdir -p "$DEST/lib/fallback"
    for f in libmunge.so.2 libudev.so.1 libz.so.1; do
      [[ -e /lib/x86_64-linux-gnu/$f ]] && cp -L "/lib/x86_64-linux-gnu/$f" "$DEST/lib/fallback/"
    done
    cp -L "${CUDA_HOME:-/usr/local/cuda}"/lib*/libcudart.so.1[0-9]* "$DEST/lib/fallback/" \
      2>/dev/null
  fi
  du -sh "$DEST"
  echo "staged doctest and Google Benchmark in $DEST; on the GPU machine: ORCHMLLM_DEVICE_DEPS=$DEST"
  exit 0
fi

CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
BUILD=${BUILD_DIR:-$ROOT/build/device-check}
OUT_DIR=${OUT:-$BUILD/out}
JOBS=${JOBS:-$(nproc)}
MIN_TIME=${BENCH_MIN_TIME:-0.2}
DEPS=${ORCHMLLM_DEVICE_DEPS:-}
if [[ -z "$DEPS" && -d "$ROOT/.device-deps" ]]; then DEPS="$ROOT/.device-deps"; fi
mkdir -p "$OUT_DIR" "$BUILD"
LOG="$OUT_DIR/device_check.log"
: > "$LOG"
export PATH="$CUDA_HOME/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [[ -n "$DEPS" ]]; then
  DEPS=$(cd "$DEPS" && pwd)
  export LD_LIBRARY_PATH="$DEPS/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  if ! command -v mpirun >/dev/null && [[ -d "$DEPS/mpiroot" ]]; then
    cp -an "$DEPS/mpiroot/." /
    [[ -e /usr/bin/mpirun ]] || ln -s mpirun.openmpi /usr/bin/mpirun
    export OMPI_MCA_mca_base_component_show_load_errors=0
  fi
  NCCL_SO=$(find / -xdev \( -path /proc -o -path /sys \) -prune -o -name 'libnccl.so.2*' -print \
    2>/dev/null | head -1)
  export LD_LIBRARY_PATH="$LD_LIBRARY_PATH${NCCL_SO:+:$(dirname "$NCCL_SO")}:$CUDA_HOME/lib64"
  [[ -d "$DEPS/lib/fallback" ]] && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$DEPS/lib/fallback"
fi

say() { echo "== $*" | tee -a "$LOG"; }
# run <name> <timeout seconds> <command...>: output to the log and the terminal; sets RC.
run() {
  local name=$1 limit=$2
  shift 2
  say "$name: $*"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  RC=${PIPESTATUS[0]}
  say "$name: exit $RC after $((SECONDS - start)) s"
}

# ---------------------------------------------------------------------------------------------
say "machine"
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
say "GPU: ${GPU:-none found by nvidia-smi}"
NVCC_VERSION=$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')
say "nvcc: ${NVCC_VERSION:-missing} ($CUDA_HOME)"
NCCL_HEADER=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v = v (v == "" ? "" : ".") $3} END {print v}' \
  "$CUDA_HOME/include/nccl.h" 2>/dev/null)
say "NCCL header: ${NCCL_HEADER:-missing}"
MPIRUN=$(command -v mpirun || true)
say "mpirun: ${MPIRUN:-missing}; cmake: $(cmake --version 2>/dev/null | head -1); ninja: $(command -v ninja || echo missing)"

# ---------------------------------------------------------------------------------------------
TARGETS=(backend_cuda_device_mover_test backend_thrust_gather_cpp_test cuda_gather_bench)
CONFIGURE_RC=0
BUILD_RC=0
if [[ "${ORCHMLLM_PREBUILT:-0}" != "1" ]]; then
  GEN=()
  command -v ninja >/dev/null && GEN=(-G Ninja)
  run configure 300 cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCUDAToolkit_ROOT="$CUDA_HOME" -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" \
    -DORCHMLLM_ENABLE_THRUST=ON -DORCHMLLM_ENABLE_CUDA=ON -DORCHMLLM_BUILD_EXAMPLES=OFF \
    ${DEPS:+-DCMAKE_PREFIX_PATH="$DEPS"}
  CONFIGURE_RC=$RC
  if grep -q '^ORCHMLLM_ENABLE_NCCL:BOOL=ON' "$BUILD/CMakeCache.txt" 2>/dev/null; then
    TARGETS+=(backend_nccl_communicator_test)
  else
    say "NCCL backend not enabled (no MPI or no NCCL found): the NCCL test is not built"
  fi
  if [[ $CONFIGURE_RC -eq 0 ]]; then
    run build 480 cmake --build "$BUILD" -j "$JOBS" --target "${TARGETS[@]}"
    BUILD_RC=$RC
  fi
fi

# ---------------------------------------------------------------------------------------------
declare -A STATUS
test_status() {  # exit code -> passed / skipped / failed / timeout
  case $1 in 0) echo passed ;; 77) echo skipped ;; 124 | 137) echo timeout ;; *) echo failed ;; esac
}
T="$BUILD/tests/backend/cuda"
for t in backend_cuda_device_mover_test backend_thrust_gather_cpp_test; do
  if [[ -x "$T/$t" ]]; then
    run "$t" 240 "$T/$t"
    STATUS[$t]=$(test_status "$RC")
  else
    STATUS[$t]=not_built
  fi
done
t=backend_nccl_communicator_test
if [[ -x "$T/$t" ]]; then
  if [[ -n "$MPIRUN" ]]; then
    run "$t" 240 "$MPIRUN" -np 1 "$T/$t"
  else
    run "$t" 240 "$T/$t"  # singleton MPI_Init
  fi
  STATUS[$t]=$(test_status "$RC")
else
  STATUS[$t]=not_built
fi
NCCL_LIBRARY=$(sed -n 's/^NCCL library \([0-9.]*\).*/\1/p' "$LOG" | head -1)

BENCH="$BUILD/bench/cuda/cuda_gather_bench"
BENCH_RC=-1
if [[ -x "$BENCH" ]]; then
  run gather_bench 300 "$BENCH" --benchmark_min_time="$MIN_TIME" \
    --benchmark_out="$OUT_DIR/gather_bench.json" --benchmark_out_format=json
  BENCH_RC=$RC
fi

# ---------------------------------------------------------------------------------------------
export GPU NVCC_VERSION NCCL_HEADER NCCL_LIBRARY MPIRUN CONFIGURE_RC BUILD_RC BENCH_RC OUT_DIR
export STATUS_MOVER=${STATUS[backend_cuda_device_mover_test]} \
  STATUS_THRUST=${STATUS[backend_thrust_gather_cpp_test]} \
  STATUS_NCCL=${STATUS[backend_nccl_communicator_test]}
python3 - <<'EOF' 2>&1 | tee -a "$LOG"
import json, os
env = os.environ
summary = {
    "gpu": env.get("GPU", ""), "nvcc": env.get("NVCC_VERSION", ""),
    "nccl_header": env.get("NCCL_HEADER", ""), "nccl_library": env.get("NCCL_LIBRARY", ""),
    "mpirun": env.get("MPIRUN", ""),
    "configure_rc": int(env["CONFIGURE_RC"]), "build_rc": int(env["BUILD_RC"]),
    "tests": {"backend.cuda.device_mover": env["STATUS_MOVER"],
              "backend.thrust.gather_cpp": env["STATUS_THRUST"],
              "backend.nccl.communicator": env["STATUS_NCCL"]},
    "bench_rc": int(env["BENCH_RC"]), "bench": [],
}
path = os.path.join(env["OUT_DIR"], "gather_bench.json")
if os.path.exists(path):
    runs = [b for b in json.load(open(path)).get("benchmarks", []) if "GBps" in b]
    d2d = {}
    for b in runs:
        parts = b["name"].split("/")
        if parts[0] == "BM_d2d_copy":
            d2d[parts[2]] = b["GBps"]
    for b in runs:
        parts = b["name"].split("/")
        base = d2d.get(parts[2])
        summary["bench"].append({
            "name": b["name"], "GBps": round(b["GBps"], 1), "MiB": b.get("MiB"),
            "time_us": round(b.get("real_time", 0), 1), "verified": b.get("verified"),
            "vs_d2d": round(b["GBps"] / base, 3) if base else None})
with open(os.path.join(env["OUT_DIR"], "device_check.json"), "w") as f:
    json.dump(summary, f, indent=2)
print(json.dumps(summary, indent=2))
EOF

ok=1
[[ $CONFIGURE_RC -eq 0 && $BUILD_RC -eq 0 && $BENCH_RC -eq 0 ]] || ok=0
for s in "$STATUS_MOVER" "$STATUS_THRUST" "$STATUS_NCCL"; do
  [[ "$s" == passed || "$s" == not_built ]] || ok=0
done
[[ "$STATUS_MOVER" == passed ]] || ok=0
say "device check: $([[ $ok -eq 1 ]] && echo PASSED || echo FAILED) (results in $OUT_DIR)"
[[ $ok -eq 1 ]]
