"""One torchrun rank.

`python -m graphtier.launcher.rank_main --job-id ID --runtime-dir DIR [--script FILE -- ARGS]`

(`--spec job.yaml` instead of --job-id: a rank another launcher started, e.g. a Kubeflow TrainJob's
torchrun; it attaches to its node's daemon first, see `attach.py`.)

The daemon's job manager launches this under torchrun. Without `--script` the rank trains the
job's built-in model through the public API (`graphtier.launcher.loader`: connect, then `fit`),
or, for an inference job (`from_job`), applies a trained job's model layer by layer
(`runtime/inference.py`).
With `--script` it runs the user's file as `__main__` (sys.argv = [FILE, *ARGS], the file's
folder first on sys.path, as `python FILE ARGS` would), and the script connects through the same
API. Either way every line the rank prints is prefixed `[rank N] ` and written whole (see
rank_output), and an exception that ends the rank is recorded in the job's directory so the job
fails with the exception's last line as its cause.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
import time
import traceback
from pathlib import Path
from types import TracebackType

from graphtier.contract.environment import JOB_ID_ENV, RUNTIME_DIR_ENV
from graphtier.contract.errors import GraphtierError
from graphtier.contract.jobs.directory import job_directory
from graphtier.contract.jobs.rank_failures import write_rank_failure
from graphtier.contract.processes import exit_without_teardown
from graphtier.launcher.runtime.attach import attach
from graphtier.launcher.runtime.channel_loader import env_rank
from graphtier.launcher.runtime.rank_output import install_rank_output


def run_builtin(job_id: str, runtime_dir: Path) -> None:
    """The job's built-in work: layer-wise inference of a trained job's model (`from_job`), or training."""
    from graphtier.launcher.client import DaemonClient

    with DaemonClient(runtime_dir=runtime_dir) as client:
        infers = client.get_job(job_id).spec.infers
    if infers:
        from graphtier.launcher.runtime.inference import run_inference

        run_inference(job_id, runtime_dir)
    else:
        train_builtin(job_id, runtime_dir)


def train_builtin(job_id: str, runtime_dir: Path) -> None:
    from graphtier.launcher import loader

    with loader.connect(job_id=job_id, runtime_dir=runtime_dir) as job:
        grant = job.channel.grant
        print(
            f"job {job_id}: channel {grant.layout.channel} (producer pid {grant.layout.producer_pid}), "
            f"{job.dataset.steps_per_epoch} steps/epoch x {job.spec.epochs} epochs",
            flush=True,
        )
        started = time.perf_counter()
        result = job.fit()
        print(
            f"finished {result.steps} steps in {time.perf_counter() - started:.1f} s; final {result.final_eval}",
            flush=True,
        )


def run_script(script: Path, args: list[str]) -> None:
    """Run `script` as `__main__` with `args`; its SystemExit(0) is success."""
    if not script.is_file():
        raise GraphtierError(f"{script}: the job's script is gone or not a file")
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        if exc.code not in (None, 0):
            raise


def _from_script(tb: TracebackType | None, script: Path | None) -> TracebackType | None:
    """The traceback from the script's first frame on (rank_main and runpy are noise to its author)."""
    here = tb
    while script is not None and here is not None:
        if here.tb_frame.f_code.co_filename == str(script):
            return here
        here = here.tb_next
    return tb


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m graphtier.launcher.rank_main", description=__doc__.split("\n")[0])
    parser.add_argument("--job-id", help="id of the job (from SubmitJob); or --spec")
    parser.add_argument("--runtime-dir", type=Path, help="the daemon's runtime directory (with --job-id)")
    parser.add_argument(
        "--spec",
        type=Path,
        help="a YAML job spec: this rank was started by another launcher (a "
        "Kubeflow TrainJob's torchrun) and attaches to its node's daemon",
    )
    parser.add_argument("--script", type=Path, help="the user's training script (absolute path)")
    parser.add_argument("script_args", nargs=argparse.REMAINDER, help="after --: the script's arguments")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.job_id is None) == (args.spec is None) or (args.job_id is not None and args.runtime_dir is None):
        parser.error("give --job-id and --runtime-dir (a job the daemon started), or --spec (attach to it)")
    rank = env_rank()
    install_rank_output(rank)
    if args.spec is not None:
        try:
            args.job_id, args.runtime_dir = attach(args.spec)
        except GraphtierError as exc:
            print(f"error: {exc}", file=sys.stderr, flush=True)
            return 2
    os.environ[JOB_ID_ENV], os.environ[RUNTIME_DIR_ENV] = args.job_id, str(args.runtime_dir)
    script_args = args.script_args[1:] if args.script_args[:1] == ["--"] else args.script_args
    try:
        if args.script is not None:
            run_script(args.script, script_args)
        else:
            run_builtin(args.job_id, args.runtime_dir)
        return 0
    except BaseException as exc:  # whatever ends the rank is the job's cause
        if isinstance(exc, GraphtierError):
            print(f"error: {exc}", file=sys.stderr, flush=True)
        else:
            traceback.print_exception(type(exc), exc, _from_script(exc.__traceback__, args.script))
        write_rank_failure(job_directory(args.runtime_dir, args.job_id), rank, exc)
        return exc.code if isinstance(exc, SystemExit) and isinstance(exc.code, int) else 1


if __name__ == "__main__":
    code = main()
    if build_parser().parse_known_args()[0].script is not None:
        sys.exit(code)  # a user's script may leave files that are flushed when collected
    exit_without_teardown(code)  # the built-in loop has ended; torchrun waits for this process
