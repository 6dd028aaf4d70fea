#!/usr/bin/env bash
# Sets up the PyG baseline for tests/bench/bench_sampler.py in the CURRENT python env.
#
# pyg-lib cannot be installed on this machine class, so PyG's NeighborLoader runs on
# torch-sparse's sampling ops. The full torch-sparse 0.6.18 build takes > 20 min on 2 cores
# and its Python package needs torch-scatter, so only the four ops PyG's sampler needs
# (version, neighbor_sample, diag, ego_sample) are compiled, and only their .so files are
# kept (in .bench-env/ts_ops/). The bench loads them with torch.ops.load_library and sets
# torch_geometric.typing.WITH_TORCH_SPARSE = True.
#
# Idempotent: every step is skipped when its result is already there. Never lets pip
# replace torch: every pip command either pins the installed torch version or uses --no-deps.
# Usage: tests/bench/baselines/setup_pyg.sh        (env: PYTHON=python, MAX_JOBS=2)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
ENV_DIR="$ROOT/.bench-env"
SRC_DIR="$ENV_DIR/src"
WHEEL_DIR="$ENV_DIR/wheels"
OPS_DIR="$ENV_DIR/ts_ops"
PYTHON="${PYTHON:-python}"
TS_VERSION="0.6.18"
TS_OPS=(version neighbor_sample diag ego_sample)
export MAX_JOBS="${MAX_JOBS:-2}"

say() { printf '[setup_pyg] %s\n' "$*"; }
die() { printf '[setup_pyg] ERROR: %s\n' "$*" >&2; exit 1; }
trap 'die "failed at line $LINENO: $BASH_COMMAND"' ERR

TORCH_VERSION="$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])')" \
    || die "torch is not importable with $PYTHON; install graphtier's environment first"
say "python: $("$PYTHON" -c 'import sys; print(sys.executable)'), torch $TORCH_VERSION (pinned)"
mkdir -p "$SRC_DIR" "$WHEEL_DIR" "$OPS_DIR"

# 1. torch_geometric (pure Python) into the current env, torch pinned.
if "$PYTHON" -c 'import torch_geometric' 2>/dev/null; then
    say "step 1/4: torch_geometric $("$PYTHON" -c 'import torch_geometric as g; print(g.__version__)') already installed -> skip"
else
    say "step 1/4: pip install torch_geometric (torch pinned to $TORCH_VERSION)"
    "$PYTHON" -m pip install torch_geometric "torch==$TORCH_VERSION"
fi

ops_loadable() {
    "$PYTHON" - "$OPS_DIR" "${TS_OPS[@]}" <<'PY'
import os, sys, torch
ops_dir, names = sys.argv[1], sys.argv[2:]
for name in names:
    torch.ops.load_library(os.path.join(ops_dir, f"_{name}_cpu.so"))
torch.ops.torch_sparse.neighbor_sample  # raises if the op did not register
PY
}

if ops_loadable 2>/dev/null; then
    say "steps 2-4/4: torch-sparse ops already in $OPS_DIR and loadable -> skip"
else
    # 2. The torch-sparse sdist (metadata needs torch, hence --no-build-isolation).
    SDIST="$SRC_DIR/torch_sparse-$TS_VERSION.tar.gz"
    if [[ -f "$SDIST" ]]; then
        say "step 2/4: sdist $SDIST already downloaded -> skip"
    else
        say "step 2/4: pip download torch-sparse==$TS_VERSION sdist"
        "$PYTHON" -m pip download --no-deps --no-build-isolation --no-binary :all: \
            "torch-sparse==$TS_VERSION" -d "$SRC_DIR"
    fi
    [[ -f "$SDIST" ]] || die "sdist not found at $SDIST after download"

    # 3. Unpack and limit setup.py's extension list to the four ops.
    TREE="$SRC_DIR/torch_sparse-$TS_VERSION"
    if [[ ! -f "$TREE/setup.py" ]]; then
        say "step 3/4: unpack $SDIST"
        tar -xzf "$SDIST" -C "$SRC_DIR"
    fi
    if grep -q 'graphtier-bench: ops only' "$TREE/setup.py"; then
        say "step 3/4: setup.py already limited to ${TS_OPS[*]} -> skip"
    else
        say "step 3/4: limit setup.py extensions to ${TS_OPS[*]}"
        "$PYTHON" - "$TREE/setup.py" "${TS_OPS[@]}" <<'PY'
import sys
path, names = sys.argv[1], sys.argv[2:]
text = open(path).read()
anchor = "    main_files = [path for path in main_files if 'hip' not in path]\n"
if anchor not in text:
    sys.exit(f"{path}: expected line not found, cannot limit the extension list: {anchor!r}")
keep = ("    # graphtier-bench: ops only\n"
        f"    main_files = [p for p in main_files if osp.basename(p)[:-4] in {names!r}]\n")
open(path, "w").write(text.replace(anchor, anchor + keep))
PY
    fi

    # 4. Build a wheel (no install, so no torch_sparse package is left behind), keep the .so files.
    say "step 4/4: build the ops (pip wheel --no-build-isolation, MAX_JOBS=$MAX_JOBS; a few minutes)"
    rm -f "$WHEEL_DIR"/torch_sparse-*.whl
    FORCE_ONLY_CPU=1 "$PYTHON" -m pip wheel --no-deps --no-build-isolation -w "$WHEEL_DIR" "$TREE"
    WHEEL="$(ls "$WHEEL_DIR"/torch_sparse-*.whl)"
    say "step 4/4: extract _*_cpu.so from $(basename "$WHEEL") into $OPS_DIR"
    "$PYTHON" - "$WHEEL" "$OPS_DIR" <<'PY'
import os, sys, zipfile
wheel, out = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as zf:
    names = [n for n in zf.namelist() if n.startswith("torch_sparse/_") and n.endswith("_cpu.so")]
    if not names:
        sys.exit(f"{wheel}: no torch_sparse/_*_cpu.so inside")
    for n in names:
        with zf.open(n) as src, open(os.path.join(out, os.path.basename(n)), "wb") as dst:
            dst.write(src.read())
        print("  ", os.path.basename(n))
PY
fi

# A torch_sparse *package* in the env would make PyG import it (it needs torch_scatter): remove it.
if "$PYTHON" -m pip show torch-sparse >/dev/null 2>&1; then
    say "uninstalling the torch-sparse package (only its ops are used)"
    "$PYTHON" -m pip uninstall -y torch-sparse
fi

ops_loadable || die "the ops in $OPS_DIR do not load"
AFTER="$("$PYTHON" -c 'import torch; print(torch.__version__.split("+")[0])')"
[[ "$AFTER" == "$TORCH_VERSION" ]] || die "torch changed from $TORCH_VERSION to $AFTER"
say "done: torch_geometric installed, torch-sparse ops in $OPS_DIR, torch $AFTER unchanged"
