#!/usr/bin/env bash
# The wheels of every package graphtier needs that a bare GPU machine's image lacks, for its Python
# (3.12, x86-64, manylinux): that image has torch (with CUDA), numpy, scipy, grpcio's runtime,
# cuda-bindings, typer, rich, psutil, pyyaml, xxhash, nvidia-ml-py, prometheus-client, pytest and
# pytest-timeout, but no pydantic, FastAPI, uvicorn, blake3, cryptography or the grpcio health and
# reflection services, and a protobuf older than the generated code needs. Nothing can be fetched
# there, so the wheels travel with the working tree in .whl/ (git-ignored; about 17 MiB, well under
# what a device run carries) and tests/bench/gpu_check.sh installs them offline (--no-index --no-deps).
#
#   bash tests/bench/gpu_wheels.sh [NAME==VERSION ...]   # here, in the repository root: fills .whl/
#   bash tests/bench/gpu_wheels.sh --check               # there: every requirement of setup.py is met
#
# Extra NAME==VERSION arguments are fetched too (e.g. cuda-bindings==13.0.3 for an image without it).
# The versions are the ones the test suite runs with; one version of each (two stop the install).
# Environment: WHEEL_PYTHON (default 3.12), WHEEL_DIR (default .whl), WHEEL_MAX_MIB (default 40);
# PYTHON, the interpreter --check asks (default python3).
set -euo pipefail

WHEELS=(
    pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    typing-extensions==4.16.0
    fastapi==0.165.0 starlette==1.10.0 opentelemetry-api==1.45.2 uvicorn==0.54.0
    blake3==1.0.11
    cryptography==50.0.2 cffi==2.1.1 pycparser==3.12
    grpcio==1.85.3 grpcio-health-checking==1.85.1 grpcio-reflection==1.85.1 protobuf==7.36.2
)
PY=${WHEEL_PYTHON:-3.12}
WHEEL_DIR=${WHEEL_DIR:-.whl}
MAX_MIB=${WHEEL_MAX_MIB:-40}
[ -f setup.py ] || { echo "gpu_wheels.sh: run it from the repository root" >&2; exit 2; }

if [ "${1:-}" = --check ]; then  # on the GPU machine, after the install: what python3 (or $PYTHON) sees
    exec "${PYTHON:-python3}" - <<'PY'
import ast, importlib.metadata as md, sys
from packaging.requirements import Requirement
tree = ast.parse(open("setup.py").read())
deps = next(ast.literal_eval(n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "DEPENDENCIES")
missing = []
for text in deps:
    req = Requirement(text)
    try:
        have = md.version(req.name)
    except md.PackageNotFoundError:
        missing.append(f"{req.name} (not installed)")
        continue
    if req.specifier and not req.specifier.contains(have, prereleases=True):
        missing.append(f"{req.name} {have} (needs {req.specifier})")
if missing:
    print("gpu_wheels: unmet requirements: " + "; ".join(missing) + " (carry them: bash tests/bench/gpu_wheels.sh)")
    sys.exit(1)
print(f"gpu_wheels: all {len(deps)} requirements of setup.py are met")
PY
fi

if git rev-parse --git-dir >/dev/null 2>&1; then  # .whl/ never committed, yet carried (README of the device)
    exclude=$(git rev-parse --git-path info/exclude)
    mkdir -p "$(dirname "$exclude")"
    grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
fi
rm -rf "$WHEEL_DIR"
mkdir -p "$WHEEL_DIR"
platforms=()
for n in 39 35 34 31 28 27 24 17; do platforms+=(--platform "manylinux_2_${n}_x86_64"); done
platforms+=(--platform manylinux2014_x86_64 --platform manylinux1_x86_64)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    "${platforms[@]}" -d "$WHEEL_DIR" "${WHEELS[@]}" "$@"
count=$(ls "$WHEEL_DIR"/*.whl | wc -l)
expected=$((${#WHEELS[@]} + $#))
[ "$count" = "$expected" ] || { echo "gpu_wheels.sh: $count wheels for $expected names" >&2; exit 1; }
names=$(ls "$WHEEL_DIR"/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort)
dupes=$(echo "$names" | uniq -d)
[ -z "$dupes" ] || { echo "gpu_wheels.sh: two versions of $dupes" >&2; exit 1; }
bytes=$(du -cb "$WHEEL_DIR"/*.whl | tail -1 | cut -f1)
[ "$bytes" -le $((MAX_MIB << 20)) ] || { echo "gpu_wheels.sh: $((bytes >> 20)) MiB of wheels, over $MAX_MIB" >&2; exit 1; }
echo "gpu_wheels.sh: $count wheels for Python $PY, $((bytes >> 10)) KiB, in $WHEEL_DIR/ (name it in carry)"
