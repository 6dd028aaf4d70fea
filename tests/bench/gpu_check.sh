#!/usr/bin/env bash
# One command on a bare CUDA machine (H100/H200, Python 3.12 and torch preinstalled): install the
# wheels brought in .whl/, build graphtier against that torch, compile the GPU ops and check every
# kernel's registers and spills, run the GPU tests, run a GPU job end to end (`graphtier demo`,
# cuda ranks on min(2, GPUs)), then the benchmarks: gpu_probe.py (the machine's limits, measured
# without graphtier) and bench_gpu_gather.py (graphtier's GPU gather against them). Every step has
# a time limit inside one overall deadline (default 570 s, under a 10-minute device call); a step
# that would start too late is skipped and says so. Every log and figure goes into one directory,
# archived as one tarball whose path is printed last.
#
#   bash tests/bench/gpu_check.sh [options]          # from the repository root
#
#   --out DIR        where the tarball goes (default: $OUT if set, else /tmp)
#   --deadline S     overall limit in seconds (default 570)
#   --suite          also run the default test suite (-m "not slow"; long: not within the deadline)
#   --jobs           also the R-MAT GraphSAGE jobs, --device cuda vs cpu (SCALE, default 18)
#   --skip-build     use the graphtier already installed (no wheels, no build)
#   --skip-bench     no gpu_probe.py, no bench_gpu_gather.py
#   --dry-run        run nothing: write the plan of steps, then archive it as a real run would
#   -h, --help
#
# Environment: BENCH_ARGS (bench_gpu_gather.py, default "--host-gib 8 --scale 20"), PYTEST_ARGS,
# GPU_TESTS (the GPU test paths), DEMO_SCALE (default 16), SCALE, GRAPHTIER_SHARED_DATASETS.
set -uo pipefail

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
ARCHIVE_DIR=${OUT:-/tmp}
DEADLINE=570
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
DIR=$(mktemp -d "/tmp/gpu-check-$(date -u +%Y%m%dT%H%M%SZ)-XXXX") || exit 2
export DIR  # the logs and figures; archived as $ARCHIVE_DIR/$NAME.tar.gz
NAME=$(basename "$DIR")
ARCHIVE=$(cd "$ARCHIVE_DIR" && pwd)/$NAME.tar.gz
export GRAPHTIER_HOME=/tmp/$NAME-home  # the demo's daemon and dataset: outside the archive
export PYTHONUNBUFFERED=1 MAX_JOBS=${MAX_JOBS:-$(nproc)}
RESERVE=15  # seconds kept for the archive
GPU_TESTS=${GPU_TESTS:-tests/service/gpu tests/service/hardware tests/service/daemon/datasets/test_daemon_gpu_placement.py tests/launcher/cli/test_demo_placement.py tests/launcher/cli/test_doctor_cli.py}
BENCH_ARGS=${BENCH_ARGS:---host-gib 8 --scale 20}
printf 'step\tstatus\tseconds\tlimit\n' >"$DIR/summary.tsv"

step() {  # step NAME LIMIT 'SHELL COMMAND': run it into NAME.log, within LIMIT and the overall deadline
    local name=$1 limit=$2 command=$3
    local left=$((DEADLINE - SECONDS - RESERVE))
    if [ "$left" -lt 20 ]; then
        printf '%s\tskipped (deadline)\t0\t%s\n' "$name" "$limit" >>"$DIR/summary.tsv"
        echo "== $name: skipped, ${left}s left of the ${DEADLINE}s deadline"
        return 1
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$DRY_RUN" = 1 ]; then
        printf '%s (limit %ss): %s\n' "$name" "$limit" "$command" >>"$DIR/plan.txt"
        printf '%s\tplanned\t0\t%s\n' "$name" "$limit" >>"$DIR/summary.tsv"
        echo "== $name (limit ${limit}s): $command"
        return 0
    fi
    echo "== $name (limit ${limit}s)"
    local t0=$SECONDS rc
    timeout --kill-after=10 "$limit" bash -c "$command" >"$DIR/$name.log" 2>&1
    rc=$?
    [ "$rc" = 124 ] && echo "gpu_check.sh: $name stopped at its ${limit}s limit" >>"$DIR/$name.log"
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - t0))" "$limit" >>"$DIR/summary.tsv"
    tail -n "${TAIL_LINES:-8}" "$DIR/$name.log" | sed 's/^/   /'
    return "$rc"
}

archive() {  # the tarball of $DIR, whatever happened; its path last
    trap - EXIT INT TERM
    if [ "$DRY_RUN" != 1 ]; then
        python3 -m graphtier.launcher.cli cluster stop >/dev/null 2>&1
        cp "$GRAPHTIER_HOME"/run/*.log "$DIR"/ 2>/dev/null
        rm -rf "$GRAPHTIER_HOME"
    fi
    column -t -s "$(printf '\t')" "$DIR/summary.tsv" 2>/dev/null || cat "$DIR/summary.tsv"
    tar -czf "$ARCHIVE" -C "$(dirname "$DIR")" "$NAME" && rm -rf "$DIR" && echo "archive: $ARCHIVE"
}
trap archive EXIT
trap 'exit 130' INT TERM

step environment 30 'nvidia-smi; nvidia-smi topo -m; python3 -V; nproc; free -g
python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count())"'

SITE=/tmp/gpu-check-site  # the wheels of .whl/, installed beside the preinstalled torch
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
if [ "$SKIP_BUILD" != 1 ] && compgen -G ".whl/*.whl" >/dev/null; then
    step wheels 120 "python3 -m pip install --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl"
fi
# every kernel's registers and spills, parsed per kernel (the compile test's parser); needs only
# torch and nvcc, so a failed build below still leaves each source's compiler output here
step kernels 120 'python3 tests/service/gpu/cuda_compile.py --json "$DIR/kernels.json"'
if [ "$SKIP_BUILD" != 1 ]; then
    # -v: the compiler output (nvcc's ptxas lines among it) stays in build.log
    step build 300 'python3 -m pip install -v --no-build-isolation --no-deps -e . \
        && python3 -c "from graphtier.service import native_ops; print(\"native ops\", native_ops.native_available())" \
        && python3 -c "from graphtier.service.gpu.gather import load_cuda_ops; load_cuda_ops(); print(\"GPU ops loaded\")"' \
        || { echo "gpu_check.sh: the build failed (build.log)"; exit 1; }
fi
step gpu-tests 240 "python3 -m pytest $GPU_TESTS -q -p no:cacheprovider --timeout 120 -rs --junitxml \"\$DIR/gpu-tests.xml\" ${PYTEST_ARGS:-}"
step demo 180 "python3 -m graphtier.launcher.cli demo --scale ${DEMO_SCALE:-16} --epochs 1"
if [ "$SKIP_BENCH" != 1 ]; then
    step gpu-probe 150 'python3 tests/bench/gpu_probe.py >"$DIR/gpu_probe.json"'
    step bench-gpu-gather 240 "python3 tests/bench/bench_gpu_gather.py --json \"\$DIR/bench_gpu_gather.json\" $BENCH_ARGS"
fi
if [ "$SUITE" = 1 ]; then
    DEADLINE=$((DEADLINE + 600))
    step suite 600 "python3 -m pytest -m 'not slow' -q -p no:cacheprovider --timeout 120 ${PYTEST_ARGS:-}"
fi
if [ "$JOBS" = 1 ]; then
    DEADLINE=$((DEADLINE + 600))
    step jobs 600 'bash tests/bench/gpu_jobs.sh'
fi
