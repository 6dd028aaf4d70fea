"""What each caller may do: every servicer asks here before it acts.

- Reading what the status page shows anyone (health, the job list, a job's state and spec, the
  datasets, the cluster): any caller that reaches the daemon.
- Making a job or changing shared state (submit, attach, load and unload datasets): a known user
  (identity.py), who owns the jobs it makes.
- A job's own business -- its events and logs, cancelling it, attaching to it, reporting its
  progress, its channels and its copy of the dataset, its exported artifacts and outputs: its owner
  and the admins alone. Anyone else is refused PERMISSION_DENIED naming the owner.
- The daemon's own business -- running a script as the daemon's user, forcing an unload that would
  cancel other users' jobs, the cluster's peer calls: the admins alone.
- A file the daemon reads for a caller (an inference job's ids): one the caller could read itself.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Callable
from pathlib import Path

import grpc

from graphtier.contract.errors import PermissionDeniedError, UnauthenticatedError
from graphtier.contract.identity import JobOwner, identity_socket_path
from graphtier.service.daemon.rpc.identity import Caller, Callers


class Access:
    """The rules above over the callers (`Callers`) and the jobs' owners: `owner_of(job_id)`, the job
    table's record (UnknownJobError naming an unknown id)."""

    def __init__(self, callers: Callers, owner_of: Callable[[str], JobOwner | None], *, socket_path: str = "") -> None:
        self.callers, self.owner_of = callers, owner_of
        self._identity = str(identity_socket_path(socket_path)) if socket_path else "the identity socket"

    def caller(self, context: grpc.ServicerContext) -> Caller:
        return self.callers.of(context)

    def user(self, context: grpc.ServicerContext, action: str) -> Caller:
        """The caller, who must be a known user; UnauthenticatedError saying how to become one otherwise."""
        caller = self.callers.of(context)
        if caller.user is None:
            raise UnauthenticatedError(
                f"{action}: the daemon does not know who is calling ({caller.problem}); graphtier's client "
                f"identifies its user through {self._identity} (a session credential), or over TCP by a token"
            )
        return caller

    def admin(self, context: grpc.ServicerContext, action: str) -> Caller:
        """The caller, who must be an admin; PermissionDeniedError naming who is otherwise."""
        caller = self.user(context, action)
        if not caller.admin:
            raise PermissionDeniedError(
                f"{action} is for the daemon's admins ({self.callers.admins()}); you are {caller.user}"
            )
        return caller

    def job(self, context: grpc.ServicerContext, job_id: str, action: str) -> Caller:
        """The caller, who must own job `job_id` or be an admin; UnknownJobError for an unknown job,
        PermissionDeniedError naming the owner otherwise."""
        owner = self.owner_of(job_id)  # UnknownJobError naming the id
        caller = self.user(context, f"{action} job {job_id}")
        self.check_owner(caller, job_id, owner, action)
        return caller

    def check_owner(self, caller: Caller, job_id: str, owner: JobOwner | None, action: str) -> None:
        """PermissionDeniedError naming `owner` unless `caller` is it or an admin."""
        if caller.admin or (owner is not None and caller.user is not None and caller.user.name == owner.name):
            return
        whose = f"{owner}'s" if owner is not None else "of no recorded owner (it predates owners)"
        raise PermissionDeniedError(
            f"{action} job {job_id} refused: the job is {whose}, and you are {caller.user}; only its owner and the "
            f"daemon's admins ({self.callers.admins()}) may"
        )

    def check_readable(self, caller: Caller, path: Path, what: str) -> None:
        """PermissionDeniedError naming `path` unless `caller` could read it itself (an admin may name any
        file): the daemon, which reads it, must not read for a user what that user may not."""
        if caller.admin:
            return
        uid = caller.user.uid if caller.user is not None else None
        if uid is None or not _readable_by(path, uid):
            raise PermissionDeniedError(
                f"{what} {path}: the daemon reads it for you, and you ({caller.user}) cannot read it yourself"
            )


def _readable_by(path: Path, uid: int) -> bool:
    """Whether user `uid` may read `path` by its mode bits (and search every directory above it)."""
    try:
        entry = pwd.getpwuid(uid)
        groups = {entry.pw_gid} | {g.gr_gid for g in grp.getgrall() if entry.pw_name in g.gr_mem}
        path = Path(os.path.abspath(path))
        for directory, wanted in [*((p, 1) for p in reversed(path.parents)), (path, 4)]:
            info = directory.stat()
            if directory == path and not stat.S_ISREG(info.st_mode):
                return False
            shift = 6 if info.st_uid == uid else 3 if info.st_gid in groups else 0
            if not (info.st_mode >> shift) & wanted:
                return False
    except (KeyError, OSError):
        return False
    return True
