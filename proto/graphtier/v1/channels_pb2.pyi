from graphtier.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OpenChannelRequest(_message.Message):
    __slots__ = ("job_id", "rank", "trainer_pid")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    TRAINER_PID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    trainer_pid: int
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., trainer_pid: _Optional[int] = ...) -> None: ...

class SlotCapacity(_message.Message):
    __slots__ = ("nodes", "edges", "expanded")
    NODES_FIELD_NUMBER: _ClassVar[int]
    EDGES_FIELD_NUMBER: _ClassVar[int]
    EXPANDED_FIELD_NUMBER: _ClassVar[int]
    nodes: int
    edges: int
    expanded: int
    def __init__(self, nodes: _Optional[int] = ..., edges: _Optional[int] = ..., expanded: _Optional[int] = ...) -> None: ...

class ChannelSlot(_message.Message):
    __slots__ = ("index", "generation", "capacity", "memory", "node_ids", "indptr", "indices", "labels", "features", "pairs", "ready_event", "released_event", "edge_types", "node_types", "type_features")
    class TypeFeaturesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.Region
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.Region, _Mapping]] = ...) -> None: ...
    INDEX_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    CAPACITY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_FIELD_NUMBER: _ClassVar[int]
    NODE_IDS_FIELD_NUMBER: _ClassVar[int]
    INDPTR_FIELD_NUMBER: _ClassVar[int]
    INDICES_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    PAIRS_FIELD_NUMBER: _ClassVar[int]
    READY_EVENT_FIELD_NUMBER: _ClassVar[int]
    RELEASED_EVENT_FIELD_NUMBER: _ClassVar[int]
    EDGE_TYPES_FIELD_NUMBER: _ClassVar[int]
    NODE_TYPES_FIELD_NUMBER: _ClassVar[int]
    TYPE_FEATURES_FIELD_NUMBER: _ClassVar[int]
    index: int
    generation: int
    capacity: SlotCapacity
    memory: _common_pb2.MemoryHandle
    node_ids: _common_pb2.Region
    indptr: _common_pb2.Region
    indices: _common_pb2.Region
    labels: _common_pb2.Region
    features: _common_pb2.Region
    pairs: _common_pb2.Region
    ready_event: str
    released_event: str
    edge_types: _common_pb2.Region
    node_types: _common_pb2.Region
    type_features: _containers.MessageMap[str, _common_pb2.Region]
    def __init__(self, index: _Optional[int] = ..., generation: _Optional[int] = ..., capacity: _Optional[_Union[SlotCapacity, _Mapping]] = ..., memory: _Optional[_Union[_common_pb2.MemoryHandle, _Mapping]] = ..., node_ids: _Optional[_Union[_common_pb2.Region, _Mapping]] = ..., indptr: _Optional[_Union[_common_pb2.Region, _Mapping]] = ..., indices: _Optional[_Union[_common_pb2.Region, _Mapping]] = ..., labels: _Optional[_Union[_common_pb2.Region, _Mapping]] = ..., features: _Optional[_Union[_common_pb2.Region, _Mapping]] = ..., pairs: _Optional[_Union[_common_pb2.Region, _Mapping]] = ..., ready_event: _Optional[str] = ..., released_event: _Optional[str] = ..., edge_types: _Optional[_Union[_common_pb2.Region, _Mapping]] = ..., node_types: _Optional[_Union[_common_pb2.Region, _Mapping]] = ..., type_features: _Optional[_Mapping[str, _common_pb2.Region]] = ...) -> None: ...

class ChannelLayout(_message.Message):
    __slots__ = ("version", "channel", "job_id", "rank", "world_size", "slots", "control", "error_text", "socket_path", "producer_pid", "producer_start_time", "stall_timeout_seconds", "dataset", "num_nodes", "feature_dim", "num_classes", "fanouts", "batch_size", "steps_per_epoch", "epochs")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CHANNEL_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    WORLD_SIZE_FIELD_NUMBER: _ClassVar[int]
    SLOTS_FIELD_NUMBER: _ClassVar[int]
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    ERROR_TEXT_FIELD_NUMBER: _ClassVar[int]
    SOCKET_PATH_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_PID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_START_TIME_FIELD_NUMBER: _ClassVar[int]
    STALL_TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    NUM_NODES_FIELD_NUMBER: _ClassVar[int]
    FEATURE_DIM_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    FANOUTS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    version: int
    channel: str
    job_id: str
    rank: int
    world_size: int
    slots: _containers.RepeatedCompositeFieldContainer[ChannelSlot]
    control: _common_pb2.SegmentRef
    error_text: _common_pb2.SegmentRef
    socket_path: str
    producer_pid: int
    producer_start_time: int
    stall_timeout_seconds: float
    dataset: str
    num_nodes: int
    feature_dim: int
    num_classes: int
    fanouts: _containers.RepeatedScalarFieldContainer[int]
    batch_size: int
    steps_per_epoch: int
    epochs: int
    def __init__(self, version: _Optional[int] = ..., channel: _Optional[str] = ..., job_id: _Optional[str] = ..., rank: _Optional[int] = ..., world_size: _Optional[int] = ..., slots: _Optional[_Iterable[_Union[ChannelSlot, _Mapping]]] = ..., control: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ..., error_text: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ..., socket_path: _Optional[str] = ..., producer_pid: _Optional[int] = ..., producer_start_time: _Optional[int] = ..., stall_timeout_seconds: _Optional[float] = ..., dataset: _Optional[str] = ..., num_nodes: _Optional[int] = ..., feature_dim: _Optional[int] = ..., num_classes: _Optional[int] = ..., fanouts: _Optional[_Iterable[int]] = ..., batch_size: _Optional[int] = ..., steps_per_epoch: _Optional[int] = ..., epochs: _Optional[int] = ...) -> None: ...

class ReleaseChannelRequest(_message.Message):
    __slots__ = ("job_id", "rank", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class ReleaseChannelResponse(_message.Message):
    __slots__ = ("batches_consumed",)
    BATCHES_CONSUMED_FIELD_NUMBER: _ClassVar[int]
    batches_consumed: int
    def __init__(self, batches_consumed: _Optional[int] = ...) -> None: ...
