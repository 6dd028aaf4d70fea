"""Build script: maps the import names onto the top-level folders and builds the native ops.

`graphtier.service` lives in `service/`, `graphtier.launcher` in `launcher/`, and the
generated gRPC contract `graphtier.v1` next to its `.proto` files in `proto/graphtier/v1/`.
The C++ ops in `native/` are compiled through torch's extension machinery into
`graphtier.service._native`; every op has a pure-torch fallback, so an install without a
compiler still works (slower), and the fallback is what the native results are tested against.
Where torch has CUDA and nvcc is found, the GPU ops in `native/cuda/` are built too, into
`graphtier.service._native_cuda` (the GPU gather has the CPU gather as its reference), unless that
nvcc's CUDA major version is not torch's: torch refuses such a build, so the GPU ops are then
skipped with one line saying why and the CPU ops still build. The extensions compile at once,
each in its own ninja folder; cuda-bindings is pinned to torch's CUDA major version.
The package `graphtier` itself (`graphtier/`: `__version__`, `python -m graphtier`) holds no code.

The ops link against torch's C++ ABI, which changes between torch minor releases: a wheel with
ops built against torch 2.13 declares `torch>=2.13.0,<2.14` (`_torch_requirement`), so pip never
pairs it with a torch whose ABI its ops do not match. A build without the ops
(GRAPHTIER_NO_NATIVE=1) runs on the pure-torch fallbacks and accepts any torch >= 2.4.
"""

from __future__ import annotations

import glob
import os
import re
import sys

from setuptools import find_packages, setup


def _packages() -> tuple[list[str], dict[str, str]]:
    packages: list[str] = []
    package_dir: dict[str, str] = {}
    for import_name, folder in (
        ("graphtier", "graphtier"),
        ("graphtier.service", "service"),
        ("graphtier.launcher", "launcher"),
        ("graphtier.contract", "contract"),
        ("graphtier.v1", "proto/graphtier/v1"),
    ):
        package_dir[import_name] = folder
        packages.append(import_name)
        packages += [f"{import_name}.{sub}" for sub in find_packages(folder)]
    return packages, package_dir


# The runtime requirements but torch (`_torch_requirement`) and the GPU tiers' (GPU_DEPENDENCIES, below);
# pyproject.toml declares them dynamic. What only some uses need is an extra there instead: the tiering
# report's figure (`plots`: matplotlib), PyG interop (`pyg`); the sparse matrices of Planetoid and npz
# files are read with numpy (service/sources/csr.py), so scipy is no requirement.
DEPENDENCIES = [
    "numpy>=1.24",
    "pydantic>=2.5",  # manifests, placement plans, configs: validated at the trust boundary
    "typer>=0.12",  # the graphtier CLI
    "rich>=13",  # progress display and tables
    "psutil>=5.9",  # peak-memory reporting and process liveness
    "blake3>=0.4",  # the checksum the daemon verifies while loading: a quarter of sha256's CPU per byte
    "xxhash>=3",  # per-row checksums of the storage tier, checked on every read: about 3 GB/s in one call per row
    "grpcio>=1.85.1",  # the daemon's API (Unix socket and TCP)
    "grpcio-health-checking>=1.85.1",  # the standard grpc.health.v1 service, not a home-made ping
    "grpcio-reflection>=1.85.1",  # so grpcurl and friends can discover the API
    "protobuf>=7.35.1",  # the generated code checks its runtime at import
    "fastapi>=0.110",  # the status endpoint (/healthz, /v1/status, /metrics, dashboard)
    "uvicorn>=0.29",
    "prometheus-client>=0.20",  # /metrics in the Prometheus exposition format
    "pyyaml>=6",  # YAML job specs
    "tensorboard>=2.20",  # a job's curves as TensorBoard events (torch.utils.tensorboard); works with protobuf 7
    "cryptography>=42",  # the daemon's self-signed TLS certificate for its TCP listener (X.509 + ECDSA)
]
# What only the GPU tiers use; a pip install takes them everywhere (they load the driver lazily and
# install on CPU machines), the CPU container image leaves them out (deploy/container/requirements.py):
# without them the GPU tiers and the PCIe counters say so and the rest runs.
GPU_DEPENDENCIES = [
    # NVML: the only supported way to read the GPUs' PCIe/NVLink byte counters and device facts
    # without initialising CUDA; pure Python, loads libnvidia-ml lazily, installs anywhere.
    "nvidia-ml-py>=12",
    # NVIDIA's runtime/driver bindings: IPC handles, host registration, PCI ids (GPU tiers); load the
    # driver lazily, install on CPU machines. An install pins them to its torch's CUDA major version
    # (`cuda_bindings_requirement`).
    "cuda-bindings>=12.8",
]


def _torch_requirement(with_ops: bool) -> str:
    """The torch a build's ops can load under: the release they were compiled against, any patch
    level of it (patch releases keep the C++ ABI); without ops, any torch the fallbacks run on."""
    if not with_ops:
        return "torch>=2.4"
    import torch

    found = re.match(r"(\d+)\.(\d+)\.(\d+)", torch.__version__)
    if found is None:
        raise RuntimeError(f"setup.py: cannot read a release from torch.__version__ {torch.__version__!r}")
    major, minor, patch = (int(part) for part in found.groups())
    return f"torch>={major}.{minor}.{patch},<{major}.{minor + 1}"


def cuda_bindings_requirement(torch_cuda: str | None) -> str:
    """cuda-bindings for a torch built for CUDA `torch_cuda` ("13.0"; None: a CPU torch, or none known).
    A cuda-bindings release links its CUDA major's runtime statically: 13.x on a CUDA 12 driver fails
    every call (cudaErrorInsufficientDriver), so it is pinned to torch's CUDA major, which the driver
    already runs."""
    if not torch_cuda:
        return "cuda-bindings>=12.8"
    major = int(torch_cuda.split(".")[0])
    return f"cuda-bindings>={'12.8' if major == 12 else major},<{major + 1}"


def _cuda_bindings_requirement(with_ops: bool) -> str:
    if not with_ops:
        return cuda_bindings_requirement(None)
    import torch

    return cuda_bindings_requirement(torch.version.cuda)


def nvcc_release(cuda_home: str) -> str | None:
    """The CUDA release of `cuda_home`'s nvcc ("13.0"), None when it cannot be run or read."""
    import subprocess

    try:
        text = subprocess.run(
            [os.path.join(cuda_home, "bin", "nvcc"), "--version"], capture_output=True, text=True, check=False
        ).stdout
    except OSError:
        return None
    found = re.search(r"release (\d+\.\d+)", text)
    return found.group(1) if found else None


def cuda_toolkit_mismatch(torch_cuda: str, nvcc: str | None, cuda_home: str) -> str | None:
    """Why the GPU ops cannot be built with the toolkit at `cuda_home`, or None: torch refuses to build
    an extension whose nvcc has another CUDA major version than its own (and that error would fail the
    whole install, CPU ops included)."""
    if nvcc is None:
        return f"nvcc under {cuda_home} cannot be run or read: the GPU ops are not built; the CPU ops are"
    if nvcc.split(".")[0] != torch_cuda.split(".")[0]:
        return (
            f"torch is built for CUDA {torch_cuda} but the nvcc under {cuda_home} is CUDA {nvcc}: the GPU ops "
            f"are not built (set CUDA_HOME to a CUDA {torch_cuda.split('.')[0]}.x toolkit); the CPU ops are"
        )
    return None


def _cuda_extension(cpp_extension):
    """The GPU ops (`native/cuda/`), built only where torch has CUDA and an nvcc of its CUDA major."""
    import torch

    if torch.version.cuda is None or cpp_extension.CUDA_HOME is None:
        return None
    why_not = cuda_toolkit_mismatch(torch.version.cuda, nvcc_release(cpp_extension.CUDA_HOME), cpp_extension.CUDA_HOME)
    if why_not is not None:
        print(f"setup.py: {why_not}", file=sys.stderr, flush=True)
        return None
    # Hopper by default (the machines this targets); TORCH_CUDA_ARCH_LIST overrides it.
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    return cpp_extension.CUDAExtension(
        name="graphtier.service._native_cuda",
        sources=sorted(glob.glob("native/cuda/*.cu")) + sorted(glob.glob("native/cuda/*.cpp")),
        include_dirs=[os.path.abspath("native/include")],
        extra_compile_args={"cxx": ["-O3", "-g0"], "nvcc": ["-O3", "-Xptxas=-v"]},
    )


class CompileProgress:
    """One line per compiled file while the ops build, so an install shows it is working: ninja
    runs silently under torch's BuildExtension, and pip shows a build's output only with -v
    (without it, each line still turns pip's spinner). A file counts as compiled once its object
    is newer than the build's start; objects ninja found up to date are counted at the end."""

    def __init__(self, name: str, sources: list[str], objects: list[str]) -> None:
        import threading

        self._name, self._pairs = name, list(zip(sources, objects, strict=True))
        self._reported: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._start = 0.0

    def __enter__(self):  # no annotation: tests exec this class alone, where its name is not yet bound
        import time

        self._start = time.time()
        _say(
            f"compiling {len(self._pairs)} C++ file{'s' if len(self._pairs) != 1 else ''} into {self._name} "
            "(GRAPHTIER_NO_NATIVE=1 skips this: the pure-torch fallbacks run instead)"
        )
        self._thread.start()
        return self

    def _poll(self) -> None:
        for source, obj in self._pairs:
            if obj in self._reported:
                continue
            try:
                fresh = os.stat(obj).st_mtime >= self._start
            except OSError:
                continue
            if fresh:
                self._reported.add(obj)
                _say(f"  [{len(self._reported)}/{len(self._pairs)}] {os.path.relpath(source)}")

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            self._poll()

    def __exit__(self, kind, value, traceback) -> None:
        import time

        self._stop.set()
        self._thread.join()
        if kind is not None:
            return
        self._poll()
        cached = len(self._pairs) - len(self._reported)
        note = f" ({cached} up to date)" if cached else ""
        _say(f"compiled {self._name} in {time.time() - self._start:.0f} s{note}")


def _say(line: str) -> None:
    print(f"setup.py: {line}", flush=True)


def _cached_build_ext(cpp_extension):
    """torch's BuildExtension compiling into `build/native/<python>-torch<version>/`, which outlives
    the install: pip builds an editable or regular install in a fresh temporary directory, so every
    reinstall recompiled all the ops (76-159 s on 2 cores); here ninja finds the objects of unchanged
    sources up to date (it tracks each object's headers and command line) and only relinks. A torch
    or Python upgrade gets its own directory, so objects are never mixed across ABIs."""
    import threading

    import torch
    from setuptools.command.build_ext import build_ext

    base = cpp_extension.BuildExtension.with_options(use_ninja=True)

    class OwnNinjaFolders(build_ext):
        """Below torch's BuildExtension, which swaps in its ninja compile and then calls this: each
        extension after the first compiles in a folder of its own under build_temp (the first keeps
        build_temp, and so its cached objects), so no two share a build.ninja and the extensions
        build at once (GRAPHTIER_BUILD_PARALLEL, default all: the CPU and GPU ops together)."""

        _building = threading.local()  # the folder of the extension this thread builds

        def build_extensions(self) -> None:
            ninja_compile = self.compiler.compile

            def compile_in_own_folder(sources, output_dir=None, **kwargs):
                folder = os.path.join(output_dir or self.build_temp, getattr(self._building, "folder", ""))
                objects = self.compiler.object_filenames(sources, output_dir=folder)
                with CompileProgress(getattr(self._building, "name", "native ops"), sources, objects):
                    return ninja_compile(sources, folder, **kwargs)

            self.compiler.compile = compile_in_own_folder
            super().build_extensions()

        def build_extension(self, ext) -> None:
            first = ext is self.extensions[0]
            self._building.folder = "" if first else ext.name.rsplit(".", 1)[-1]
            self._building.name = ext.name
            super().build_extension(ext)

    class CachedBuildExtension(base, OwnNinjaFolders):
        def finalize_options(self) -> None:
            super().finalize_options()
            key = f"{sys.implementation.cache_tag}-torch{torch.__version__}"
            self.build_temp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build", "native", key)
            if not self.parallel:
                self.parallel = int(os.environ.get("GRAPHTIER_BUILD_PARALLEL", max(len(self.extensions or ()), 1)))

    return CachedBuildExtension


def _extensions():
    if os.environ.get("GRAPHTIER_NO_NATIVE") == "1":
        return [], {}
    from torch.utils import cpp_extension

    sources = sorted(glob.glob("native/cpu/*.cpp"))
    ext = cpp_extension.CppExtension(
        name="graphtier.service._native",
        sources=sources,
        include_dirs=[os.path.abspath("native/include")],
        # No -std here: torch picks the standard its own headers were built with (C++20 for
        # torch >= 2.10); forcing C++17 over it crashed the ops' error path under torch 2.11.
        # -g0: Python's build flags ask for debug info, which doubled the compile time of every file
        # (torch's headers are mostly templates) and changes no instruction of the ops.
        extra_compile_args=["-O3", "-g0", "-fopenmp"],
        extra_link_args=["-fopenmp"],
    )
    cuda_ext = _cuda_extension(cpp_extension)
    extensions = [ext] if cuda_ext is None else [ext, cuda_ext]
    return extensions, {"build_ext": _cached_build_ext(cpp_extension)}


packages, package_dir = _packages()
ext_modules, cmdclass = _extensions()
setup(
    packages=packages,
    package_dir=package_dir,
    ext_modules=ext_modules,
    cmdclass=cmdclass,
    install_requires=[
        _torch_requirement(bool(ext_modules)),
        *(
            _cuda_bindings_requirement(bool(ext_modules)) if requirement.startswith("cuda-bindings") else requirement
            for requirement in DEPENDENCIES + GPU_DEPENDENCIES
        ),
    ],
)
