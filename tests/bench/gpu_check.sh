#!/usr/bin/env bash
# One pass on a machine with a CUDA GPU: build graphtier against that machine's torch, run the
# default test suite there, then train through the service (daemon, producers, torchrun) with
# --device cuda and --device cpu on the same machine and print the figures.
#
#   bash tests/bench/gpu_check.sh            # from the repo root; results under $OUT (default /tmp/gpu-check)
#
# Optional inputs: .whl/*.whl (wheels of missing Python packages, installed to /tmp/site and put on
# PYTHONPATH), GRAPHTIER_SHARED_DATASETS (the shared real datasets, for the tests and the Cora job),
# SCALE (R-MAT scale of the throughput jobs, default 18), SKIP_TESTS=1, SKIP_JOBS=1 (a device call is
# limited to 10 minutes: the two halves fit one each), GPU_BENCH=1 (first: the GPU unit tests, the
# machine's limits by gpu_probe.py and bench_gpu_gather.py; BENCH_ARGS are passed to the latter),
# SUITE_SECONDS (cap of the default suite, default 330), PYTEST_ARGS (extra pytest arguments).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
SCALE=${SCALE:-18}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        || exit 1
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.device_count())"
nproc
python3 -m pip install -q --no-build-isolation --no-deps -e . >"$OUT/install.log" 2>&1 || { tail -20 "$OUT/install.log"; exit 1; }
python3 -c "from graphtier.service import native_ops; print('native ops', native_ops.native_available())"
grep -E "registers|spill" "$OUT/install.log" | sort | uniq -c | head -8

if [ "${GPU_BENCH:-0}" = 1 ]; then
    timeout 180 python3 -m pytest tests/service/gpu -q -p no:cacheprovider --timeout 120 2>&1 | tee "$OUT/gpu-tests.log" | tail -15
    timeout 150 python3 tests/bench/gpu_probe.py >"$OUT/gpu_probe.json" 2>"$OUT/gpu_probe.err"; cat "$OUT/gpu_probe.json"
    tail -3 "$OUT/gpu_probe.err"
    timeout 300 python3 tests/bench/bench_gpu_gather.py --json "$OUT/bench_gpu_gather.json" ${BENCH_ARGS:-} 2>&1 \
        | tee "$OUT/bench_gpu_gather.log" | grep -v '^{'
fi

if [ "${SKIP_TESTS:-0}" != 1 ]; then
    timeout "${SUITE_SECONDS:-330}" python3 -m pytest -m "not slow" -q -p no:cacheprovider --timeout 120 \
        ${PYTEST_ARGS:-} 2>&1 | tee "$OUT/pytest.log" | tail -8
fi

[ "${SKIP_JOBS:-0}" = 1 ] && exit 0
export GRAPHTIER_HOME=/tmp/gt-gpu-home
G="python3 -m graphtier.launcher.cli"
$G cluster start >/dev/null || exit 1
trap '$G cluster stop >/dev/null 2>&1' EXIT
$G dataset prepare synthetic:rmat --name rmat$SCALE --scale "$SCALE" --feature-dim 128 --undirected >/dev/null || exit 1
job() {  # job NAME ARGS...: submit, wait, save the JSON, print a summary line
    local name=$1; shift
    $G job submit --wait --json "$@" >"$OUT/job-$name.json" 2>"$OUT/job-$name.err"
    python3 - "$name" "$OUT/job-$name.json" <<'EOF'
import json, sys
name, path = sys.argv[1], sys.argv[2]
try:
    job = json.load(open(path))
except ValueError:
    print(f"{name}: no JSON (see job-{name}.err)"); sys.exit(0)
r, p = job.get("result") or {}, job.get("progress") or {}
steps, secs = p.get("global_step", 0), r.get("train_seconds", 0.0)
print(f"{name:>14}: {job['state']:<10} {steps} steps in {secs:.1f} s = {steps / secs if secs else 0:.2f} steps/s; "
      f"val {r.get('val_accuracy', 0):.3f} test {r.get('test_accuracy', 0):.3f}  {job.get('message', '')}")
EOF
}
common=(--dataset "rmat$SCALE" --fanout 15,10,5 --batch-size 1024 --hidden 256 --epochs 1 --lr 0.003)
job "rmat-cuda-1" "${common[@]}" --device cuda --nproc-per-node 1
job "rmat-cuda-2" "${common[@]}" --device cuda --nproc-per-node 2  # refused on a 1-GPU machine
if [ -n "${GRAPHTIER_SHARED_DATASETS:-}" ] && [ -d "$GRAPHTIER_SHARED_DATASETS/planetoid_cora" ]; then
    $G dataset prepare "planetoid:$GRAPHTIER_SHARED_DATASETS/planetoid_cora" --name cora >/dev/null
    job "cora-cuda" --dataset cora --fanout 25,10 --hidden 256 --batch-size 64 --epochs 30 --lr 0.003 --dropout 0.5 \
        --device cuda --nproc-per-node 1
fi
job "rmat-cpu-1" "${common[@]}" --device cpu --nproc-per-node 1  # last: the slowest
$G metrics --json >"$OUT/metrics.json" 2>&1
