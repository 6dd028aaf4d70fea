import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from graphtier.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Reporter(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    REPORTER_UNSPECIFIED: _ClassVar[Reporter]
    REPORTER_TRAINER: _ClassVar[Reporter]
    REPORTER_PRODUCER: _ClassVar[Reporter]

class Phase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_UNSPECIFIED: _ClassVar[Phase]
    PHASE_TRAIN: _ClassVar[Phase]
    PHASE_EVAL: _ClassVar[Phase]
    PHASE_DONE: _ClassVar[Phase]
    PHASE_INFER: _ClassVar[Phase]
REPORTER_UNSPECIFIED: Reporter
REPORTER_TRAINER: Reporter
REPORTER_PRODUCER: Reporter
PHASE_UNSPECIFIED: Phase
PHASE_TRAIN: Phase
PHASE_EVAL: Phase
PHASE_DONE: Phase
PHASE_INFER: Phase

class TrainerProgress(_message.Message):
    __slots__ = ("phase", "epoch", "step_in_epoch", "global_step", "loss", "accuracy", "batches_per_second", "data_wait_seconds_total", "train_seconds_total", "steps_total", "val_accuracy", "test_accuracy", "model_bytes", "eval_metrics", "best", "last_epoch", "steps_per_epoch", "total_steps")
    class EvalMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    PHASE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    STEP_IN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    GLOBAL_STEP_FIELD_NUMBER: _ClassVar[int]
    LOSS_FIELD_NUMBER: _ClassVar[int]
    ACCURACY_FIELD_NUMBER: _ClassVar[int]
    BATCHES_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    DATA_WAIT_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TRAIN_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    STEPS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    VAL_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    TEST_ACCURACY_FIELD_NUMBER: _ClassVar[int]
    MODEL_BYTES_FIELD_NUMBER: _ClassVar[int]
    EVAL_METRICS_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    LAST_EPOCH_FIELD_NUMBER: _ClassVar[int]
    STEPS_PER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_STEPS_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    epoch: int
    step_in_epoch: int
    global_step: int
    loss: float
    accuracy: float
    batches_per_second: float
    data_wait_seconds_total: float
    train_seconds_total: float
    steps_total: int
    val_accuracy: float
    test_accuracy: float
    model_bytes: int
    eval_metrics: _containers.ScalarMap[str, float]
    best: _common_pb2.BestEvaluation
    last_epoch: _common_pb2.EpochRecord
    steps_per_epoch: int
    total_steps: int
    def __init__(self, phase: _Optional[_Union[Phase, str]] = ..., epoch: _Optional[int] = ..., step_in_epoch: _Optional[int] = ..., global_step: _Optional[int] = ..., loss: _Optional[float] = ..., accuracy: _Optional[float] = ..., batches_per_second: _Optional[float] = ..., data_wait_seconds_total: _Optional[float] = ..., train_seconds_total: _Optional[float] = ..., steps_total: _Optional[int] = ..., val_accuracy: _Optional[float] = ..., test_accuracy: _Optional[float] = ..., model_bytes: _Optional[int] = ..., eval_metrics: _Optional[_Mapping[str, float]] = ..., best: _Optional[_Union[_common_pb2.BestEvaluation, _Mapping]] = ..., last_epoch: _Optional[_Union[_common_pb2.EpochRecord, _Mapping]] = ..., steps_per_epoch: _Optional[int] = ..., total_steps: _Optional[int] = ...) -> None: ...

class ProducerProgress(_message.Message):
    __slots__ = ("epoch", "batches_total", "seeds_total", "sampled_nodes_total", "sampled_edges_total", "sample_seconds_total", "gather_seconds_total", "wait_seconds_total", "traffic", "ready_slots", "lag_batches", "slot_grows_total")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    BATCHES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SEEDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_NODES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_EDGES_TOTAL_FIELD_NUMBER: _ClassVar[int]
    SAMPLE_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    GATHER_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    WAIT_SECONDS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    TRAFFIC_FIELD_NUMBER: _ClassVar[int]
    READY_SLOTS_FIELD_NUMBER: _ClassVar[int]
    LAG_BATCHES_FIELD_NUMBER: _ClassVar[int]
    SLOT_GROWS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    batches_total: int
    seeds_total: int
    sampled_nodes_total: int
    sampled_edges_total: int
    sample_seconds_total: float
    gather_seconds_total: float
    wait_seconds_total: float
    traffic: _common_pb2.TierCounters
    ready_slots: int
    lag_batches: int
    slot_grows_total: int
    def __init__(self, epoch: _Optional[int] = ..., batches_total: _Optional[int] = ..., seeds_total: _Optional[int] = ..., sampled_nodes_total: _Optional[int] = ..., sampled_edges_total: _Optional[int] = ..., sample_seconds_total: _Optional[float] = ..., gather_seconds_total: _Optional[float] = ..., wait_seconds_total: _Optional[float] = ..., traffic: _Optional[_Union[_common_pb2.TierCounters, _Mapping]] = ..., ready_slots: _Optional[int] = ..., lag_batches: _Optional[int] = ..., slot_grows_total: _Optional[int] = ...) -> None: ...

class ProgressReport(_message.Message):
    __slots__ = ("job_id", "rank", "reporter", "pid", "time", "trainer", "producer")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    REPORTER_FIELD_NUMBER: _ClassVar[int]
    PID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    TRAINER_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    rank: int
    reporter: Reporter
    pid: int
    time: _timestamp_pb2.Timestamp
    trainer: TrainerProgress
    producer: ProducerProgress
    def __init__(self, job_id: _Optional[str] = ..., rank: _Optional[int] = ..., reporter: _Optional[_Union[Reporter, str]] = ..., pid: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., trainer: _Optional[_Union[TrainerProgress, _Mapping]] = ..., producer: _Optional[_Union[ProducerProgress, _Mapping]] = ...) -> None: ...

class ProgressAck(_message.Message):
    __slots__ = ("cancel_requested",)
    CANCEL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    cancel_requested: bool
    def __init__(self, cancel_requested: _Optional[bool] = ...) -> None: ...
