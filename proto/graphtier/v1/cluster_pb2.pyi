from graphtier.v1 import jobs_pb2 as _jobs_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetNodeRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class NodeDataset(_message.Message):
    __slots__ = ("name", "version", "loaded", "num_nodes", "size_bytes")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    NUM_NODES_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    loaded: bool
    num_nodes: int
    size_bytes: int
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., loaded: _Optional[bool] = ..., num_nodes: _Optional[int] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class NodeLoad(_message.Message):
    __slots__ = ("load1", "load5", "load15", "cpus", "memory_total_bytes", "memory_available_bytes", "active_jobs")
    LOAD1_FIELD_NUMBER: _ClassVar[int]
    LOAD5_FIELD_NUMBER: _ClassVar[int]
    LOAD15_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_JOBS_FIELD_NUMBER: _ClassVar[int]
    load1: float
    load5: float
    load15: float
    cpus: int
    memory_total_bytes: int
    memory_available_bytes: int
    active_jobs: int
    def __init__(self, load1: _Optional[float] = ..., load5: _Optional[float] = ..., load15: _Optional[float] = ..., cpus: _Optional[int] = ..., memory_total_bytes: _Optional[int] = ..., memory_available_bytes: _Optional[int] = ..., active_jobs: _Optional[int] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("name", "address", "health", "message", "pid", "gpus", "datasets", "load", "self", "uptime_seconds")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    LOAD_FIELD_NUMBER: _ClassVar[int]
    SELF_FIELD_NUMBER: _ClassVar[int]
    UPTIME_SECONDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    address: str
    health: str
    message: str
    pid: int
    gpus: int
    datasets: _containers.RepeatedCompositeFieldContainer[NodeDataset]
    load: NodeLoad
    self: bool
    uptime_seconds: float
    def __init__(self_, name: _Optional[str] = ..., address: _Optional[str] = ..., health: _Optional[str] = ..., message: _Optional[str] = ..., pid: _Optional[int] = ..., gpus: _Optional[int] = ..., datasets: _Optional[_Iterable[_Union[NodeDataset, _Mapping]]] = ..., load: _Optional[_Union[NodeLoad, _Mapping]] = ..., self: _Optional[bool] = ..., uptime_seconds: _Optional[float] = ...) -> None: ...

class ClusterView(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class JoinClusterRequest(_message.Message):
    __slots__ = ("address",)
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    address: str
    def __init__(self, address: _Optional[str] = ...) -> None: ...

class AdmitPeerRequest(_message.Message):
    __slots__ = ("address",)
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    address: str
    def __init__(self, address: _Optional[str] = ...) -> None: ...

class StartJobPartRequest(_message.Message):
    __slots__ = ("spec", "placement", "owner")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    spec: _jobs_pb2.JobSpec
    placement: _jobs_pb2.JobPlacement
    owner: _jobs_pb2.JobOwner
    def __init__(self, spec: _Optional[_Union[_jobs_pb2.JobSpec, _Mapping]] = ..., placement: _Optional[_Union[_jobs_pb2.JobPlacement, _Mapping]] = ..., owner: _Optional[_Union[_jobs_pb2.JobOwner, _Mapping]] = ...) -> None: ...

class DatasetChunk(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: DatasetHeader
    data: FileData
    def __init__(self, header: _Optional[_Union[DatasetHeader, _Mapping]] = ..., data: _Optional[_Union[FileData, _Mapping]] = ...) -> None: ...

class DatasetHeader(_message.Message):
    __slots__ = ("name", "version", "files", "replace")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    files: _containers.RepeatedCompositeFieldContainer[DatasetFile]
    replace: bool
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., files: _Optional[_Iterable[_Union[DatasetFile, _Mapping]]] = ..., replace: _Optional[bool] = ...) -> None: ...

class DatasetFile(_message.Message):
    __slots__ = ("name", "size_bytes", "sha256")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    name: str
    size_bytes: int
    sha256: str
    def __init__(self, name: _Optional[str] = ..., size_bytes: _Optional[int] = ..., sha256: _Optional[str] = ...) -> None: ...

class FileData(_message.Message):
    __slots__ = ("chunk",)
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    def __init__(self, chunk: _Optional[bytes] = ...) -> None: ...

class ReceiveDatasetResponse(_message.Message):
    __slots__ = ("name", "version", "bytes", "unchanged")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    bytes: int
    unchanged: bool
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., bytes: _Optional[int] = ..., unchanged: _Optional[bool] = ...) -> None: ...

class PushDatasetRequest(_message.Message):
    __slots__ = ("name", "node", "replace")
    NAME_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    REPLACE_FIELD_NUMBER: _ClassVar[int]
    name: str
    node: str
    replace: bool
    def __init__(self, name: _Optional[str] = ..., node: _Optional[str] = ..., replace: _Optional[bool] = ...) -> None: ...

class PushDatasetResponse(_message.Message):
    __slots__ = ("node", "name", "version", "bytes", "seconds", "unchanged")
    NODE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    node: str
    name: str
    version: str
    bytes: int
    seconds: float
    unchanged: bool
    def __init__(self, node: _Optional[str] = ..., name: _Optional[str] = ..., version: _Optional[str] = ..., bytes: _Optional[int] = ..., seconds: _Optional[float] = ..., unchanged: _Optional[bool] = ...) -> None: ...
