"""Compile the GPU ops in native/cuda as setup.py's CUDAExtension does, and read ptxas's `-v`
report per kernel (registers, stack frame, spill stores and loads). No GPU is needed, only nvcc.

The .cu files go through nvcc and the bindings (.cpp) through the host compiler, each with the
flags setup.py gives that extension (read from setup.py itself) plus the ones torch's
BuildExtension adds (torch's include directories, the extension's name, C++20, -fPIC, its nvcc
flags), against the torch this Python imports. Used by test_gpu_kernels_compile.py and by
tests/bench/gpu_check.sh:

    python3 tests/service/gpu/cuda_compile.py [--arch sm_90] [--out DIR] [--json FILE]
    python3 tests/service/gpu/cuda_compile.py --from-log build.log [--json FILE]

prints each source's result and one line per kernel; exits 1 when a source does not compile or
any kernel spills, 2 when no nvcc is found. `--from-log` compiles nothing: it reads the ptxas
report that a build (`pip install -v`, whose nvcc runs with -Xptxas=-v) left in its log, so a
machine that has just built the ops does not compile them again to see their registers.
"""

from __future__ import annotations

import argparse
import ast
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
CUDA_SOURCES = REPO / "native" / "cuda"
EXTENSION_NAME = "_native_cuda"  # the last part of graphtier.service._native_cuda, as torch defines it
DEFAULT_ARCH = "sm_90"  # setup.py's default TORCH_CUDA_ARCH_LIST (9.0)
# c10/cuda/CUDAMacros.h includes this generated header unless C10_CUDA_NO_CMAKE_CONFIGURE_FILE is
# defined. torch's CPU wheels ship every other c10/cuda header but not this one; all it defines is
# C10_CUDA_BUILD_SHARED_LIBS, which only Windows builds read, so on Linux skipping it compiles the
# same code.
CMAKE_MACROS_HEADER = Path("c10") / "cuda" / "impl" / "cuda_cmake_macros.h"


@dataclass(frozen=True)
class KernelUsage:
    """One function's resources as ptxas reported them for one architecture."""

    name: str  # mangled, as ptxas prints it
    arch: str
    registers: int | None
    stack_bytes: int
    spill_store_bytes: int
    spill_load_bytes: int

    @property
    def spills(self) -> bool:
        return self.spill_store_bytes > 0 or self.spill_load_bytes > 0


_ENTRY = re.compile(r"Compiling entry function '(?P<name>[^']+)' for '(?P<arch>\w+)'")
_PROPERTIES = re.compile(r"Function properties for (?P<name>\S+)")
_FRAME = re.compile(
    r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, "
    r"(?P<loads>\d+) bytes spill loads"
)
_REGISTERS = re.compile(r"Used (?P<registers>\d+) registers")


def parse_ptxas(text: str) -> list[KernelUsage]:
    """Every function of ptxas's `-v` report, in order: a kernel's registers come from the `Used N
    registers` line after its `Compiling entry function` line; each function's stack and spills
    from the line after its `Function properties for` line."""
    frames: dict[tuple[str, str], tuple[int, int, int]] = {}
    registers: dict[tuple[str, str], int] = {}
    order: list[tuple[str, str]] = []
    entry: tuple[str, str] | None = None
    arch = ""
    properties: str | None = None
    for line in text.splitlines():
        if m := _ENTRY.search(line):
            arch = m["arch"]
            entry = (m["name"], arch)
            properties = None
        elif m := _PROPERTIES.search(line):
            properties = m["name"]
        elif (m := _FRAME.search(line)) and properties is not None:
            key = (properties, arch)
            frames[key] = (int(m["stack"]), int(m["stores"]), int(m["loads"]))
            order.append(key)
            properties = None
        elif (m := _REGISTERS.search(line)) and entry is not None:
            registers[entry] = int(m["registers"])
            entry = None
    return [
        KernelUsage(name, arch_, registers.get((name, arch_)), *frames[(name, arch_)])
        for name, arch_ in dict.fromkeys(order)
    ]


def demangle(names: list[str]) -> dict[str, str]:
    """Readable C++ names by c++filt where it is installed (else the names as given)."""
    if not names or shutil.which("c++filt") is None:
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True, check=False).stdout
    readable = out.splitlines()
    return dict(zip(names, readable, strict=True)) if len(readable) == len(names) else {n: n for n in names}


def find_nvcc() -> str | None:
    """nvcc on PATH, else the newest /usr/local/cuda*/bin/nvcc; None when there is none."""
    found = shutil.which("nvcc")
    if found:
        return found
    candidates = sorted(glob.glob("/usr/local/cuda/bin/nvcc")) or sorted(glob.glob("/usr/local/cuda*/bin/nvcc"))
    return candidates[-1] if candidates else None


def setup_compile_args() -> dict[str, list[str]]:
    """`extra_compile_args` of setup.py's CUDAExtension, read from its source (one definition)."""
    tree = ast.parse((REPO / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "CUDAExtension":
            for keyword in node.keywords:
                if keyword.arg == "extra_compile_args":
                    return ast.literal_eval(keyword.value)
    raise LookupError("setup.py has no CUDAExtension(..., extra_compile_args=...)")


@dataclass
class SourceResult:
    """One source compiled to an object file."""

    source: str  # relative to the repository
    command: list[str]
    returncode: int
    seconds: float
    output: str
    notes: list[str] = field(default_factory=list)
    kernels: list[KernelUsage] = field(default_factory=list)


@dataclass
class CompileReport:
    arch: str
    nvcc: str
    torch: str
    sources: list[SourceResult]

    @property
    def kernels(self) -> list[KernelUsage]:
        return [k for s in self.sources for k in s.kernels]

    def failures(self) -> list[str]:
        """Why the GPU ops are not clean: sources that failed, kernels that spill, .cu without kernels."""
        problems = [f"{s.source} does not compile (exit {s.returncode})" for s in self.sources if s.returncode]
        problems += [
            f"{s.source}: ptxas reported no kernel"
            for s in self.sources
            if s.source.endswith(".cu") and not s.returncode and not s.kernels
        ]
        problems += [
            f"{k.name} ({k.arch}) spills: {k.spill_store_bytes} bytes stored, {k.spill_load_bytes} loaded"
            for k in self.kernels
            if k.spills
        ]
        return problems


def cuda_include(nvcc: str) -> Path:
    """The CUDA toolkit's include directory (cuda_runtime.h): $CUDA_HOME's, nvcc's, or /usr/local/cuda's."""
    homes = [
        os.environ.get("CUDA_HOME"),
        os.environ.get("CUDA_PATH"),
        Path(nvcc).resolve().parents[1],
        "/usr/local/cuda",
    ]
    for home in homes:
        if home and (Path(home) / "include" / "cuda_runtime.h").exists():
            return Path(home) / "include"
    raise FileNotFoundError(f"no include/cuda_runtime.h under {[str(h) for h in homes if h]} (set CUDA_HOME)")


def _common_flags(nvcc: str) -> tuple[list[str], list[str]]:
    """(flags both compilers get, notes): include directories and defines, as BuildExtension sets them."""
    from torch.utils import cpp_extension

    includes = [
        str(REPO / "native" / "include"),
        *cpp_extension.include_paths(),
        str(cuda_include(nvcc)),
        sysconfig.get_paths()["include"],
    ]
    flags = [f"-I{path}" for path in includes]
    flags += ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-DTORCH_EXTENSION_NAME={EXTENSION_NAME}"]
    notes = []
    torch_include = Path(cpp_extension.include_paths()[0])
    if not (torch_include / CMAKE_MACROS_HEADER).exists():
        flags.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")
        notes.append(
            f"{CMAKE_MACROS_HEADER} is not in this torch ({torch_include}: a CPU wheel); compiled with "
            "-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE, which skips it (it defines a Windows-only macro)"
        )
    return flags, notes


def compile_sources(out_dir: Path, arch: str = DEFAULT_ARCH, nvcc: str | None = None) -> CompileReport:
    """Compile every native/cuda/*.cu (nvcc) and *.cpp (host compiler) into `out_dir`."""
    import torch
    from torch.utils.cpp_extension import COMMON_NVCC_FLAGS

    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise FileNotFoundError("nvcc is not on PATH nor under /usr/local/cuda*/bin")
    if not re.fullmatch(r"sm_\d+a?", arch):
        raise ValueError(f"--arch {arch!r}: expected sm_<number>, e.g. sm_90")
    args = setup_compile_args()
    common, notes = _common_flags(nvcc)
    compute = arch.replace("sm_", "compute_")
    cxx = os.environ.get("CXX", "c++")
    out_dir.mkdir(parents=True, exist_ok=True)
    results = []
    sources = sorted(CUDA_SOURCES.glob("*.cu")) + sorted(CUDA_SOURCES.glob("*.cpp"))
    for source in sources:
        obj = out_dir / f"{source.name}.o"
        if source.suffix == ".cu":
            command = [
                nvcc,
                *common,
                *COMMON_NVCC_FLAGS,
                "--compiler-options",
                "-fPIC",
                *args["nvcc"],
                f"-gencode=arch={compute},code={arch}",
                "-std=c++20",
                "-c",
                str(source),
                "-o",
                str(obj),
            ]
        else:
            command = [cxx, *common, *args["cxx"], "-fPIC", "-std=c++20", "-c", str(source), "-o", str(obj)]
        t0 = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=REPO)
        output = done.stdout + done.stderr
        result = SourceResult(
            str(source.relative_to(REPO)),
            command,
            done.returncode,
            round(time.perf_counter() - t0, 2),
            output,
            list(notes),
        )
        if source.suffix == ".cu":
            result.kernels = parse_ptxas(output)
        results.append(result)
    return CompileReport(arch, nvcc, torch.__version__, results)


def report_from_log(log: Path, json_path: Path | None) -> int:
    """Every kernel of the ptxas report in a build's log; 1 when one spills or the log holds none."""
    kernels = parse_ptxas(log.read_text(errors="replace"))
    readable = demangle([k.name for k in kernels])
    for k in kernels:
        print(
            f"{k.arch} {k.registers if k.registers is not None else '-':>3} registers, stack {k.stack_bytes} B, "
            f"spill stores {k.spill_store_bytes} B, loads {k.spill_load_bytes} B  {readable.get(k.name, k.name)}"
        )
    problems = [f"{k.name} ({k.arch}) spills" for k in kernels if k.spills]
    if not kernels:
        problems.append(f"no ptxas report in {log} (were the GPU ops built, with -Xptxas=-v?)")
    for problem in problems:
        print(f"FAIL {problem}")
    if json_path:
        json_path.write_text(
            json.dumps({"log": str(log), "kernels": [asdict(k) for k in kernels], "failures": problems})
        )
    print(f"{len(kernels)} kernel(s), {sum(k.spills for k in kernels)} spilling (from {log.name})")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default=DEFAULT_ARCH, help=f"GPU architecture (default {DEFAULT_ARCH})")
    parser.add_argument("--out", type=Path, help="where the object files go (default: a temporary directory)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    parser.add_argument("--from-log", type=Path, help="read a build log's ptxas report instead of compiling")
    args = parser.parse_args(argv)
    if args.from_log:
        return report_from_log(args.from_log, args.json)
    nvcc = find_nvcc()
    if nvcc is None:
        print("cuda_compile: nvcc is not on PATH nor under /usr/local/cuda*/bin", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="graphtier-cuda-") as scratch:
        report = compile_sources(args.out or Path(scratch), args.arch, nvcc)
    readable = demangle([k.name for k in report.kernels])
    print(f"nvcc {nvcc}, torch {report.torch}, {report.arch}")
    for s in report.sources:
        print(f"{'ok  ' if s.returncode == 0 else 'FAIL'} {s.source} ({s.seconds} s)")
        for note in s.notes:
            print(f"     note: {note}")
        if s.returncode:
            print("\n".join(f"     {line}" for line in s.output.splitlines()[-30:]))
        for k in s.kernels:
            print(
                f"     {k.arch} {k.registers if k.registers is not None else '-':>3} registers, "
                f"stack {k.stack_bytes} B, spill stores {k.spill_store_bytes} B, loads {k.spill_load_bytes} B  "
                f"{readable.get(k.name, k.name)}"
            )
    problems = report.failures()
    for problem in problems:
        print(f"FAIL {problem}")
    if args.json:
        data = asdict(report)
        data["failures"] = problems
        args.json.write_text(json.dumps(data, indent=1))
    print(
        f"{len(report.kernels)} kernel(s), {sum(k.spills for k in report.kernels)} spilling; "
        f"{sum(1 for s in report.sources if s.returncode)} of {len(report.sources)} source(s) failed"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
