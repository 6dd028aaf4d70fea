"""setup.py's choices for the native build, on the CPU: cuda-bindings pinned to torch's CUDA major, the
GPU ops skipped with one line (CPU ops still built) when nvcc's CUDA major is not torch's, and the
extensions compiled at once, each in its own ninja folder. The functions are read from setup.py
itself (running it would build)."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def _setup_functions() -> dict:
    """setup.py's top-level functions, defined without running its setup() call."""
    tree = ast.parse((REPO / "setup.py").read_text())
    namespace: dict = {"__file__": str(REPO / "setup.py")}
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    functions = [node for node in tree.body if isinstance(node, ast.FunctionDef)]
    exec(compile(ast.Module([*imports, *functions], []), "setup.py", "exec"), namespace)
    return namespace


SETUP = _setup_functions()


@pytest.mark.parametrize(
    ("torch_cuda", "requirement"),
    [("13.0", "cuda-bindings>=13,<14"), ("12.8", "cuda-bindings>=12.8,<13"), (None, "cuda-bindings>=12.8")],
)
def test_cuda_bindings_are_pinned_to_torchs_cuda_major(torch_cuda, requirement):
    assert SETUP["cuda_bindings_requirement"](torch_cuda) == requirement


def test_a_toolkit_of_another_cuda_major_is_named_and_the_gpu_ops_skipped():
    mismatch = SETUP["cuda_toolkit_mismatch"]
    assert mismatch("13.0", "13.0", "/usr/local/cuda") is None
    assert mismatch("13.0", "13.2", "/usr/local/cuda") is None  # torch only warns within a major
    why = mismatch("12.8", "13.0", "/usr/local/cuda")
    assert why == (
        "torch is built for CUDA 12.8 but the nvcc under /usr/local/cuda is CUDA 13.0: the GPU ops are not built "
        "(set CUDA_HOME to a CUDA 12.x toolkit); the CPU ops are"
    )
    assert "cannot be run" in mismatch("13.0", None, "/nowhere")


def test_nvcc_release_reads_the_toolkit(tmp_path):
    assert SETUP["nvcc_release"](str(tmp_path)) is None  # no bin/nvcc there
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("no nvcc on PATH")
    text = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    assert SETUP["nvcc_release"](str(Path(nvcc).resolve().parents[1])) == re.search(r"release (\S+),", text).group(1)


def test_a_mismatched_nvcc_skips_the_cuda_extension_with_one_line(tmp_path, monkeypatch, capsys):
    fake = tmp_path / "bin" / "nvcc"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    fake.chmod(0o755)
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    assert SETUP["_cuda_extension"](SimpleNamespace(CUDA_HOME=str(tmp_path))) is None
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1 and said[0].startswith("setup.py: torch is built for CUDA 12.8 but the nvcc under")


@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_the_extensions_build_at_once_each_in_its_own_ninja_folder(tmp_path):
    """Two extensions through setup.py's build command: both compile before either finishes, in
    separate ninja folders (the first keeps build_temp itself, and so its cached objects)."""
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"{name}.cpp").write_text(
            "#include <Python.h>\n"
            f'static struct PyModuleDef m = {{PyModuleDef_HEAD_INIT, "{name}", nullptr, -1, nullptr}};\n'
            f"PyMODINIT_FUNC PyInit_{name}(void) {{ return PyModule_Create(&m); }}\n"
        )
    (tmp_path / "setup.py").write_text(
        textwrap.dedent(
            f"""
            import ast, os, sys, threading
            from setuptools import setup
            from torch.utils import cpp_extension
            tree = ast.parse(open({str(REPO / "setup.py")!r}).read())
            wanted = ("_cached_build_ext", "CompileProgress", "_say")
            nodes = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name in wanted]
            namespace = {{"os": os, "sys": sys, "__file__": os.path.abspath("setup.py")}}
            exec(compile(ast.Module(nodes, []), "setup.py", "exec"), namespace)

            class Logged(namespace["_cached_build_ext"](cpp_extension)):
                def build_extension(self, ext):
                    sys.stdout.write(f"start {{ext.name}}\\n"); sys.stdout.flush()
                    super().build_extension(ext)
                    sys.stdout.write(f"end {{ext.name}}\\n"); sys.stdout.flush()

            setup(
                name="twoext",
                version="0",
                ext_modules=[cpp_extension.CppExtension(f"{{n}}", [f"{{n}}/{{n}}.cpp"]) for n in ("first", "second")],
                cmdclass={{"build_ext": Logged}},
            )
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--build-lib", "out"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "MAX_JOBS": "1"},
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    # Two threads write these lines: they are read as events, whatever the interleaving.
    order = re.findall(r"\b(start|end) (first|second)\b", done.stdout)
    assert [event for event, _ in order[:2]] == ["start", "start"], order
    cache = next((tmp_path / "build" / "native").iterdir())
    assert (cache / "build.ninja").exists() and (cache / "second" / "build.ninja").exists()
    assert sorted(p.name.split(".")[0] for p in (tmp_path / "out").glob("*.so")) == ["first", "second"]
    # a line per compiled file while the build runs, so an install shows it is working
    for name in ("first", "second"):
        assert f"setup.py: compiling 1 C++ file into {name}" in done.stdout, done.stdout
        assert f"setup.py:   [1/1] {name}/{name}.cpp" in done.stdout, done.stdout
        assert f"setup.py: compiled {name} in " in done.stdout, done.stdout
