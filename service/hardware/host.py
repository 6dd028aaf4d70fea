"""Host-side checks read from the file system: transparent huge pages, /dev/shm, the MPS daemon.

No NVML, no CUDA: each check reads what the kernel and the environment expose.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from graphtier.contract.machine import CheckResult

THP_DIR = Path("/sys/kernel/mm/transparent_hugepage")
SHM_DIR = Path("/dev/shm")
MPS_DEFAULT_PIPE_DIR = "/tmp/nvidia-mps"
MPS_CONTROL = "nvidia-cuda-mps-control"
_SHMEM_HUGE = ("always", "within_size", "advise", "force")


def _selected(text: str) -> str:
    """'always [madvise] never' -> 'madvise'; a file without brackets is returned as it is."""
    for word in text.split():
        if word.startswith("[") and word.endswith("]"):
            return word[1:-1]
    return text.strip()


def check_transparent_hugepages(directory: Path = THP_DIR) -> CheckResult:
    """THP for anonymous memory (`enabled`) and for shmem (`shmem_enabled`, which /dev/shm tiers use)."""
    values: dict[str, str] = {}
    for name in ("enabled", "shmem_enabled"):
        try:
            values[name] = _selected((directory / name).read_text())
        except OSError as exc:
            return CheckResult(
                name="transparent_hugepages",
                status="unavailable",
                details=values,
                reason=f"cannot read {directory / name} ({exc.strerror or exc}): no transparent huge pages",
            )
    shown = f"enabled={values['enabled']}, shmem_enabled={values['shmem_enabled']}"
    if values["shmem_enabled"] in _SHMEM_HUGE:
        return CheckResult(
            name="transparent_hugepages",
            status="ok",
            details=values,
            reason=f"{shown}: /dev/shm tiers can be backed by huge pages",
        )
    return CheckResult(
        name="transparent_hugepages",
        status="unavailable",
        details=values,
        reason=f"{shown}: /dev/shm tiers get 4 KiB pages (host registration takes longer); "
        "set shmem_enabled to advise for huge pages",
    )


def check_dev_shm(directory: Path = SHM_DIR) -> CheckResult:
    """Size and free space of the shared-memory file system the tiers live in."""
    try:
        st = os.statvfs(directory)
    except FileNotFoundError:
        return CheckResult(name="dev_shm", status="unavailable", reason=f"{directory} does not exist")
    except OSError as exc:
        return CheckResult(name="dev_shm", status="failed", reason=f"statvfs({directory}): {exc.strerror or exc}")
    total, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    details = {"path": str(directory), "total_bytes": total, "free_bytes": free}
    if total == 0:
        return CheckResult(name="dev_shm", status="unavailable", details=details, reason=f"{directory} has size 0")
    return CheckResult(
        name="dev_shm",
        status="ok",
        details=details,
        reason=f"{directory}: {_gib(total)} total, {_gib(free)} free ({100 * free / total:.0f}%)",
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_mps(environ: dict[str, str] | None = None) -> CheckResult:
    """Whether an MPS control daemon is reachable: its `control` pipe exists in the pipe directory."""
    env = os.environ if environ is None else environ
    pipe_dir = Path(env.get("CUDA_MPS_PIPE_DIRECTORY") or MPS_DEFAULT_PIPE_DIR)
    control = pipe_dir / "control"
    client = shutil.which(MPS_CONTROL, path=env.get("PATH"))
    details = {"pipe_directory": str(pipe_dir), "control": str(control), "mps_control_binary": client}
    on_path = f"{MPS_CONTROL} is {'at ' + client if client else 'not on PATH'}"
    try:
        mode = os.stat(control).st_mode
    except OSError:
        return CheckResult(
            name="mps",
            status="unavailable",
            details=details,
            reason=f"no MPS control daemon: {control} does not exist; {on_path}",
        )
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return CheckResult(
            name="mps",
            status="failed",
            details=details,
            reason=f"{control} exists but is not a pipe or socket; {on_path}",
        )
    if not os.access(control, os.W_OK):
        return CheckResult(
            name="mps",
            status="unavailable",
            details=details,
            reason=f"MPS control pipe {control} is not writable by this user; {on_path}",
        )
    return CheckResult(
        name="mps", status="ok", details=details, reason=f"MPS control daemon reachable at {control}; {on_path}"
    )
