"""Build script: maps the import names onto the top-level folders and builds the native ops.

`graphtier.service` lives in `service/`, `graphtier.launcher` in `launcher/`, and the
generated gRPC contract `graphtier.v1` next to its `.proto` files in `proto/graphtier/v1/`.
The C++ ops in `native/` are compiled through torch's extension machinery into
`graphtier.service._native`; every op has a pure-torch fallback, so an install without a
compiler still works (slower), and the fallback is what the native results are tested against.
Where torch has CUDA and nvcc is found, the GPU ops in `native/cuda/` are built too, into
`graphtier.service._native_cuda` (the GPU gather has the CPU gather as its reference).
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


# The runtime requirements but torch (`_torch_requirement`); pyproject.toml declares them dynamic.
DEPENDENCIES = [
    "numpy>=1.24",
    "scipy>=1.10",  # Planetoid / npz sources ship scipy.sparse matrices
    "pydantic>=2.5",  # manifests, placement plans, configs: validated at the trust boundary
    "typer>=0.12",  # the graphtier CLI
    "rich>=13",  # progress display and tables
    "matplotlib>=3.7",  # the tiering report's cumulative-access PNG
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
    # NVML: the only supported way to read the GPUs' PCIe/NVLink byte counters and device facts
    # without initialising CUDA; pure Python, loads libnvidia-ml lazily, installs anywhere.
    "nvidia-ml-py>=12",
    "cryptography>=42",  # the daemon's self-signed TLS certificate for its TCP listener (X.509 + ECDSA)
    # NVIDIA's runtime/driver bindings: IPC handles, host registration, PCI ids (GPU tiers);
    # loads the driver lazily, installs on CPU machines.
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


def _cuda_extension(cpp_extension):
    """The GPU ops (`native/cuda/`), built only where torch has CUDA and nvcc is found."""
    import torch

    if torch.version.cuda is None or cpp_extension.CUDA_HOME is None:
        return None
    # Hopper by default (the machines this targets); TORCH_CUDA_ARCH_LIST overrides it.
    os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")
    return cpp_extension.CUDAExtension(
        name="graphtier.service._native_cuda",
        sources=sorted(glob.glob("native/cuda/*.cu")) + sorted(glob.glob("native/cuda/*.cpp")),
        include_dirs=[os.path.abspath("native/include")],
        extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "-Xptxas=-v"]},
    )


def _cached_build_ext(cpp_extension):
    """torch's BuildExtension compiling into `build/native/<python>-torch<version>/`, which outlives
    the install: pip builds an editable or regular install in a fresh temporary directory, so every
    reinstall recompiled all the ops (76-159 s on 2 cores); here ninja finds the objects of unchanged
    sources up to date (it tracks each object's headers and command line) and only relinks. A torch
    or Python upgrade gets its own directory, so objects are never mixed across ABIs."""
    import torch

    base = cpp_extension.BuildExtension.with_options(use_ninja=True)

    class CachedBuildExtension(base):
        def finalize_options(self) -> None:
            super().finalize_options()
            key = f"{sys.implementation.cache_tag}-torch{torch.__version__}"
            self.build_temp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build", "native", key)

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
        extra_compile_args=["-O3", "-fopenmp"],
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
    install_requires=[_torch_requirement(bool(ext_modules)), *DEPENDENCIES],
)
