"""`DaemonConfig`: where the daemon keeps its files, what it listens on, where datasets are.

Loaded from a YAML or JSON file (`graphtierd --config FILE`) and/or command-line flags;
flags win over the file. Validated up front, so a typo is a clear error before anything
starts. Each field's section and, where it is not `--field-name`, its flag are field metadata
(`graphtier.contract.options`): graphtierd's command line and help are derived from this model.
This module stays light (no torch, no grpc) so that a second `graphtierd` is refused quickly.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from graphtier.contract.endpoints import (
    DaemonFiles,
    default_dataset_root,
    default_log_path,
    default_runtime_dir,
    default_socket_path,
    default_state_dir,
    default_token_path,
)
from graphtier.contract.environment import GPU_TIERS_ENV
from graphtier.contract.errors import DaemonConfigError
from graphtier.contract.messages import describe_validation_error
from graphtier.contract.options import FILE_ONLY, Flag, Section
from graphtier.contract.settings_files import describe_yaml_error, load_json, load_yaml
from graphtier.service.daemon.cluster.settings import ClusterConfig

FILES = Section("Files")
SERVING = Section("Serving")
ACCESS = Section("Access")
DATASETS = Section("Datasets")
JOBS = Section("Jobs")
GPU = Section("GPU")
CLUSTER = Section("Cluster")

MAX_SOCKET_PATH_BYTES = 107  # sun_path is 108 bytes including the terminating NUL
FORKSERVER_SOCKET_TAIL = len("/tmp/pymp-12345678/listener-12345678")  # multiprocessing's, in the scratch directory
MIN_NVML_INTERVAL_S = 0.1


def parse_host_port(text: str, *, what: str) -> tuple[str, int]:
    """`host:port` (IPv6 as `[::1]:port`) -> (host, port); ValueError naming `what` otherwise."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{what} {text!r} must be HOST:PORT with a port in 0..65535 (0 = pick a free one)")
    return host, int(port_text)


def artifact_budget_bytes(text: str) -> int | None:
    """`--artifact-budget` in bytes: a size ('10GiB', '500MB'), or None for 'none'; ValueError otherwise."""
    from graphtier.contract.sizes import SIZE_UNITS, split_size

    if text.strip().lower() in ("none", "unlimited"):
        return None
    parsed = split_size(text)
    if parsed is None or parsed[1].lower() not in (*SIZE_UNITS, ""):
        raise ValueError(f"artifact budget {text!r} must be a size such as 10GiB or 500MB, or 'none'")
    number, unit = parsed
    return int(number * SIZE_UNITS.get(unit.lower(), 1))


class DaemonConfig(BaseModel):
    """Everything `graphtierd` needs to start; every path is made absolute on validation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Annotated[Literal[1], FILE_ONLY] = Field(default=1, description="Config format version; only 1 exists.")
    runtime_dir: Annotated[Path, FILES] = Field(
        default_factory=default_runtime_dir,
        description="Directory of the lock, Unix socket, endpoints.json and log; one daemon per directory. Default "
        "$GRAPHTIER_HOME/run.",
    )
    socket_path: Annotated[Path | None, FILES, Flag("--socket")] = Field(
        default=None, description="gRPC Unix socket; default <runtime_dir>/daemon.sock (at most 107 bytes)."
    )
    tcp: Annotated[str | None, SERVING, Flag(metavar="HOST:PORT")] = Field(
        default=None, description="Also serve gRPC on TCP HOST:PORT (port 0 = pick a free one); unset = Unix only."
    )
    http_host: Annotated[str, SERVING] = Field(
        default="127.0.0.1",
        min_length=1,
        description="Address of the status app (127.0.0.1: this machine only). The page, /v1/status and /metrics "
        "have no authentication and show dataset paths, job names and specs to whoever reaches them: bind another "
        "address only where just your monitoring does.",
    )
    http_port: Annotated[int, SERVING] = Field(
        default=0, ge=0, le=65535, description="Port of the status app; 0 = pick a free one (endpoints.json has it)."
    )
    dataset_root: Annotated[Path, DATASETS] = Field(
        default_factory=default_dataset_root,
        description="Where prepared datasets are looked up by name; default $GRAPHTIER_HOME/datasets.",
    )
    log_file: Annotated[Path | None, FILES] = Field(
        default=None, description="Log file; default <runtime_dir>/daemon.log."
    )
    nvml_interval_s: Annotated[float, GPU] = Field(
        default=1.0,
        ge=0,
        le=60,
        description="Seconds between NVML samples of the GPUs' PCIe and NVLink byte counters; 0 turns the collector "
        "off.",
    )
    cuda_probe_timeout_s: Annotated[float, GPU] = Field(
        default=120.0,
        ge=0,
        le=600,
        description="Seconds the CUDA probe subprocess (host registration, peer access) may run after start; 0 skips "
        "it (`graphtier doctor` runs the same checks).",
    )
    grpc_workers: Annotated[int, SERVING] = Field(
        default=16, ge=2, le=256, description="Threads serving gRPC calls other than the followed event streams."
    )
    max_event_streams: Annotated[int, SERVING] = Field(
        default=256,
        ge=1,
        le=4096,
        description="Followed StreamJobEvents calls (`job logs --follow`) open at once. Each waits in a thread "
        "of its own beside the grpc_workers, so open streams never starve other calls; one more is refused "
        "(RESOURCE_EXHAUSTED) naming this limit.",
    )
    shutdown_grace_s: Annotated[float, SERVING] = Field(
        default=5.0, ge=0, le=600, description="Seconds in-flight calls get to finish on SIGTERM."
    )
    producer_stall_timeout_s: Annotated[float, JOBS] = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="A producer alive but without a heartbeat this long is stalled: its rank stops waiting and the "
        "job fails naming it.",
    )
    max_running_jobs: Annotated[int, JOBS] = Field(
        default=0,
        ge=0,
        le=10_000,
        description="Jobs running at once; 0 = as many as fit the machine's cores, memory and GPUs. The rest wait "
        "in order of submission.",
    )
    core_oversubscription: Annotated[float, JOBS] = Field(
        default=2.0,
        ge=0.25,
        le=64,
        allow_inf_nan=False,
        description="Ranks the running jobs may have per CPU core together before a new job waits.",
    )
    memory_limit: Annotated[str, JOBS] = Field(
        default="auto",
        min_length=1,
        description="Memory the daemon and everything it starts may use: 'auto' = the limit of the memory cgroup "
        "it runs in (none outside one), 'none', or a size ('8GiB'). A job whose fixed need does not fit is refused "
        "at submit naming the least that works; what the limit leaves sizes the producers' storage buffers.",
    )
    keep_checkpoints: Annotated[bool, JOBS] = Field(
        default=False,
        description="Keep every job's checkpoints; otherwise a succeeded job's are removed and others keep the newest.",
    )
    artifact_keep: Annotated[int, JOBS] = Field(
        default=20,
        ge=0,
        le=1_000_000,
        description="Exported models (artifacts) kept: those of the newest N succeeded jobs; older ones are removed "
        "when a job succeeds or the daemon starts. 0 = keep none.",
    )
    artifact_budget: Annotated[str, JOBS] = Field(
        default="10GiB",
        min_length=1,
        description="Bytes the kept exported models may hold together ('10GiB'); the newest that fit are kept. "
        "'none' = no byte limit.",
    )
    job_retire_s: Annotated[float, JOBS] = Field(
        default=600.0,
        ge=0,
        le=30 * 86400,
        allow_inf_nan=False,
        description="Seconds after a job ends before its per-job metric series are folded away and it is answered "
        "from the job store.",
    )
    state_dir: Annotated[Path | None, FILES] = Field(
        default=None,
        description="Where the job history (SQLite) lives, across restarts; one daemon at a time. Default: "
        "<runtime_dir>/../state, or <runtime_dir>/../state-<name> when the runtime directory is not named run.",
    )
    idle_unload_s: Annotated[float, DATASETS] = Field(
        default=0.0,
        ge=0,
        le=30 * 86400,
        allow_inf_nan=False,
        description="Unload a dataset no unfinished job has used for this many seconds; 0 = keep it loaded.",
    )
    shm_budget: Annotated[str, DATASETS] = Field(
        default="90%",
        min_length=1,
        description="Shared memory all loaded datasets may hold ('40GiB', or a % of /dev/shm); idle ones are "
        "unloaded least recently used first to make room.",
    )
    socket_group: Annotated[str | None, ACCESS] = Field(
        default=None,
        min_length=1,
        description="Unix group whose members may call the daemon: socket 0660 and runtime directory 0750 "
        "owned by it; unset = the daemon's user only (0600 / 0700).",
    )
    admin_group: Annotated[str | None, ACCESS] = Field(
        default=None,
        min_length=1,
        description="Unix group whose members act on every user's jobs (cancel, logs, attach) and run the "
        "daemon's own business (scripts as the daemon's user, peers, force unloads); root and the daemon's "
        "user always do. Anyone else acts on their own jobs only.",
    )
    user_tokens: Annotated[Path | None, ACCESS, Flag(metavar="FILE")] = Field(
        default=None,
        description="File of `USER TOKEN` lines (0600): a TCP caller presenting one acts as that user, on its own "
        "jobs only (the daemon's token stays the admin's). Re-read when it changes.",
    )
    insecure: Annotated[bool, ACCESS] = Field(
        default=False,
        description="Serve the TCP listener in plaintext (still token-checked); otherwise TCP is TLS only.",
    )
    tls_cert: Annotated[Path | None, ACCESS] = Field(
        default=None,
        description="TLS certificate (PEM) of the TCP listener; default a self-signed one in <runtime_dir>/tls.",
    )
    tls_key: Annotated[Path | None, ACCESS] = Field(
        default=None, description="Private key (PEM) of tls_cert; given with it or not at all."
    )
    token_file: Annotated[Path | None, ACCESS] = Field(
        default=None,
        description="The bearer token TCP callers must present; default <runtime_dir>/token, made if missing.",
    )
    gpu_tiers: Annotated[Literal["auto", "off"], GPU] = Field(
        default_factory=lambda: os.environ.get(GPU_TIERS_ENV, "auto"),
        validate_default=True,
        description=f"auto: device tiers in GPU memory when CUDA devices are visible; off: always accounted only "
        f"(default ${GPU_TIERS_ENV}, else auto).",
    )
    device_budget: Annotated[str, GPU] = Field(
        default="auto",
        min_length=1,
        description="Device-tier bytes per GPU ('24GiB', '50%' of its memory); auto = free memory less device_reserve.",
    )
    device_reserve: Annotated[str, GPU] = Field(
        default="25%", min_length=1, description="With device_budget auto: GPU memory left free for training."
    )
    device_memory: Annotated[Literal["ipc", "vmm"], GPU] = Field(
        default="ipc",
        description="How device tiers and device slots are shared with producers and ranks: ipc (legacy CUDA IPC "
        "handles; needs a shared PID namespace, e.g. hostPID pods) or vmm (cuMemCreate allocations whose POSIX fds "
        "pass over the daemon's Unix socket; works across PID namespaces).",
    )
    cluster: Annotated[ClusterConfig, CLUSTER] = Field(
        default_factory=ClusterConfig,
        description="Peers (other daemons' TCP HOST:PORT, or a hosts file), this node's name and the peer timeout; "
        "empty = a one-node daemon.",
    )

    @field_validator("device_budget", "device_reserve", "shm_budget")
    @classmethod
    def _check_device_size(cls, text: str, info: Any) -> str:
        if info.field_name == "device_budget" and text == "auto":
            return text
        from graphtier.contract.errors import PlacementError
        from graphtier.service.placement.tier_budget import parse_budget

        if text.strip().endswith("%"):
            try:
                share = float(text.strip()[:-1])
            except ValueError:
                share = -1.0
            if not 0 <= share <= 100:
                raise ValueError(f"a percentage must be between 0% and 100%, got {text!r}")
        try:
            size = parse_budget(text, total_bytes=1 << 40, what=info.field_name)
        except PlacementError as exc:
            raise ValueError(str(exc)) from None
        if info.field_name == "shm_budget" and size == 0:
            raise ValueError("a shared-memory budget of 0 lets no dataset load; give a size or a percentage")
        return text

    @field_validator("artifact_budget")
    @classmethod
    def _check_artifact_budget(cls, text: str) -> str:
        artifact_budget_bytes(text)
        return text

    @property
    def artifact_budget_bytes(self) -> int | None:
        """The artifact budget in bytes; None = no byte limit."""
        return artifact_budget_bytes(self.artifact_budget)

    @field_validator("memory_limit")
    @classmethod
    def _check_memory_limit(cls, text: str) -> str:
        from graphtier.contract.errors import PlacementError
        from graphtier.service.daemon.jobs.memory_need import parse_memory_limit

        try:
            parse_memory_limit(text)
        except PlacementError as exc:
            raise ValueError(f"{exc}; or 'auto' (the memory cgroup's limit) or 'none'") from None
        return text

    @field_validator(
        "runtime_dir", "socket_path", "dataset_root", "log_file", "tls_cert", "tls_key", "token_file", "state_dir"
    )
    @classmethod
    def _absolute(cls, path: Path | None) -> Path | None:
        return None if path is None else Path(os.path.abspath(path.expanduser()))

    @field_validator("nvml_interval_s")
    @classmethod
    def _check_nvml_interval(cls, seconds: float) -> float:
        if 0 < seconds < MIN_NVML_INTERVAL_S:
            raise ValueError(
                f"must be 0 (off) or at least {MIN_NVML_INTERVAL_S} s: NVML counters are read by a "
                "thread of the daemon, not a busy loop"
            )
        return seconds

    @field_validator("tcp")
    @classmethod
    def _check_tcp(cls, tcp: str | None) -> str | None:
        if tcp is not None:
            parse_host_port(tcp, what="tcp")
        return tcp

    @model_validator(mode="after")
    def _check_socket_length(self) -> DaemonConfig:
        length = len(os.fsencode(self.socket))
        if length > MAX_SOCKET_PATH_BYTES:
            raise ValueError(
                f"socket path {str(self.socket)!r} is {length} bytes; Unix sockets allow at most "
                f"{MAX_SOCKET_PATH_BYTES}: choose a shorter runtime_dir or set socket_path"
            )
        return self

    @field_validator("socket_group", "admin_group")
    @classmethod
    def _check_group(cls, group: str | None) -> str | None:
        if group is not None:
            import grp

            try:
                grp.getgrnam(group)
            except KeyError:
                raise ValueError(f"no Unix group named {group!r} on this machine") from None
        return group

    @property
    def socket_gid(self) -> int | None:
        """The gid of socket_group, None when unset."""
        import grp

        return None if self.socket_group is None else grp.getgrnam(self.socket_group).gr_gid

    @property
    def admin_gid(self) -> int | None:
        """The gid of admin_group, None when unset."""
        import grp

        return None if self.admin_group is None else grp.getgrnam(self.admin_group).gr_gid

    @field_validator("user_tokens")
    @classmethod
    def _check_user_tokens(cls, path: Path | None) -> Path | None:
        if path is None:
            return None
        from graphtier.contract.errors import DaemonConfigError
        from graphtier.service.daemon.rpc.user_tokens import UserTokens

        path = Path(os.path.abspath(path.expanduser()))
        try:
            UserTokens(path)
        except DaemonConfigError as exc:
            raise ValueError(str(exc)) from None
        return path

    @model_validator(mode="after")
    def _check_tls_pair(self) -> DaemonConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: give both, or neither for a self-signed certificate")
        if self.tcp is None and (self.insecure or self.tls_cert is not None):
            raise ValueError("insecure, tls_cert and tls_key apply to the TCP listener: give tcp too")
        if self.tcp is None and self.user_tokens is not None:
            raise ValueError("user_tokens are presented over TCP: give tcp too")
        return self

    @model_validator(mode="after")
    def _check_cluster(self) -> DaemonConfig:
        if self.cluster.enabled and self.tcp is None:
            raise ValueError("cluster peers are reached over TCP, and reach this daemon the same way: give tcp too")
        if self.cluster.enabled and self.cluster.advertise is None and self.tcp_address is not None:
            host, port = self.tcp_address
            if host in ("0.0.0.0", "::", "") or port == 0:
                raise ValueError(
                    f"tcp {self.tcp!r} is no address peers can reach: give cluster.advertise HOST:PORT "
                    "(or a concrete tcp host and port)"
                )
        return self

    def forkserver_room(self) -> str:
        """Why this runtime directory cannot hold the socket of the forkserver the daemon forks its jobs'
        processes from (<runtime_dir>/tmp/pymp-*/listener-*; a Unix socket path has at most 107 bytes);
        '' when it can. Checked when the daemon starts, before anything is created."""
        length = len(os.fsencode(self.runtime_dir)) + FORKSERVER_SOCKET_TAIL
        if length <= MAX_SOCKET_PATH_BYTES:
            return ""
        return (
            f"runtime_dir {str(self.runtime_dir)!r} is too long: the forkserver the daemon starts its jobs' processes "
            f"from listens on a socket inside it (<runtime_dir>/tmp/pymp-*/listener-*, {length} bytes here) and Unix "
            f"sockets allow at most {MAX_SOCKET_PATH_BYTES}: choose a runtime_dir of at most "
            f"{MAX_SOCKET_PATH_BYTES - FORKSERVER_SOCKET_TAIL} bytes"
        )

    @property
    def state_path(self) -> Path:
        """The state directory (job history), with its default applied."""
        return self.state_dir or default_state_dir(self.runtime_dir)

    @property
    def token_path(self) -> Path:
        """The token file, with its default applied."""
        return self.token_file or default_token_path(self.runtime_dir)

    @property
    def socket(self) -> Path:
        """The gRPC Unix socket path, with its default applied."""
        return self.socket_path or default_socket_path(self.runtime_dir)

    @property
    def log_path(self) -> Path:
        """The log file, with its default applied."""
        return self.log_file or default_log_path(self.runtime_dir)

    def files(self) -> DaemonFiles:
        """Where this daemon keeps its files, as a client that starts it needs to know."""
        return DaemonFiles(
            runtime_dir=self.runtime_dir,
            socket=self.socket,
            log_file=self.log_path,
            token_file=self.token_path,
            state_dir=self.state_path,
            dataset_root=self.dataset_root,
        )

    @property
    def tcp_address(self) -> tuple[str, int] | None:
        return None if self.tcp is None else parse_host_port(self.tcp, what="tcp")

    @classmethod
    def build(cls, source: str | Path | None = None, **overrides: Any) -> DaemonConfig:
        """Config from file `source` (YAML or JSON; relative paths are relative to the file), then
        `overrides` whose value is not None (command-line flags; a mapping for a nested section, such as
        `cluster`, refines the file's). DaemonConfigError says what is wrong."""
        data: dict[str, Any] = {}
        where = "daemon config"
        if source is not None:
            path = Path(source)
            where = str(path)
            data = _read_file(path)
            for key in (
                "runtime_dir",
                "socket_path",
                "dataset_root",
                "log_file",
                "tls_cert",
                "tls_key",
                "token_file",
                "state_dir",
                "user_tokens",
            ):
                if isinstance(data.get(key), str) and not Path(data[key]).expanduser().is_absolute():
                    data[key] = str(path.parent / data[key])
            if isinstance(data.get("cluster"), dict):
                for key in ("peers_file", "peer_ca"):
                    value = data["cluster"].get(key)
                    if isinstance(value, str) and not Path(value).expanduser().is_absolute():
                        data["cluster"][key] = str(path.parent / value)
        for key, value in overrides.items():  # a nested section's flags refine the file's section
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                value = {**data[key], **value}
            if value is not None:
                data[key] = value
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise DaemonConfigError(f"{where}: {describe_validation_error(exc, known=_setting_names())}") from None


def _setting_names() -> set[str]:
    """Every setting's name, the cluster section's too: what a misspelt key in a config file is matched to."""
    return set(DaemonConfig.model_fields) | set(ClusterConfig.model_fields)


def _read_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise DaemonConfigError(f"{path}: cannot read the daemon config ({exc.strerror})") from None
    try:
        data = load_json(text) if path.suffix == ".json" else load_yaml(text)
    except yaml.YAMLError as exc:
        raise DaemonConfigError(f"{path}: not valid YAML: {describe_yaml_error(exc)}") from None
    except ValueError as exc:  # json.JSONDecodeError's base, and a key given twice
        raise DaemonConfigError(f"{path}: not valid JSON: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise DaemonConfigError(f"{path}: the daemon config must be a mapping of settings, got {type(data).__name__}")
    return data
