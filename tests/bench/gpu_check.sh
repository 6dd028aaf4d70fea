#!/usr/bin/env bash
# One command on a bare CUDA machine (an H200: Python 3.12 and a CUDA torch preinstalled, nothing to
# fetch) that proves or breaks graphtier's GPU data path within a 15-minute device budget: at most
# 420 s of wall time by default, every step under its own limit inside that deadline (a step that
# would start too late is skipped and says so), stopping at once when the machine cannot run the rest.
#
#   environment   nvidia-smi; driver, torch and its CUDA, nvcc, cuda-bindings, the read-only host
#                 registration attribute (gpu_smoke.py versions). Stops the check: no usable GPU.
#   wheels        .whl/ installed offline beside the image's packages (made here by
#                 tests/bench/gpu_wheels.sh), then setup.py's requirements checked. Stops it: unmet.
#   build         pip install -e . once: the CPU and GPU ops compiled together (ninja, MAX_JOBS =
#                 cores; a CUDA major mismatch skips the GPU ops with one line). Stops it: failed.
#   kernels       each kernel's registers and spills, read from the build's ptxas lines (no compile)
#   smoke         gpu_smoke.py: each primitive on its own, one line each, works or refused
#   gpu-core, gpu-kernels, gpu-rest
#                 the GPU tests, most important first, 60 s per test, a junit XML per group
#   mps           the MPS test alone, in a fresh process
#   job           one --device cuda GraphSAGE job end to end (2 ranks where there are 2 GPUs), with
#                 what the machine let it use and what it lacked (MPS, cross-process GPU memory, ranks)
#   gpu-probe, bench-gpu-gather   the benchmarks, only with the time left (--skip-bench: never)
# The rest of the check goes on with what works: the smoke's results choose how the job shares GPU
# memory (CUDA IPC, else VMM fds, else a CPU job), the MPS test's whether it runs under MPS.
# Logs, the smoke's JSON and the junit XML files go into one directory, archived as one tarball under
# --out after every step (a run killed at its limit still leaves the last one); its path comes last.
#
#   bash tests/bench/gpu_check.sh [options]          # from the repository root
#
#   --out DIR        where the tarball goes (default: $OUT if set, else /tmp)
#   --deadline S     overall limit in seconds (default 420)
#   --skip-build     use the graphtier already built and installed (a rerun on a machine still warm)
#   --skip-bench     no gpu_probe.py, no bench_gpu_gather.py
#   --jobs           then the R-MAT jobs of gpu_jobs.sh (cuda vs cpu; 600 s more)
#   --suite          then the default test suite (-m "not slow"; 600 s more)
#   --dry-run        the same control flow on any machine, every CUDA step a no-op: the steps' time is
#                    simulated from their expected seconds, the smoke harness runs with no-op checks
#   -h, --help
#
# Environment: PYTHON (default python3), MAX_JOBS (default: cores), JOB_SCALE (default 20),
# JOB_EPOCHS (1), GPU_TEST_TIMEOUT (60 s per test), BENCH_ARGS (bench_gpu_gather.py, default
# "--host-gib 2 --scale 20 --batches 20"), PYTEST_ARGS, SCALE (--jobs), DRY_GPUS (the dry run's
# GPU count, default 1), DRY_STALL_STEP (a dry-run step that hangs, to test a killed run's archive).
# Exit status: 0 every step that ran passed; 1 the check stopped early (see the last step's log);
# 3 some step failed; 2 bad arguments.
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
ARCHIVE_DIR=${OUT:-/tmp}
DEADLINE=420
SUITE=0 JOBS=0 SKIP_BUILD=0 SKIP_BENCH=0 DRY_RUN=0
while [ $# -gt 0 ]; do
    case $1 in
        --out) [ $# -ge 2 ] || { echo "gpu_check.sh: --out needs a directory" >&2; exit 2; }; ARCHIVE_DIR=$2; shift ;;
        --deadline)
            [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "gpu_check.sh: --deadline needs whole seconds, got '${2:-}'" >&2; exit 2; }
            DEADLINE=$2; shift ;;
        --suite) SUITE=1 ;;
        --jobs) JOBS=1 ;;
        --skip-build) SKIP_BUILD=1 ;;
        --skip-bench) SKIP_BENCH=1 ;;
        --dry-run) DRY_RUN=1 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ -f setup.py ] && [ -d native/cuda ] || { echo "gpu_check.sh: run it from the repository root" >&2; exit 2; }

mkdir -p "$ARCHIVE_DIR" || exit 2
NAME=gpu-check-$(date -u +%Y%m%dT%H%M%SZ)-$$
DIR=/tmp/$NAME  # the logs and figures; archived as $ARCHIVE
mkdir -p "$DIR" || exit 2
ARCHIVE=$(cd "$ARCHIVE_DIR" && pwd)/$NAME.tar.gz
export DIR GRAPHTIER_HOME=/tmp/$NAME-home  # the job's daemon and dataset: outside the archive
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-$(nproc)}
PY=${PYTHON:-python3}
export PYTHON=$PY  # tests/bench/gpu_wheels.sh --check asks the same interpreter
SITE=/tmp/$NAME-site  # the wheels of .whl/, first on the path, beside the image's packages
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
RESERVE=10  # seconds kept for the archive
SIMULATED=0  # a dry run's seconds: each step adds the seconds it is expected to take
FAILED=0
printf 'step\tstatus\tseconds\tlimit\n' >"$DIR/summary.tsv"

GPU_CORE="tests/service/gpu/test_gpu_memory_handles.py tests/service/gpu/test_gpu_host_registry.py \
tests/service/gpu/test_gpu_device_tiers.py tests/service/gpu/test_gpu_device_slots.py"
GPU_KERNELS="tests/service/gpu/test_gpu_gather.py tests/service/gpu/test_gpu_sampler.py \
tests/service/gpu/test_gpu_batch_stream.py tests/service/gpu/test_gpu_producer_batches.py"
GPU_REST="tests/service/gpu/test_gpu_modules_import.py tests/service/hardware \
tests/service/daemon/datasets/test_daemon_gpu_placement.py tests/launcher/cli/test_demo_placement.py \
tests/launcher/cli/test_doctor_cli.py"
GPU_MPS="tests/service/gpu/test_gpu_mps.py"

now() { echo $((SECONDS + SIMULATED)); }

snapshot() {  # the archive as it stands: replaced whole, so a killed run leaves the last complete one
    tar -czf "$ARCHIVE.part" -C "$(dirname "$DIR")" "$NAME" 2>/dev/null && mv -f "$ARCHIVE.part" "$ARCHIVE"
}

record() { printf '%s\t%s\t%s\t%s\n' "$@" >>"$DIR/summary.tsv"; }

# step NAME EXPECT LIMIT 'COMMAND' ['DRY-RUN COMMAND']: COMMAND into NAME.log within LIMIT seconds and the
# deadline (SIGINT first, so pytest still writes its junit XML; SIGKILL 10 s later). EXPECT: its seconds
# on the GPU machine (a dry run's clock). MIN_LEFT (default 15): fewer seconds left and it is skipped.
step() {
    local name=$1 expect=$2 limit=$3 command=$4 dry=${5:-:}
    local left=$((DEADLINE - $(now) - RESERVE)) rc t0
    if [ "$left" -lt "${MIN_LEFT:-15}" ]; then
        record "$name" "skipped (deadline)" 0 "$limit"
        echo "== $name: skipped, ${left}s left of the ${DEADLINE}s deadline"
        snapshot
        return 125
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit}s)"
    t0=$(now)
    if [ "$DRY_RUN" = 1 ]; then
        printf '%s (expect %ss, limit %ss): %s\n' "$name" "$expect" "$limit" "$command" >>"$DIR/plan.txt"
        [ "$name" = "${DRY_STALL_STEP:-}" ] && dry="sleep 600"
        timeout -s INT -k 10 "$limit" bash -c "$dry" >"$DIR/$name.log" 2>&1
        rc=$?
        SIMULATED=$((SIMULATED + (expect < limit ? expect : limit)))
    else
        timeout -s INT -k 10 "$limit" bash -c "$command" >"$DIR/$name.log" 2>&1
        rc=$?
    fi
    [ "$rc" = 124 ] && echo "gpu_check.sh: $name stopped at its ${limit}s limit" >>"$DIR/$name.log"
    record "$name" "$rc" "$(($(now) - t0))" "$limit"
    tail -n "${TAIL:-6}" "$DIR/$name.log" | sed 's/^/   /'
    [ "$rc" = 0 ] || FAILED=$((FAILED + 1))
    snapshot
    return "$rc"
}

finish() {  # the tarball of $DIR, whatever happened; its path last
    local status=$?
    trap - EXIT INT TERM
    if [ "$DRY_RUN" != 1 ] && [ -d "$GRAPHTIER_HOME" ]; then
        timeout 60 "$PY" -m graphtier.launcher.cli cluster stop >/dev/null 2>&1
        cp "$GRAPHTIER_HOME"/run/*.log "$DIR"/ 2>/dev/null
        rm -rf "$GRAPHTIER_HOME"
    fi
    rm -rf "$SITE"
    echo "== summary ($(now) s of the ${DEADLINE}s deadline$([ "$DRY_RUN" = 1 ] && echo ', simulated'))"
    column -t -s "$(printf '\t')" "$DIR/summary.tsv" 2>/dev/null || cat "$DIR/summary.tsv"
    snapshot && rm -rf "$DIR" && echo "archive: $ARCHIVE"
    exit "$status"
}
trap finish EXIT
trap 'exit 130' INT TERM

stop() { echo "gpu_check.sh: $1; stopping the check"; exit 1; }

# -- the machine -----------------------------------------------------------------------------------
TAIL=3 step environment 8 30 "nvidia-smi; nvidia-smi topo -m; $PY -V; nproc; free -g; df -h /dev/shm /tmp
$PY tests/bench/gpu_smoke.py --only versions --json \"\$DIR/versions.json\"" \
    "$PY -V; nproc; $PY tests/bench/gpu_smoke.py --only versions --dry-run --json \"\$DIR/versions.json\"" \
    || stop "torch sees no usable GPU here (environment.log)"

install="$PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl"
compgen -G ".whl/*.whl" >/dev/null || install="echo 'no .whl/ carried: the image must have every requirement'"
step wheels 8 60 "$install && bash tests/bench/gpu_wheels.sh --check" \
    "ls .whl 2>/dev/null | wc -l; bash tests/bench/gpu_wheels.sh --check" \
    || stop "graphtier's requirements are not met (wheels.log; carry them: bash tests/bench/gpu_wheels.sh)"
if [ "$SKIP_BUILD" != 1 ]; then
    # -v: nvcc's ptxas report stays in build.log; the ops are checked to load (the GPU ops' reason if not)
    ops_check="$PY -c 'from graphtier.service import native_ops; print(\"CPU ops\", native_ops.native_available())'
$PY -c 'from graphtier.service.gpu.gather import load_cuda_ops; load_cuda_ops(); print(\"GPU ops loaded\")' \
|| echo 'GPU ops NOT loaded: the GPU steps below say what that costs'"
    build="$PY -m pip install -v --no-build-isolation --no-deps -e ."
    if ! TAIL=4 step build 100 240 "$build && { $ops_check; }" "$PY -c 'import ast; ast.parse(open(\"setup.py\").read())'"; then
        # once more with the extensions one after the other (ninja keeps what compiled)
        GRAPHTIER_BUILD_PARALLEL=1 TAIL=4 step build-serial 30 180 "GRAPHTIER_BUILD_PARALLEL=1 $build && { $ops_check; }" \
            || stop "the build failed (build.log, build-serial.log)"
    fi
    TAIL=12 step kernels 1 20 "$PY tests/service/gpu/cuda_compile.py --from-log \"\$DIR/build.log\" --json \"\$DIR/kernels.json\""
fi

# -- each primitive on its own, then the tests ---------------------------------------------------------
TAIL=11 step smoke 30 90 "$PY tests/bench/gpu_smoke.py --json \"\$DIR/smoke.json\"" \
    "$PY tests/bench/gpu_smoke.py --dry-run --json \"\$DIR/smoke.json\""
# how the job shares GPU memory between processes: what the smoke saw work
SHARING=$("$PY" - "$DIR/smoke.json" <<'PY' 2>/dev/null || echo none
import json, sys
checks = json.load(open(sys.argv[1]))["checks"]
works = lambda name: checks.get(name, {}).get("status") == "works"
print("ipc" if works("ipc-memory") and works("ipc-events") else "vmm" if works("vmm") and works("ipc-events") else "none")
PY
)

pytest_step() {  # pytest_step NAME EXPECT LIMIT PER-TEST-TIMEOUT PATHS...
    local name=$1 expect=$2 limit=$3 per_test=$4
    shift 4
    local check="for p in $*; do [ -e \"\$p\" ] || { echo \"no test path \$p\"; exit 1; }; done; echo '$# test paths'"
    TAIL=4 step "$name" "$expect" "$limit" "$check && $PY -m pytest $* -p no:cacheprovider -p no:randomly -v -rs \
--timeout $per_test --maxfail 5 --junitxml \"\$DIR/$name.xml\" ${PYTEST_ARGS:-}" "$check"
}
T=${GPU_TEST_TIMEOUT:-60}
pytest_step gpu-core 60 120 "$T" $GPU_CORE
pytest_step gpu-kernels 60 120 "$T" $GPU_KERNELS
pytest_step gpu-rest 25 60 "$T" $GPU_REST
pytest_step mps 20 90 90 $GPU_MPS
MPS=off
if [ "$DRY_RUN" = 1 ] || grep -q " 1 passed" "$DIR/mps.log" 2>/dev/null; then MPS=manage; fi

# -- one job end to end, with what works --------------------------------------------------------------
if [ "$DRY_RUN" = 1 ]; then GPUS=${DRY_GPUS:-1}; else GPUS=$("$PY" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0); fi
RANKS=$((GPUS < 2 ? GPUS : 2))
DEVICE=cuda TIERS=auto MEMORY=$SHARING
{
    [ "$RANKS" -lt 2 ] && echo "1 rank: this machine has $GPUS GPU(s), and cuda ranks need one each (NCCL)"
    [ "$MPS" = off ] && echo "no MPS: its test did not pass here (mps.log); producers capped to their SM share instead"
    [ "$SHARING" = vmm ] && echo "device memory shared as VMM fds: CUDA IPC was refused (smoke.json)"
    if [ "$SHARING" = none ]; then
        echo "no GPU memory shared between processes (IPC and VMM refused, smoke.json): a cpu job, device tiers accounted"
        DEVICE=cpu TIERS=off MEMORY=ipc MPS=off RANKS=2
    fi
} >"$DIR/job-lacked.txt"
SCALE_JOB=${JOB_SCALE:-20}
G="$PY -m graphtier.launcher.cli"
job="mkdir -p \$GRAPHTIER_HOME && printf 'device_memory: $MEMORY\ngpu_tiers: \"$TIERS\"\n' >\$GRAPHTIER_HOME/daemon.yaml \
&& $G cluster start --config \$GRAPHTIER_HOME/daemon.yaml \
&& $G dataset prepare synthetic:rmat --name rmat$SCALE_JOB --scale $SCALE_JOB --feature-dim 128 --undirected \
&& $G job submit --wait --json --dataset rmat$SCALE_JOB --model sage --fanout 15,10,5 --batch-size 1024 --hidden 256 \
--epochs ${JOB_EPOCHS:-1} --device $DEVICE --nproc-per-node $RANKS --num-devices 1 --device-replicated 10% \
$([ "$DEVICE" = cuda ] && echo "--mps $MPS") >\"\$DIR/job.json\"; rc=\$?
$PY tests/bench/gpu_check_job.py \"\$DIR/job.json\" \"\$DIR/job-lacked.txt\"; exit \$rc"
TAIL=5 step job 70 150 "$job" "cat \"\$DIR/job-lacked.txt\""

# -- the benchmarks, only with the time left ----------------------------------------------------------
if [ "$SKIP_BENCH" != 1 ]; then
    MIN_LEFT=45 step gpu-probe 40 60 "$PY tests/bench/gpu_probe.py >\"\$DIR/gpu_probe.json\""
    MIN_LEFT=60 TAIL=20 step bench-gpu-gather 120 600 \
        "$PY tests/bench/bench_gpu_gather.py --json \"\$DIR/bench_gpu_gather.json\" ${BENCH_ARGS:---host-gib 2 --scale 20 --batches 20}"
fi
if [ "$JOBS" = 1 ]; then
    DEADLINE=$((DEADLINE + 600))
    step jobs 300 600 'DIR=$DIR/jobs bash tests/bench/gpu_jobs.sh'
fi
if [ "$SUITE" = 1 ]; then
    DEADLINE=$((DEADLINE + 600))
    step suite 500 600 "$PY -m pytest -m 'not slow' -q -p no:cacheprovider --timeout 120 ${PYTEST_ARGS:-}"
fi
[ "$FAILED" = 0 ] || exit 3
