"""A stand-in for NVIDIA's `nvidia-cuda-mps-control`, for the managed-MPS lifecycle test only.

`-d` starts a "control daemon" in its own session: it makes the FIFO `control` and the pid file
in $CUDA_MPS_PIPE_DIRECTORY, writes a line to $CUDA_MPS_LOG_DIRECTORY/control.log, and serves
commands written to the FIFO until `quit` (then removes both and exits); the `-d` call returns
once the FIFO exists. Without `-d` it forwards its stdin's commands to the FIFO, as the real
client does. It runs no GPU work: it lets the test exercise start, namespaced directories, stop
and recovery on a machine without the NVIDIA driver.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

PIPE = Path(os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps"))
LOG = Path(os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps"))
FIFO, PID_FILE = PIPE / "control", PIPE / "nvidia-cuda-mps-control.pid"


def serve() -> None:
    os.mkfifo(FIFO, 0o600)
    PID_FILE.write_text(f"{os.getpid()}\n")
    with open(LOG / "control.log", "a") as log:
        log.write(f"control daemon {os.getpid()} started, pipe {PIPE}\n")
    while True:
        with open(FIFO) as commands:  # blocks until a client writes
            for line in commands:
                if line.strip() == "quit":
                    FIFO.unlink()
                    PID_FILE.unlink()
                    return


def main() -> int:
    if sys.argv[1:] == ["-d"]:
        if os.fork() == 0:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            try:
                serve()
            finally:
                os._exit(0)
        deadline = time.monotonic() + 10
        while not FIFO.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        return 0 if FIFO.exists() else 1
    commands = sys.stdin.read()
    with open(FIFO, "w") as fifo:
        fifo.write(commands)
    return 0


if __name__ == "__main__":
    sys.exit(main())
