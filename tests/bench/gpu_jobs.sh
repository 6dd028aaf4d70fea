#!/usr/bin/env bash
# GraphSAGE on R-MAT through the service (daemon, producers, torchrun) with --device cuda and
# --device cpu on the same machine: one summary line per job, each job's JSON in $DIR.
# Run by `gpu_check.sh --jobs`; alone: DIR=/tmp/jobs bash tests/bench/gpu_jobs.sh
# SCALE: R-MAT scale (default 18); GRAPHTIER_SHARED_DATASETS: adds a Cora job where present.
set -uo pipefail
DIR=${DIR:?set DIR to the directory for the job JSON}
SCALE=${SCALE:-18}
mkdir -p "$DIR"
G="python3 -m graphtier.launcher.cli"
$G cluster start >/dev/null || exit 1
trap '$G cluster stop >/dev/null 2>&1' EXIT
$G dataset prepare synthetic:rmat --name "rmat$SCALE" --scale "$SCALE" --feature-dim 128 --undirected >/dev/null || exit 1
job() {  # job NAME ARGS...: submit, wait, save the JSON, print a summary line
    local name=$1; shift
    $G job submit --wait --json "$@" >"$DIR/job-$name.json" 2>"$DIR/job-$name.err"
    python3 - "$name" "$DIR/job-$name.json" <<'PY'
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
PY
}
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())")
common=(--dataset "rmat$SCALE" --fanout 15,10,5 --batch-size 1024 --hidden 256 --epochs 1 --lr 0.003)
job "rmat-cuda-1" "${common[@]}" --device cuda --nproc-per-node 1
if [ "$gpus" -ge 2 ]; then
    job "rmat-cuda-2" "${common[@]}" --device cuda --nproc-per-node 2
else
    echo "   rmat-cuda-2: skipped, $gpus GPU(s) (cuda ranks need one GPU each)"
fi
if [ -n "${GRAPHTIER_SHARED_DATASETS:-}" ] && [ -d "$GRAPHTIER_SHARED_DATASETS/planetoid_cora" ]; then
    $G dataset prepare "planetoid:$GRAPHTIER_SHARED_DATASETS/planetoid_cora" --name cora >/dev/null
    job "cora-cuda" --dataset cora --fanout 25,10 --hidden 256 --batch-size 64 --epochs 30 --lr 0.003 --dropout 0.5 \
        --device cuda --nproc-per-node 1
fi
job "rmat-cpu-1" "${common[@]}" --device cpu --nproc-per-node 1  # last: the slowest
$G metrics --json >"$DIR/metrics.json" 2>&1
