import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from graphtier.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Device(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DEVICE_UNSPECIFIED: _ClassVar[Device]
    DEVICE_CPU: _ClassVar[Device]
    DEVICE_CUDA: _ClassVar[Device]

class Model(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_UNSPECIFIED: _ClassVar[Model]
    MODEL_SAGE: _ClassVar[Model]
    MODEL_GCN: _ClassVar[Model]
    MODEL_GAT: _ClassVar[Model]
    MODEL_RGCN: _ClassVar[Model]
    MODEL_HGT: _ClassVar[Model]
    MODEL_RGAT: _ClassVar[Model]
    MODEL_PREAGG: _ClassVar[Model]

class JobState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    JOB_STATE_UNSPECIFIED: _ClassVar[JobState]
    JOB_STATE_PENDING: _ClassVar[JobState]
    JOB_STATE_STARTING: _ClassVar[JobState]
    JOB_STATE_RUNNING: _ClassVar[JobState]
    JOB_STATE_SUCCEEDED: _ClassVar[JobState]
    JOB_STATE_FAILED: _ClassVar[JobState]
    JOB_STATE_CANCELLED: _ClassVar[JobState]

class LogStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LOG_STREAM_UNSPECIFIED: _ClassVar[LogStream]
    LOG_STREAM_STDOUT: _ClassVar[LogStream]
    LOG_STREAM_STDERR: _ClassVar[LogStream]
DEVICE_UNSPECIFIED: Device
DEVICE_CPU: Device
DEVICE_CUDA: Device
MODEL_UNSPECIFIED: Model
MODEL_SAGE: Model
MODEL_GCN: Model
MODEL_GAT: Model
MODEL_RGCN: Model
MODEL_HGT: Model
MODEL_RGAT: Model
MODEL_PREAGG: Model
JOB_STATE_UNSPECIFIED: JobState
JOB_STATE_PENDING: JobState
JOB_STATE_STARTING: JobState
JOB_STATE_RUNNING: JobState
JOB_STATE_SUCCEEDED: JobState
JOB_STATE_FAILED: JobState
JOB_STATE_CANCELLED: JobState
LOG_STREAM_UNSPECIFIED: LogStream
LOG_STREAM_STDOUT: LogStream
LOG_STREAM_STDERR: LogStream

class JobSpec(_message.Message):
    __slots__ = ("dataset", "model", "fanouts", "relation_fanouts", "eval_fanouts", "batch_size", "hidden", "heads", "epochs", "lr", "weight_decay", "dropout", "embedding_lr", "embedding_weight_decay", "embedding_dropout", "featureless_init", "nproc_per_node", "nnodes", "nodes", "device", "checkpoint_every_steps", "seed", "budgets", "max_restarts", "num_slots", "storage_reads", "window", "on_nonfinite", "features", "replicate", "sampler", "mps", "producer_sm_share", "task", "negatives", "negative_sampling", "decoder", "link_scores", "from_job", "ids", "embeddings", "name", "script", "args", "rdzv_endpoint", "rdzv_id")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    FANOUTS_FIELD_NUMBER: _ClassVar[int]
    RELATION_FANOUTS_FIELD_NUMBER: _ClassVar[int]
    EVAL_FANOUTS_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    HIDDEN_FIELD_NUMBER: _ClassVar[int]
    HEADS_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    LR_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    DROPOUT_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_LR_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DROPOUT_FIELD_NUMBER: _ClassVar[int]
    FEATURELESS_INIT_FIELD_NUMBER: _ClassVar[int]
    NPROC_PER_NODE_FIELD_NUMBER: _ClassVar[int]
    NNODES_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    DEVICE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    MAX_RESTARTS_FIELD_NUMBER: _ClassVar[int]
    NUM_SLOTS_FIELD_NUMBER: _ClassVar[int]
    STORAGE_READS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    ON_NONFINITE_FIELD_NUMBER: _ClassVar[int]
    FEATURES_FIELD_NUMBER: _ClassVar[int]
    REPLICATE_FIELD_NUMBER: _ClassVar[int]
    SAMPLER_FIELD_NUMBER: _ClassVar[int]
    MPS_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_SM_SHARE_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    NEGATIVES_FIELD_NUMBER: _ClassVar[int]
    NEGATIVE_SAMPLING_FIELD_NUMBER: _ClassVar[int]
    DECODER_FIELD_NUMBER: _ClassVar[int]
    LINK_SCORES_FIELD_NUMBER: _ClassVar[int]
    FROM_JOB_FIELD_NUMBER: _ClassVar[int]
    IDS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    SCRIPT_FIELD_NUMBER: _ClassVar[int]
    ARGS_FIELD_NUMBER: _ClassVar[int]
    RDZV_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    RDZV_ID_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    model: Model
    fanouts: _containers.RepeatedScalarFieldContainer[int]
    relation_fanouts: _containers.RepeatedScalarFieldContainer[str]
    eval_fanouts: _containers.RepeatedScalarFieldContainer[int]
    batch_size: int
    hidden: int
    heads: int
    epochs: int
    lr: float
    weight_decay: float
    dropout: float
    embedding_lr: float
    embedding_weight_decay: float
    embedding_dropout: float
    featureless_init: str
    nproc_per_node: int
    nnodes: int
    nodes: _containers.RepeatedScalarFieldContainer[str]
    device: Device
    checkpoint_every_steps: int
    seed: int
    budgets: _common_pb2.TierBudgetSpec
    max_restarts: int
    num_slots: int
    storage_reads: str
    window: int
    on_nonfinite: str
    features: str
    replicate: str
    sampler: str
    mps: str
    producer_sm_share: float
    task: str
    negatives: int
    negative_sampling: str
    decoder: str
    link_scores: bool
    from_job: str
    ids: str
    embeddings: str
    name: str
    script: str
    args: _containers.RepeatedScalarFieldContainer[str]
    rdzv_endpoint: str
    rdzv_id: str
    def __init__(self, dataset: _Optional[str] = ..., model: _Optional[_Union[Model, str]] = ..., fanouts: _Optional[_Iterable[int]] = ..., relation_fanouts: _Optional[_Iterable[str]] = ..., eval_fanouts: _Optional[_Iterable[int]] = ..., batch_size: _Optional[int] = ..., hidden: _Optional[int] = ..., heads: _Optional[int] = ..., epochs: _Optional[int] = ..., lr: _Optional[float] = ..., weight_decay: _Optional[float] = ..., dropout: _Optional[float] = ..., embedding_lr: _Optional[float] = ..., embedding_weight_decay: _Optional[float] = ..., embedding_dropout: _Optional[float] = ..., featureless_init: _Optional[str] = ..., nproc_per_node: _Optional[int] = ..., nnodes: _Optional[int] = ..., nodes: _Optional[_Iterable[str]] = ..., device: _Optional[_Union[Device, str]] = ..., checkpoint_every_steps: _Optional[int] = ..., seed: _Optional[int] = ..., budgets: _Optional[_Union[_common_pb2.TierBudgetSpec, _Mapping]] = ..., max_restarts: _Optional[int] = ..., num_slots: _Optional[int] = ..., storage_reads: _Optional[str] = ..., window: _Optional[int] = ..., on_nonfinite: _Optional[str] = ..., features: _Optional[str] = ..., replicate: _Optional[str] = ..., sampler: _Optional[str] = ..., mps: _Optional[str] = ..., producer_sm_share: _Optional[float] = ..., task: _Optional[str] = ..., negatives: _Optional[int] = ..., negative_sampling: _Optional[str] = ..., decoder: _Optional[str] = ..., link_scores: _Optional[bool] = ..., from_job: _Optional[str] = ..., ids: _Optional[str] = ..., embeddings: _Optional[str] = ..., name: _Optional[str] = ..., script: _Optional[str] = ..., args: _Optional[_Iterable[str]] = ..., rdzv_endpoint: _Optional[str] = ..., rdzv_id: _Optional[str] = ...) -> None: ...

class JobPlacement(_message.Message):
    __slots__ = ("nnodes", "node_rank", "rdzv_endpoint", "rdzv_id", "coordinator", "coordinator_job_id", "local_addr", "dataset_version", "peer_timeout_s", "node_addresses")
    NNODES_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    RDZV_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    RDZV_ID_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_FIELD_NUMBER: _ClassVar[int]
    COORDINATOR_JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LOCAL_ADDR_FIELD_NUMBER: _ClassVar[int]
    DATASET_VERSION_FIELD_NUMBER: _ClassVar[int]
    PEER_TIMEOUT_S_FIELD_NUMBER: _ClassVar[int]
    NODE_ADDRESSES_FIELD_NUMBER: _ClassVar[int]
    nnodes: int
    node_rank: int
    rdzv_endpoint: str
    rdzv_id: str
    coordinator: str
    coordinator_job_id: str
    local_addr: str
    dataset_version: str
    peer_timeout_s: float
    node_addresses: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, nnodes: _Optional[int] = ..., node_rank: _Optional[int] = ..., rdzv_endpoint: _Optional[str] = ..., rdzv_id: _Optional[str] = ..., coordinator: _Optional[str] = ..., coordinator_job_id: _Optional[str] = ..., local_addr: _Optional[str] = ..., dataset_version: _Optional[str] = ..., peer_timeout_s: _Optional[float] = ..., node_addresses: _Optional[_Iterable[str]] = ...) -> None: ...

class JobNode(_message.Message):
    __slots__ = ("node", "address", "node_rank", "job_id", "state", "message", "progress", "ranks", "log_path")
    NODE_FIELD_NUMBER: _ClassVar[int]
    ADDRESS_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    node: str
    address: str
    node_rank: int
    job_id: str
    state: JobState
    message: str
    progress: JobProgress
    ranks: _containers.RepeatedCompositeFieldContainer[RankStatus]
    log_path: str
    def __init__(self, node: _Optional[str] = ..., address: _Optional[str] = ..., node_rank: _Optional[int] = ..., job_id: _Optional[str] = ..., state: _Optional[_Union[JobState, str]] = ..., message: _Optional[str] = ..., progress: _Optional[_Union[JobProgress, _Mapping]] = ..., ranks: _Optional[_Iterable[_Union[RankStatus, _Mapping]]] = ..., log_path: _Optional[str] = ...) -> None: ...

class SubmitJobRequest(_message.Message):
    __slots__ = ("spec",)
    SPEC_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class AttachJobRequest(_message.Message):
    __slots__ = ("spec", "launch_id", "node_rank", "agent_pid", "launch_secret")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_ID_FIELD_NUMBER: _ClassVar[int]
    NODE_RANK_FIELD_NUMBER: _ClassVar[int]
    AGENT_PID_FIELD_NUMBER: _ClassVar[int]
    LAUNCH_SECRET_FIELD_NUMBER: _ClassVar[int]
    spec: JobSpec
    launch_id: str
    node_rank: int
    agent_pid: int
    launch_secret: str
    def __init__(self, spec: _Optional[_Union[JobSpec, _Mapping]] = ..., launch_id: _Optional[str] = ..., node_rank: _Optional[int] = ..., agent_pid: _Optional[int] = ..., launch_secret: _Optional[str] = ...) -> None: ...

class AttachJobResponse(_message.Message):
    __slots__ = ("job", "job_token")
    JOB_FIELD_NUMBER: _ClassVar[int]
    JOB_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job: Job
    job_token: str
    def __init__(self, job: _Optional[_Union[Job, _Mapping]] = ..., job_token: _Optional[str] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("states", "dataset")
    STATES_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[JobState]
    dataset: str
    def __init__(self, states: _Optional[_Iterable[_Union[JobState, str]]] = ..., dataset: _Optional[str] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[Job]
    def __init__(self, jobs: _Optional[_Iterable[_Union[Job, _Mapping]]] = ...) -> None: ...

class CancelJobRequest(_message.Message):
    __slots__ = ("job_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class StreamJobEventsRequest(_message.Message):
    __slots__ = ("job_id", "from_sequence", "follow", "include_logs", "node")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    FROM_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_LOGS_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    from_sequence: int
    follow: bool
    include_logs: bool
    node: str
    def __init__(self, job_id: _Optional[str] = ..., from_sequence: _Optional[int] = ..., follow: _Optional[bool] = ..., include_logs: _Optional[bool] = ..., node: _Optional[str] = ...) -> None: ...

class JobProgress(_message.Message):
    __slots__ = ("epoch", "step_in_epoch", "steps_per_epoch", "global_step", "total_steps", "loss", "train_accuracy", "batches_per_second", "traffic", "storage")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STEP_IN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_STEP_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    STORAGE_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    step_in_epoch: int
    steps_per_epoch: int
    global_step: int
    total_steps: int
    loss: float
    train_accuracy: float
    batches_per_second: float
    traffic: _common_pb2.TierCounters
    storage: _common_pb2.StorageCounters
    def __init__(self, epoch: _Optional[int] = ..., step_in_epoch: _Optional[int] = ..., steps_per_epoch: _Optional[int] = ..., global_step: _Optional[int] = ..., total_steps: _Optional[int] = ..., loss: _Optional[float] = ..., train_accuracy: _Optional[float] = ..., batches_per_second: _Optional[float] = ..., traffic: _Optional[_Union[_common_pb2.TierCounters, _Mapping]] = ..., storage: _Optional[_Union[_common_pb2.StorageCounters, _Mapping]] = ...) -> None: ...

class RankStatus(_message.Message):
    __slots__ = ("rank", "trainer_pid", "producer_pid", "global_step", "batches_per_second", "ready_slots", "last_report")
    RANK_FIELD_NUMBER: _ClassVar[int]
    TRAINER_PID_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_PID_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_STEP_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    READY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    LAST_REPORT_FIELD_NUMBER: _ClassVar[int]
    rank: int
    trainer_pid: int
    producer_pid: int
    global_step: int
    batches_per_second: float
    ready_slots: int
    last_report: _timestamp_pb2.Timestamp
    def __init__(self, rank: _Optional[int] = ..., trainer_pid: _Optional[int] = ..., producer_pid: _Optional[int] = ..., global_step: _Optional[int] = ..., batches_per_second: _Optional[float] = ..., ready_slots: _Optional[int] = ..., last_report: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class JobResult(_message.Message):
    __slots__ = ("val_accuracy", "test_accuracy", "final_loss", "train_seconds", "checkpoint_path", "metrics", "best")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    VAL_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    FINAL_LOSS_FIELD_NUMBER: _ClassVar[int]
    TRAIN_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_PATH_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    val_accuracy: float
    test_accuracy: float
    final_loss: float
    train_seconds: float
    checkpoint_path: str
    metrics: _containers.ScalarMap[str, float]
    best: _common_pb2.BestEvaluation
    def __init__(self, val_accuracy: _Optional[float] = ..., test_accuracy: _Optional[float] = ..., final_loss: _Optional[float] = ..., train_seconds: _Optional[float] = ..., checkpoint_path: _Optional[str] = ..., metrics: _Optional[_Mapping[str, float]] = ..., best: _Optional[_Union[_common_pb2.BestEvaluation, _Mapping]] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "spec", "state", "message", "created_at", "started_at", "finished_at", "progress", "result", "ranks", "exit_code", "restarts", "log_path", "notes", "placement", "nodes", "gpu_share", "history", "artifact", "dataset_version", "owner")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SPEC_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    RESTARTS_FIELD_NUMBER: _ClassVar[int]
    LOG_PATH_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    PLACEMENT_FIELD_NUMBER: _ClassVar[int]
    NODES_FIELD_NUMBER: _ClassVar[int]
    GPU_SHARE_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    ARTIFACT_FIELD_NUMBER: _ClassVar[int]
    DATASET_VERSION_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    spec: JobSpec
    state: JobState
    message: str
    created_at: _timestamp_pb2.Timestamp
    started_at: _timestamp_pb2.Timestamp
    finished_at: _timestamp_pb2.Timestamp
    progress: JobProgress
    result: JobResult
    ranks: _containers.RepeatedCompositeFieldContainer[RankStatus]
    exit_code: int
    restarts: int
    log_path: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    placement: JobPlacement
    nodes: _containers.RepeatedCompositeFieldContainer[JobNode]
    gpu_share: str
    history: _containers.RepeatedCompositeFieldContainer[_common_pb2.EpochRecord]
    artifact: JobArtifact
    dataset_version: str
    owner: JobOwner
    def __init__(self, job_id: _Optional[str] = ..., spec: _Optional[_Union[JobSpec, _Mapping]] = ..., state: _Optional[_Union[JobState, str]] = ..., message: _Optional[str] = ..., created_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., started_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., finished_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., progress: _Optional[_Union[JobProgress, _Mapping]] = ..., result: _Optional[_Union[JobResult, _Mapping]] = ..., ranks: _Optional[_Iterable[_Union[RankStatus, _Mapping]]] = ..., exit_code: _Optional[int] = ..., restarts: _Optional[int] = ..., log_path: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ..., placement: _Optional[_Union[JobPlacement, _Mapping]] = ..., nodes: _Optional[_Iterable[_Union[JobNode, _Mapping]]] = ..., gpu_share: _Optional[str] = ..., history: _Optional[_Iterable[_Union[_common_pb2.EpochRecord, _Mapping]]] = ..., artifact: _Optional[_Union[JobArtifact, _Mapping]] = ..., dataset_version: _Optional[str] = ..., owner: _Optional[_Union[JobOwner, _Mapping]] = ...) -> None: ...

class JobArtifact(_message.Message):
    __slots__ = ("state", "message", "bytes", "path")
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    state: str
    message: str
    bytes: int
    path: str
    def __init__(self, state: _Optional[str] = ..., message: _Optional[str] = ..., bytes: _Optional[int] = ..., path: _Optional[str] = ...) -> None: ...

class ExportJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ArtifactChunk(_message.Message):
    __slots__ = ("path", "offset", "data", "size")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    offset: int
    data: bytes
    size: int
    def __init__(self, path: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., size: _Optional[int] = ...) -> None: ...

class JobOwner(_message.Message):
    __slots__ = ("name", "uid")
    NAME_FIELD_NUMBER: _ClassVar[int]
    UID_FIELD_NUMBER: _ClassVar[int]
    name: str
    uid: int
    def __init__(self, name: _Optional[str] = ..., uid: _Optional[int] = ...) -> None: ...

class JobStateChange(_message.Message):
    __slots__ = ("previous", "current", "message", "result")
    PREVIOUS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    previous: JobState
    current: JobState
    message: str
    result: JobResult
    def __init__(self, previous: _Optional[_Union[JobState, str]] = ..., current: _Optional[_Union[JobState, str]] = ..., message: _Optional[str] = ..., result: _Optional[_Union[JobResult, _Mapping]] = ...) -> None: ...

class LogLine(_message.Message):
    __slots__ = ("rank", "from_producer", "stream", "text")
    RANK_FIELD_NUMBER: _ClassVar[int]
    FROM_PRODUCER_FIELD_NUMBER: _ClassVar[int]
    STREAM_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    rank: int
    from_producer: bool
    stream: LogStream
    text: str
    def __init__(self, rank: _Optional[int] = ..., from_producer: _Optional[bool] = ..., stream: _Optional[_Union[LogStream, str]] = ..., text: _Optional[str] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("sequence", "time", "job_id", "state_change", "progress", "log")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_CHANGE_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    LOG_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    time: _timestamp_pb2.Timestamp
    job_id: str
    state_change: JobStateChange
    progress: JobProgress
    log: LogLine
    def __init__(self, sequence: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., job_id: _Optional[str] = ..., state_change: _Optional[_Union[JobStateChange, _Mapping]] = ..., progress: _Optional[_Union[JobProgress, _Mapping]] = ..., log: _Optional[_Union[LogLine, _Mapping]] = ...) -> None: ...
