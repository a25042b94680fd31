from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AcknowledgeType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ACKNOWLEDGE_TYPE_ACCEPT: _ClassVar[AcknowledgeType]
    ACKNOWLEDGE_TYPE_RELEASE: _ClassVar[AcknowledgeType]
    ACKNOWLEDGE_TYPE_REJECT: _ClassVar[AcknowledgeType]
ACKNOWLEDGE_TYPE_ACCEPT: AcknowledgeType
ACKNOWLEDGE_TYPE_RELEASE: AcknowledgeType
ACKNOWLEDGE_TYPE_REJECT: AcknowledgeType

class Header(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: bytes
    def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...

class Record(_message.Message):
    __slots__ = ("key", "value", "headers", "partition", "timestamp_ms")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    partition: int
    timestamp_ms: int
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., partition: _Optional[int] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class ProduceRequest(_message.Message):
    __slots__ = ("topic", "records", "request_id")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    topic: str
    records: _containers.RepeatedCompositeFieldContainer[Record]
    request_id: int
    def __init__(self, topic: _Optional[str] = ..., records: _Optional[_Iterable[_Union[Record, _Mapping]]] = ..., request_id: _Optional[int] = ...) -> None: ...

class RecordResult(_message.Message):
    __slots__ = ("partition", "offset", "error_code", "error_message")
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    partition: int
    offset: int
    error_code: int
    error_message: str
    def __init__(self, partition: _Optional[int] = ..., offset: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ProduceResponse(_message.Message):
    __slots__ = ("request_id", "results", "status_code", "status_message")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    STATUS_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    request_id: int
    results: _containers.RepeatedCompositeFieldContainer[RecordResult]
    status_code: int
    status_message: str
    def __init__(self, request_id: _Optional[int] = ..., results: _Optional[_Iterable[_Union[RecordResult, _Mapping]]] = ..., status_code: _Optional[int] = ..., status_message: _Optional[str] = ...) -> None: ...

class ConsumeRequest(_message.Message):
    __slots__ = ("group_id", "topics", "auto_offset_reset", "auto_commit", "max_records")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    AUTO_OFFSET_RESET_FIELD_NUMBER: _ClassVar[int]
    AUTO_COMMIT_FIELD_NUMBER: _ClassVar[int]
    MAX_RECORDS_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    auto_offset_reset: str
    auto_commit: bool
    max_records: int
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., auto_offset_reset: _Optional[str] = ..., auto_commit: _Optional[bool] = ..., max_records: _Optional[int] = ...) -> None: ...

class ConsumedRecord(_message.Message):
    __slots__ = ("topic", "partition", "offset", "key", "value", "headers", "timestamp_ms")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    timestamp_ms: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class ConsumeResponse(_message.Message):
    __slots__ = ("session_id", "records")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    records: _containers.RepeatedCompositeFieldContainer[ConsumedRecord]
    def __init__(self, session_id: _Optional[str] = ..., records: _Optional[_Iterable[_Union[ConsumedRecord, _Mapping]]] = ...) -> None: ...

class TopicPartitionOffset(_message.Message):
    __slots__ = ("topic", "partition", "offset")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    offset: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ...) -> None: ...

class CommitRequest(_message.Message):
    __slots__ = ("session_id", "offsets")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    offsets: _containers.RepeatedCompositeFieldContainer[TopicPartitionOffset]
    def __init__(self, session_id: _Optional[str] = ..., offsets: _Optional[_Iterable[_Union[TopicPartitionOffset, _Mapping]]] = ...) -> None: ...

class CommitResponse(_message.Message):
    __slots__ = ("offsets",)
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    offsets: _containers.RepeatedCompositeFieldContainer[TopicPartitionOffset]
    def __init__(self, offsets: _Optional[_Iterable[_Union[TopicPartitionOffset, _Mapping]]] = ...) -> None: ...

class ListTopicsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class TopicInfo(_message.Message):
    __slots__ = ("name", "partitions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    partitions: int
    def __init__(self, name: _Optional[str] = ..., partitions: _Optional[int] = ...) -> None: ...

class ListTopicsResponse(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicInfo]
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicInfo, _Mapping]]] = ...) -> None: ...

class ShareConsumeRequest(_message.Message):
    __slots__ = ("group_id", "topics", "max_in_flight")
    GROUP_ID_FIELD_NUMBER: _ClassVar[int]
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    MAX_IN_FLIGHT_FIELD_NUMBER: _ClassVar[int]
    group_id: str
    topics: _containers.RepeatedScalarFieldContainer[str]
    max_in_flight: int
    def __init__(self, group_id: _Optional[str] = ..., topics: _Optional[_Iterable[str]] = ..., max_in_flight: _Optional[int] = ...) -> None: ...

class SharedRecord(_message.Message):
    __slots__ = ("id", "topic", "partition", "offset", "delivery_count", "lock_deadline_ms", "key", "value", "headers", "timestamp_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DELIVERY_COUNT_FIELD_NUMBER: _ClassVar[int]
    LOCK_DEADLINE_MS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    id: str
    topic: str
    partition: int
    offset: int
    delivery_count: int
    lock_deadline_ms: int
    key: bytes
    value: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    timestamp_ms: int
    def __init__(self, id: _Optional[str] = ..., topic: _Optional[str] = ..., partition: _Optional[int] = ..., offset: _Optional[int] = ..., delivery_count: _Optional[int] = ..., lock_deadline_ms: _Optional[int] = ..., key: _Optional[bytes] = ..., value: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class ShareConsumeResponse(_message.Message):
    __slots__ = ("session_id", "records")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RECORDS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    records: _containers.RepeatedCompositeFieldContainer[SharedRecord]
    def __init__(self, session_id: _Optional[str] = ..., records: _Optional[_Iterable[_Union[SharedRecord, _Mapping]]] = ...) -> None: ...

class Acknowledgement(_message.Message):
    __slots__ = ("id", "type")
    ID_FIELD_NUMBER: _ClassVar[int]
    TYPE_FIELD_NUMBER: _ClassVar[int]
    id: str
    type: AcknowledgeType
    def __init__(self, id: _Optional[str] = ..., type: _Optional[_Union[AcknowledgeType, str]] = ...) -> None: ...

class AcknowledgeRequest(_message.Message):
    __slots__ = ("session_id", "acknowledgements")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    ACKNOWLEDGEMENTS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    acknowledgements: _containers.RepeatedCompositeFieldContainer[Acknowledgement]
    def __init__(self, session_id: _Optional[str] = ..., acknowledgements: _Optional[_Iterable[_Union[Acknowledgement, _Mapping]]] = ...) -> None: ...

class AcknowledgeResponse(_message.Message):
    __slots__ = ("acknowledgements",)
    ACKNOWLEDGEMENTS_FIELD_NUMBER: _ClassVar[int]
    acknowledgements: _containers.RepeatedCompositeFieldContainer[Acknowledgement]
    def __init__(self, acknowledgements: _Optional[_Iterable[_Union[Acknowledgement, _Mapping]]] = ...) -> None: ...
