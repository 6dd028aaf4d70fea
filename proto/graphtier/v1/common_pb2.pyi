from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TIER_UNSPECIFIED: _ClassVar[Tier]
    TIER_DEVICE_REPLICATED: _ClassVar[Tier]
    TIER_DEVICE_INTERLEAVED: _ClassVar[Tier]
    TIER_HOST: _ClassVar[Tier]
    TIER_STORAGE: _ClassVar[Tier]
    TIER_STRUCTURE_DEVICE: _ClassVar[Tier]
    TIER_STRUCTURE_HOST: _ClassVar[Tier]
TIER_UNSPECIFIED: Tier
TIER_DEVICE_REPLICATED: Tier
TIER_DEVICE_INTERLEAVED: Tier
TIER_HOST: Tier
TIER_STORAGE: Tier
TIER_STRUCTURE_DEVICE: Tier
TIER_STRUCTURE_HOST: Tier

class SegmentRef(_message.Message):
    __slots__ = ("name", "offset", "shape", "dtype")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    name: str
    offset: int
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, name: _Optional[str] = ..., offset: _Optional[int] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...

class MemoryHandle(_message.Message):
    __slots__ = ("location", "mechanism", "nbytes", "owner_pid", "shm_name", "ipc_handle", "export_socket", "export_id", "pci_bus_id")
    LOCATION_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    OWNER_PID_FIELD_NUMBER: _ClassVar[int]
    SHM_NAME_FIELD_NUMBER: _ClassVar[int]
    IPC_HANDLE_FIELD_NUMBER: _ClassVar[int]
    EXPORT_SOCKET_FIELD_NUMBER: _ClassVar[int]
    EXPORT_ID_FIELD_NUMBER: _ClassVar[int]
    PCI_BUS_ID_FIELD_NUMBER: _ClassVar[int]
    location: str
    mechanism: str
    nbytes: int
    owner_pid: int
    shm_name: str
    ipc_handle: str
    export_socket: str
    export_id: str
    pci_bus_id: str
    def __init__(self, location: _Optional[str] = ..., mechanism: _Optional[str] = ..., nbytes: _Optional[int] = ..., owner_pid: _Optional[int] = ..., shm_name: _Optional[str] = ..., ipc_handle: _Optional[str] = ..., export_socket: _Optional[str] = ..., export_id: _Optional[str] = ..., pci_bus_id: _Optional[str] = ...) -> None: ...

class Region(_message.Message):
    __slots__ = ("offset", "shape", "dtype")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    offset: int
    shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    def __init__(self, offset: _Optional[int] = ..., shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ...) -> None: ...

class DeviceTierRef(_message.Message):
    __slots__ = ("tier", "slot", "rows", "memory")
    TIER_FIELD_NUMBER: _ClassVar[int]
    SLOT_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    tier: str
    slot: int
    rows: int
    memory: MemoryHandle
    def __init__(self, tier: _Optional[str] = ..., slot: _Optional[int] = ..., rows: _Optional[int] = ..., memory: _Optional[_Union[MemoryHandle, _Mapping]] = ...) -> None: ...

class StorageTierRef(_message.Message):
    __slots__ = ("path", "offset_bytes", "first_row", "rows", "row_shape", "dtype", "row_checksums")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_BYTES_FIELD_NUMBER: _ClassVar[int]
    FIRST_ROW_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    ROW_SHAPE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    ROW_CHECKSUMS_FIELD_NUMBER: _ClassVar[int]
    path: str
    offset_bytes: int
    first_row: int
    rows: int
    row_shape: _containers.RepeatedScalarFieldContainer[int]
    dtype: str
    row_checksums: SegmentRef
    def __init__(self, path: _Optional[str] = ..., offset_bytes: _Optional[int] = ..., first_row: _Optional[int] = ..., rows: _Optional[int] = ..., row_shape: _Optional[_Iterable[int]] = ..., dtype: _Optional[str] = ..., row_checksums: _Optional[_Union[SegmentRef, _Mapping]] = ...) -> None: ...

class TierBudgetSpec(_message.Message):
    __slots__ = ("num_devices", "device_replicated", "device_interleaved", "host", "structure_device")
    NUM_DEVICES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_REPLICATED_FIELD_NUMBER: _ClassVar[int]
    DEVICE_INTERLEAVED_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    STRUCTURE_DEVICE_FIELD_NUMBER: _ClassVar[int]
    num_devices: int
    device_replicated: str
    device_interleaved: str
    host: str
    structure_device: str
    def __init__(self, num_devices: _Optional[int] = ..., device_replicated: _Optional[str] = ..., device_interleaved: _Optional[str] = ..., host: _Optional[str] = ..., structure_device: _Optional[str] = ...) -> None: ...

class PlacementBoundaries(_message.Message):
    __slots__ = ("num_nodes", "row_bytes", "num_devices", "replicated_end", "interleaved_end", "host_end", "structure_device_end", "structure_device_edges")
    NUM_NODES_FIELD_NUMBER: _ClassVar[int]
    ROW_BYTES_FIELD_NUMBER: _ClassVar[int]
    NUM_DEVICES_FIELD_NUMBER: _ClassVar[int]
    REPLICATED_END_FIELD_NUMBER: _ClassVar[int]
    INTERLEAVED_END_FIELD_NUMBER: _ClassVar[int]
    HOST_END_FIELD_NUMBER: _ClassVar[int]
    STRUCTURE_DEVICE_END_FIELD_NUMBER: _ClassVar[int]
    STRUCTURE_DEVICE_EDGES_FIELD_NUMBER: _ClassVar[int]
    num_nodes: int
    row_bytes: int
    num_devices: int
    replicated_end: int
    interleaved_end: int
    host_end: int
    structure_device_end: int
    structure_device_edges: int
    def __init__(self, num_nodes: _Optional[int] = ..., row_bytes: _Optional[int] = ..., num_devices: _Optional[int] = ..., replicated_end: _Optional[int] = ..., interleaved_end: _Optional[int] = ..., host_end: _Optional[int] = ..., structure_device_end: _Optional[int] = ..., structure_device_edges: _Optional[int] = ...) -> None: ...

class TierSize(_message.Message):
    __slots__ = ("tier", "rows", "bytes")
    TIER_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    tier: Tier
    rows: int
    bytes: int
    def __init__(self, tier: _Optional[_Union[Tier, str]] = ..., rows: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class SourceTraffic(_message.Message):
    __slots__ = ("rows", "bytes")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    rows: int
    bytes: int
    def __init__(self, rows: _Optional[int] = ..., bytes: _Optional[int] = ...) -> None: ...

class TierCounters(_message.Message):
    __slots__ = ("replicated", "interleaved_local", "interleaved_peer", "host", "storage", "simulated", "network")
    REPLICATED_FIELD_NUMBER: _ClassVar[int]
    INTERLEAVED_LOCAL_FIELD_NUMBER: _ClassVar[int]
    INTERLEAVED_PEER_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    SIMULATED_FIELD_NUMBER: _ClassVar[int]
    NETWORK_FIELD_NUMBER: _ClassVar[int]
    replicated: SourceTraffic
    interleaved_local: SourceTraffic
    interleaved_peer: SourceTraffic
    host: SourceTraffic
    storage: SourceTraffic
    simulated: bool
    network: SourceTraffic
    def __init__(self, replicated: _Optional[_Union[SourceTraffic, _Mapping]] = ..., interleaved_local: _Optional[_Union[SourceTraffic, _Mapping]] = ..., interleaved_peer: _Optional[_Union[SourceTraffic, _Mapping]] = ..., host: _Optional[_Union[SourceTraffic, _Mapping]] = ..., storage: _Optional[_Union[SourceTraffic, _Mapping]] = ..., simulated: _Optional[bool] = ..., network: _Optional[_Union[SourceTraffic, _Mapping]] = ...) -> None: ...

class StorageCounters(_message.Message):
    __slots__ = ("mode", "window", "read_rows", "read_bytes", "requests", "window_rows", "window_bytes", "io_seconds", "request_seconds", "read_seconds", "lookahead_batches", "window_cached_rows", "read_row_bytes")
    MODE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    READ_ROWS_FIELD_NUMBER: _ClassVar[int]
    READ_BYTES_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_ROWS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_BYTES_FIELD_NUMBER: _ClassVar[int]
    IO_SECONDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SECONDS_FIELD_NUMBER: _ClassVar[int]
    READ_SECONDS_FIELD_NUMBER: _ClassVar[int]
    LOOKAHEAD_BATCHES_FIELD_NUMBER: _ClassVar[int]
    WINDOW_CACHED_ROWS_FIELD_NUMBER: _ClassVar[int]
    READ_ROW_BYTES_FIELD_NUMBER: _ClassVar[int]
    mode: str
    window: int
    read_rows: int
    read_bytes: int
    requests: int
    window_rows: int
    window_bytes: int
    io_seconds: float
    request_seconds: float
    read_seconds: float
    lookahead_batches: int
    window_cached_rows: int
    read_row_bytes: int
    def __init__(self, mode: _Optional[str] = ..., window: _Optional[int] = ..., read_rows: _Optional[int] = ..., read_bytes: _Optional[int] = ..., requests: _Optional[int] = ..., window_rows: _Optional[int] = ..., window_bytes: _Optional[int] = ..., io_seconds: _Optional[float] = ..., request_seconds: _Optional[float] = ..., read_seconds: _Optional[float] = ..., lookahead_batches: _Optional[int] = ..., window_cached_rows: _Optional[int] = ..., read_row_bytes: _Optional[int] = ...) -> None: ...

class BestEvaluation(_message.Message):
    __slots__ = ("epoch", "selected_by", "val_accuracy", "test_accuracy", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    SELECTED_BY_FIELD_NUMBER: _ClassVar[int]
    VAL_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    selected_by: str
    val_accuracy: float
    test_accuracy: float
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, epoch: _Optional[int] = ..., selected_by: _Optional[str] = ..., val_accuracy: _Optional[float] = ..., test_accuracy: _Optional[float] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class EpochRecord(_message.Message):
    __slots__ = ("epoch", "step", "train_loss", "train_accuracy", "batches_per_second", "epoch_seconds", "metrics")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    TRAIN_LOSS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    EPOCH_SECONDS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    step: int
    train_loss: float
    train_accuracy: float
    batches_per_second: float
    epoch_seconds: float
    metrics: _containers.ScalarMap[str, float]
    def __init__(self, epoch: _Optional[int] = ..., step: _Optional[int] = ..., train_loss: _Optional[float] = ..., train_accuracy: _Optional[float] = ..., batches_per_second: _Optional[float] = ..., epoch_seconds: _Optional[float] = ..., metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...
