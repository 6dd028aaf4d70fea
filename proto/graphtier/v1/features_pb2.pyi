from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class FetchRowsRequest(_message.Message):
    __slots__ = ("dataset", "version", "nnodes", "owner_rank", "replicated_rows", "rows", "node_type")
    DATASET_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    NNODES_FIELD_NUMBER: _ClassVar[int]
    OWNER_RANK_FIELD_NUMBER: _ClassVar[int]
    REPLICATED_ROWS_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    NODE_TYPE_FIELD_NUMBER: _ClassVar[int]
    dataset: str
    version: str
    nnodes: int
    owner_rank: int
    replicated_rows: int
    rows: _containers.RepeatedScalarFieldContainer[int]
    node_type: str
    def __init__(self, dataset: _Optional[str] = ..., version: _Optional[str] = ..., nnodes: _Optional[int] = ..., owner_rank: _Optional[int] = ..., replicated_rows: _Optional[int] = ..., rows: _Optional[_Iterable[int]] = ..., node_type: _Optional[str] = ...) -> None: ...

class FetchRowsResponse(_message.Message):
    __slots__ = ("row_bytes", "data")
    ROW_BYTES_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    row_bytes: int
    data: bytes
    def __init__(self, row_bytes: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...
