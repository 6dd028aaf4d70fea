"""Two users on one daemon: each one's jobs are its own.

The daemon runs as root with a socket group; two throwaway users of that group (made here with
useradd, removed after) each register a job as a torchrun launch does, under the same guessable
launch id. Each then tries everything that belongs to the other's job -- attach (even with the
launch's secret), cancel, its events and logs, a progress report and its channels (even with its
token), its dataset copy, its exported model, an inference job applying its model, a force unload
that would cancel it, and a script run as the daemon's user or an ids file it cannot read itself, both
read or run by the daemon for it -- and every one is refused, naming the owner. A call without a
credential, or with one it forged, is unauthenticated; the job's log file is out of reach too. The
owner and root may.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from graphtier.contract.errors import DaemonRequestError
from graphtier.launcher.client import DaemonClient

CALLS = Path(__file__).with_name("tenant_calls.py")
CROSS_USER = (  # every one of these, against the other user's job, is PERMISSION_DENIED naming its owner
    "attach with the launch's secret",
    "cancel",
    "logs",
    "progress",
    "open channel",
    "release channel",
    "job's dataset copy",
    "export",
    "inference of its model",
    "force unload",
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("useradd") is None,
    reason="needs root and useradd to make two throwaway users and run as each",
)


@contextlib.contextmanager
def throwaway_users(prefix: str):
    """A group `prefix` and users `prefix`a, `prefix`b in it (no home, no login); removed after."""
    made: list[tuple[str, str]] = []
    try:
        subprocess.run(["groupadd", prefix], check=True, capture_output=True)
        made.append(("groupdel", prefix))
        for suffix in ("a", "b"):
            name = f"{prefix}{suffix}"
            subprocess.run(
                ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--groups", prefix, name],
                check=True,
                capture_output=True,
            )
            made.insert(0, ("userdel", name))
        import grp
        import pwd

        yield grp.getgrnam(prefix).gr_gid, [pwd.getpwnam(f"{prefix}{s}") for s in ("a", "b")]
    finally:
        for command, name in made:
            subprocess.run([command, name], capture_output=True)


def as_user(user, gid: int, *args: str) -> subprocess.CompletedProcess[str]:
    """tenant_calls.py ARGS as `user`: its uid, its group and the socket group, nothing of root's (it drops
    root itself, after loading its modules)."""
    return subprocess.run(
        [sys.executable, str(CALLS), str(user.pw_uid), str(user.pw_gid), str(gid), *args],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_each_users_jobs_are_refused_to_the_other(small_rmat, daemon_processes):
    prefix = f"gt{os.environ['GRAPHTIER_SHM_NAMESPACE'][:8]}"
    base = Path(tempfile.mkdtemp(prefix="graphtier-tenants-"))  # outside pytest's 0700 tmp: the users traverse it
    base.chmod(0o711)
    try:
        with throwaway_users(prefix) as (gid, (alice, bob)):
            daemon = daemon_processes(small_rmat.directory.parent, "--socket-group", prefix, runtime_dir=base / "run")
            endpoints = daemon.start()
            runtime = str(daemon.runtime_dir)
            made = {}
            for user, secret in ((alice, "a" * 64), (bob, "b" * 64)):
                done = as_user(user, gid, "attach", runtime, secret)
                assert done.returncode == 0, done.stderr[-3000:]
                made[user.pw_name] = json.loads(done.stdout.strip().splitlines()[-1])
                assert made[user.pw_name]["owner"] == f"{user.pw_name} (uid {user.pw_uid})"
            # the same launch id, seen in `ps`, made two jobs: an id alone joins nobody's
            assert made[alice.pw_name]["job_id"] != made[bob.pw_name]["job_id"]

            for prober, owner, secret in ((bob, alice, "a" * 64), (alice, bob, "b" * 64)):
                theirs = made[owner.pw_name]
                own = made[prober.pw_name]["job_id"]
                done = as_user(prober, gid, "probe", runtime, theirs["job_id"], theirs["token"], secret, own)
                assert done.returncode == 0, done.stderr[-3000:]
                found = json.loads(done.stdout.strip().splitlines()[-1])
                assert found["session user"] == prober.pw_name  # who the kernel says, not who the caller claims
                for case in CROSS_USER:
                    assert found[case].startswith("PERMISSION_DENIED"), (case, found[case])
                    assert f"{owner.pw_name} (uid {owner.pw_uid})" in found[case], (case, found[case])
                assert found["script job"].startswith("PERMISSION_DENIED") and "admins" in found["script job"]
                assert found["ids the daemon would read"].startswith("PERMISSION_DENIED"), found
                assert "/etc/shadow" in found["ids the daemon would read"]
                assert found["cancel without a credential"].startswith("UNAUTHENTICATED"), found
                assert found["cancel with a forged credential"].startswith("UNAUTHENTICATED"), found
                assert "not issued by this daemon" in found["cancel with a forged credential"]
                assert found["job log file"] == "PermissionError"
                # what the status page shows anyone stays readable, with the owner
                assert found["status"] == "OK" and found["list"] == "OK"
                assert found["owner shown"] == f"{owner.pw_name} (uid {owner.pw_uid})"

            with DaemonClient(endpoints.grpc_target) as root:  # an admin: root
                alices = made[alice.pw_name]["job_id"]
                assert list(root.job_events(alices))  # may read anyone's events
                assert root.get_job(alices).state.value in ("pending", "starting", "running")
                for user in (alice, bob):
                    root.cancel_job(made[user.pw_name]["job_id"], "test done")
                with pytest.raises(DaemonRequestError, match="has already ended"):
                    root.cancel_job(alices)
            assert daemon.terminate() == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)
