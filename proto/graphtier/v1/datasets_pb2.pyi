import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from graphtier.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class LoadDatasetRequest(_message.Message):
    __slots__ = ("name", "budgets")
    NAME_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    name: str
    budgets: _common_pb2.TierBudgetSpec
    def __init__(self, name: _Optional[str] = ..., budgets: _Optional[_Union[_common_pb2.TierBudgetSpec, _Mapping]] = ...) -> None: ...

class LoadDatasetResponse(_message.Message):
    __slots__ = ("layout", "already_loaded")
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    ALREADY_LOADED_FIELD_NUMBER: _ClassVar[int]
    layout: DatasetLayout
    already_loaded: bool
    def __init__(self, layout: _Optional[_Union[DatasetLayout, _Mapping]] = ..., already_loaded: _Optional[bool] = ...) -> None: ...

class UnloadDatasetRequest(_message.Message):
    __slots__ = ("name", "force")
    NAME_FIELD_NUMBER: _ClassVar[int]
    FORCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    force: bool
    def __init__(self, name: _Optional[str] = ..., force: _Optional[bool] = ...) -> None: ...

class UnloadDatasetResponse(_message.Message):
    __slots__ = ("released_bytes", "cancelled_job_ids")
    RELEASED_BYTES_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    released_bytes: int
    cancelled_job_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, released_bytes: _Optional[int] = ..., cancelled_job_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class ListDatasetsRequest(_message.Message):
    __slots__ = ("include_prepared",)
    INCLUDE_PREPARED_FIELD_NUMBER: _ClassVar[int]
    include_prepared: bool
    def __init__(self, include_prepared: _Optional[bool] = ...) -> None: ...

class ListDatasetsResponse(_message.Message):
    __slots__ = ("datasets",)
    DATASETS_FIELD_NUMBER: _ClassVar[int]
    datasets: _containers.RepeatedCompositeFieldContainer[DatasetSummary]
    def __init__(self, datasets: _Optional[_Iterable[_Union[DatasetSummary, _Mapping]]] = ...) -> None: ...

class DatasetSummary(_message.Message):
    __slots__ = ("name", "loaded", "num_nodes", "num_edges", "feature_dim", "num_classes", "feature_bytes", "structure_bytes", "resident_bytes", "job_ids", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    LOADED_FIELD_NUMBER: _ClassVar[int]
    NUM_NODES_FIELD_NUMBER: _ClassVar[int]
    NUM_EDGES_FIELD_NUMBER: _ClassVar[int]
    FEATURE_DIM_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    FEATURE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STRUCTURE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    JOB_IDS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    loaded: bool
    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    feature_bytes: int
    structure_bytes: int
    resident_bytes: int
    job_ids: _containers.RepeatedScalarFieldContainer[str]
    source: str
    def __init__(self, name: _Optional[str] = ..., loaded: _Optional[bool] = ..., num_nodes: _Optional[int] = ..., num_edges: _Optional[int] = ..., feature_dim: _Optional[int] = ..., num_classes: _Optional[int] = ..., feature_bytes: _Optional[int] = ..., structure_bytes: _Optional[int] = ..., resident_bytes: _Optional[int] = ..., job_ids: _Optional[_Iterable[str]] = ..., source: _Optional[str] = ...) -> None: ...

class GetDatasetLayoutRequest(_message.Message):
    __slots__ = ("name", "job_id")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    name: str
    job_id: str
    def __init__(self, name: _Optional[str] = ..., job_id: _Optional[str] = ...) -> None: ...

class DatasetLayout(_message.Message):
    __slots__ = ("dataset", "boundaries", "colptr", "row", "labels", "splits", "resident_features", "storage_features", "tier_sizes", "num_edges", "feature_dim", "num_classes", "feature_bytes", "structure_bytes", "device_bytes_per_device", "simulated_devices", "owner_pid", "loaded_at", "budgets", "device_tiers", "placement_notes", "fd_socket", "link_pairs", "hetero_schema", "edge_type", "hetero_features", "version")
    class SplitsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.SegmentRef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ...) -> None: ...
    class LinkPairsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: _common_pb2.SegmentRef
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ...) -> None: ...
    class HeteroFeaturesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: HeteroFeatureTiers
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[HeteroFeatureTiers, _Mapping]] = ...) -> None: ...
    DATASET_FIELD_NUMBER: _ClassVar[int]
    BOUNDARIES_FIELD_NUMBER: _ClassVar[int]
    COLPTR_FIELD_NUMBER: _ClassVar[int]
    ROW_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SPLITS_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_FEATURES_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FEATURES_FIELD_NUMBER: _ClassVar[int]
    TIER_SIZES_FIELD_NUMBER: _ClassVar[int]
    NUM_EDGES_FIELD_NUMBER: _ClassVar[int]
    FEATURE_DIM_FIELD_NUMBER: _ClassVar[int]
    NUM_CLASSES_FIELD_NUMBER: _ClassVar[int]
    FEATURE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STRUCTURE_BYTES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_BYTES_PER_DEVICE_FIELD_NUMBER: _ClassVar[int]
    SIMULATED_DEVICES_FIELD_NUMBER: _ClassVar[int]
    OWNER_PID_FIELD_NUMBER: _ClassVar[int]
    LOADED_AT_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    DEVICE_TIERS_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_NOTES_FIELD_NUMBER: _ClassVar[int]
    FD_SOCKET_FIELD_NUMBER: _ClassVar[int]
    LINK_PAIRS_FIELD_NUMBER: _ClassVar[int]
    HETERO_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    EDGE_TYPE_FIELD_NUMBER: _ClassVar[int]
    HETERO_FEATURES_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    boundaries: _common_pb2.PlacementBoundaries
    colptr: _common_pb2.SegmentRef
    row: _common_pb2.SegmentRef
    labels: _common_pb2.SegmentRef
    splits: _containers.MessageMap[str, _common_pb2.SegmentRef]
    resident_features: _common_pb2.SegmentRef
    storage_features: _common_pb2.StorageTierRef
    tier_sizes: _containers.RepeatedCompositeFieldContainer[_common_pb2.TierSize]
    num_edges: int
    feature_dim: int
    num_classes: int
    feature_bytes: int
    structure_bytes: int
    device_bytes_per_device: int
    simulated_devices: bool
    owner_pid: int
    loaded_at: _timestamp_pb2.Timestamp
    budgets: _common_pb2.TierBudgetSpec
    device_tiers: _containers.RepeatedCompositeFieldContainer[_common_pb2.DeviceTierRef]
    placement_notes: _containers.RepeatedScalarFieldContainer[str]
    fd_socket: str
    link_pairs: _containers.MessageMap[str, _common_pb2.SegmentRef]
    hetero_schema: str
    edge_type: _common_pb2.SegmentRef
    hetero_features: _containers.MessageMap[str, HeteroFeatureTiers]
    version: str
    def __init__(self, dataset: _Optional[str] = ..., boundaries: _Optional[_Union[_common_pb2.PlacementBoundaries, _Mapping]] = ..., colptr: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ..., row: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ..., labels: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ..., splits: _Optional[_Mapping[str, _common_pb2.SegmentRef]] = ..., resident_features: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ..., storage_features: _Optional[_Union[_common_pb2.StorageTierRef, _Mapping]] = ..., tier_sizes: _Optional[_Iterable[_Union[_common_pb2.TierSize, _Mapping]]] = ..., num_edges: _Optional[int] = ..., feature_dim: _Optional[int] = ..., num_classes: _Optional[int] = ..., feature_bytes: _Optional[int] = ..., structure_bytes: _Optional[int] = ..., device_bytes_per_device: _Optional[int] = ..., simulated_devices: _Optional[bool] = ..., owner_pid: _Optional[int] = ..., loaded_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., budgets: _Optional[_Union[_common_pb2.TierBudgetSpec, _Mapping]] = ..., device_tiers: _Optional[_Iterable[_Union[_common_pb2.DeviceTierRef, _Mapping]]] = ..., placement_notes: _Optional[_Iterable[str]] = ..., fd_socket: _Optional[str] = ..., link_pairs: _Optional[_Mapping[str, _common_pb2.SegmentRef]] = ..., hetero_schema: _Optional[str] = ..., edge_type: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ..., hetero_features: _Optional[_Mapping[str, HeteroFeatureTiers]] = ..., version: _Optional[str] = ...) -> None: ...

class HeteroFeatureTiers(_message.Message):
    __slots__ = ("boundaries", "resident_features", "storage_features")
    BOUNDARIES_FIELD_NUMBER: _ClassVar[int]
    RESIDENT_FEATURES_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FEATURES_FIELD_NUMBER: _ClassVar[int]
    boundaries: _common_pb2.PlacementBoundaries
    resident_features: _common_pb2.SegmentRef
    storage_features: _common_pb2.StorageTierRef
    def __init__(self, boundaries: _Optional[_Union[_common_pb2.PlacementBoundaries, _Mapping]] = ..., resident_features: _Optional[_Union[_common_pb2.SegmentRef, _Mapping]] = ..., storage_features: _Optional[_Union[_common_pb2.StorageTierRef, _Mapping]] = ...) -> None: ...
