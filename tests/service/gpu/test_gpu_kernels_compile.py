"""The GPU ops compile wherever nvcc is (no GPU needed): every .cu with nvcc and the bindings with the
host compiler, as setup.py builds them against this torch, and no kernel spills registers."""

from __future__ import annotations

import subprocess

import pytest
from cuda_compile import (
    CUDA_SOURCES,
    REPO,
    CompileReport,
    SourceResult,
    compile_sources,
    find_nvcc,
    parse_ptxas,
    report_from_log,
    setup_compile_args,
)

NVCC = find_nvcc()
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH nor under /usr/local/cuda*/bin")

# ptxas -v of SPILLING_SOURCE with -maxrregcount=16 (CUDA 13.0, sm_90): one clean kernel, one spilling
PTXAS_REPORT = """\
ptxas warning : For profile sm_90 adjusting per thread register count of 16 to lower bound of 24
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'clean' for 'sm_90'
ptxas info    : Function properties for clean
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 0 barriers
ptxas info    : Compile time = 2.113 ms
ptxas info    : Compiling entry function 'spills' for 'sm_90'
ptxas info    : Function properties for spills
    576 bytes stack frame, 1316 bytes spill stores, 1396 bytes spill loads
ptxas info    : Used 24 registers, used 0 barriers, 576 bytes cumulative stack size
"""
SPILLING_SOURCE = r"""
extern "C" __global__ void clean(const float* in, float* out) { out[threadIdx.x] = in[threadIdx.x] * 2.f; }
extern "C" __global__ void spills(const float* in, float* out, int n) {
  float acc[48];
#pragma unroll
  for (int k = 0; k < 48; ++k) acc[k] = in[threadIdx.x + k * n];
#pragma unroll
  for (int r = 0; r < 8; ++r)
#pragma unroll
    for (int k = 0; k < 48; ++k) acc[k] = acc[k] * acc[(k + r + 1) % 48] + 1.0f;
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 48; ++k) s += acc[k];
  out[threadIdx.x] = s;
}
"""


def test_there_are_kernels_and_bindings_to_compile():
    assert sorted(CUDA_SOURCES.glob("*.cu")), "native/cuda holds no .cu file"
    assert (CUDA_SOURCES / "bindings.cpp").is_file()


def test_the_flags_are_setup_pys():
    args = setup_compile_args()
    assert "-Xptxas=-v" in args["nvcc"] and "-O3" in args["nvcc"] and "-O3" in args["cxx"]


def test_ptxas_report_is_read_per_kernel():
    clean, spills = parse_ptxas(PTXAS_REPORT)
    assert (clean.name, clean.arch, clean.registers, clean.stack_bytes, clean.spills) == (
        "clean",
        "sm_90",
        10,
        0,
        False,
    )
    assert (spills.name, spills.registers, spills.stack_bytes) == ("spills", 24, 576)
    assert (spills.spill_store_bytes, spills.spill_load_bytes, spills.spills) == (1316, 1396, True)


def test_one_spilling_kernel_fails_the_report_even_beside_a_clean_one():
    source = SourceResult("native/cuda/example.cu", [], 0, 0.0, PTXAS_REPORT, kernels=parse_ptxas(PTXAS_REPORT))
    assert CompileReport("sm_90", "nvcc", "torch", [source]).failures() == [
        "spills (sm_90) spills: 1316 bytes stored, 1396 loaded"
    ]
    quiet = SourceResult("native/cuda/quiet.cu", [], 0, 0.0, "")  # no -Xptxas=-v output: nothing was checked
    assert CompileReport("sm_90", "nvcc", "torch", [quiet]).failures() == [
        "native/cuda/quiet.cu: ptxas reported no kernel"
    ]


def test_a_build_log_is_read_for_the_ptxas_report_without_compiling(tmp_path, capsys):
    """gpu_check.sh reads the registers and spills from the build's own log (nothing compiled twice)."""
    import json

    log = tmp_path / "build.log"
    log.write_text("  [1/3] nvcc -c native/cuda/x.cu\n" + PTXAS_REPORT + "  [2/3] c++ -c native/cuda/bindings.cpp\n")
    assert report_from_log(log, tmp_path / "k.json") == 1  # `spills` spills
    said = capsys.readouterr().out
    assert "24 registers, stack 576 B, spill stores 1316 B" in said and "FAIL spills (sm_90) spills" in said
    assert [k["name"] for k in json.loads((tmp_path / "k.json").read_text())["kernels"]] == ["clean", "spills"]
    log.write_text("no GPU ops were built\n")
    assert report_from_log(log, None) == 1 and "no ptxas report in" in capsys.readouterr().out


@needs_nvcc
def test_nvcc_reports_a_spilling_kernel_that_the_parser_catches(tmp_path):
    source = tmp_path / "spill.cu"
    source.write_text(SPILLING_SOURCE)
    done = subprocess.run(
        [
            NVCC,
            "-O3",
            "-Xptxas=-v",
            "-maxrregcount=16",
            "-gencode=arch=compute_90,code=sm_90",
            "-c",
            str(source),
            "-o",
            str(tmp_path / "spill.o"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    by_name = {k.name: k for k in parse_ptxas(done.stdout + done.stderr)}
    assert set(by_name) == {"clean", "spills"}
    assert by_name["spills"].spills and not by_name["clean"].spills


@needs_nvcc
@pytest.mark.long  # 3 s or more on 2 cores: CI's second step
def test_every_cuda_source_compiles_for_hopper_and_no_kernel_spills(tmp_path):
    report = compile_sources(tmp_path, "sm_90", NVCC)
    compiled = {s.source: s for s in report.sources}
    assert set(compiled) == {
        str(p.relative_to(REPO)) for p in [*CUDA_SOURCES.glob("*.cu"), *CUDA_SOURCES.glob("*.cpp")]
    }
    for source in compiled.values():
        assert source.returncode == 0, f"{source.source}:\n{source.output[-4000:]}"
        assert (tmp_path / f"{source.source.rsplit('/', 1)[-1]}.o").stat().st_size > 0
    assert report.failures() == [], "\n".join(report.failures())
    for source in ("native/cuda/tiered_gather.cu", "native/cuda/neighbor_sampler.cu"):
        kernels = compiled[source].kernels
        assert kernels and all(k.arch == "sm_90" and k.registers for k in kernels), source
