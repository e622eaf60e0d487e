"""Kafka protocol messages, encoded and decoded from Kafka's JSON definitions.

``kbatch.protocol`` compiles each message definition (Kafka's own JSON format,
comments allowed) into a specialised decoder and encoder per version: Python
source generated once per (message, version), with every length checked
against the end of the input before it is used. Messages are plain dicts;
``records`` fields are zero-copy :class:`Records` views (buffers themselves)
whose ``.decode()`` hands them to :func:`kbatch.decode`; arrays whose structs
have ``mapKey`` fields decode to :class:`KeyedList` (a list with lookup by
key). Two C kernels (``kbatch/protocol/_kernel.pyx``) decode and encode arrays
of flat structs (Metadata topics and partitions, Fetch partitions, ...) and
hand anything unusual back to the generated Python; with
``KBATCH_PROTOCOL_PURE=1`` in the environment everything runs in the
generated Python, with the same results and the same errors.

Public API: :func:`default_schema` (kbatch's own definitions of ApiVersions,
Metadata, Produce, Fetch, ListOffsets, InitProducerId, AddPartitionsToTxn,
EndTxn and FindCoordinator), :meth:`Schema.from_directory` (any directory of
Kafka's definition files), :class:`Message` (``encode``, ``encode_parts``,
``decode``, ``decode_from``), :class:`Records`, :class:`KeyedList`,
request/response framing with headers
(:func:`encode_request`, :func:`decode_response`, ...), a small blocking
:class:`Connection`, and :class:`ProtocolError`.

>>> from kbatch import protocol
>>> schema = protocol.default_schema()
>>> req = schema.request("ListOffsets")
>>> msg = {"replica_id": -1, "topics": [{"name": "t", "partitions": [
...     {"partition_index": 0, "timestamp": -1}]}]}
>>> req.decode(req.encode(msg, version=1), version=1)["topics"][0]["partitions"]
[{'partition_index': 0, 'timestamp': -1}]
"""

from ._connection import Connection
from ._errors import ProtocolError
from ._json import KafkaJson as KafkaJson
from ._json import kafka_uuid as kafka_uuid
from ._json import message_json as message_json
from ._keyed import KeyedList
from ._message import (
    Message,
    Schema,
    decode_request,
    decode_response,
    default_schema,
    encode_request,
    encode_request_parts,
    encode_response,
)
from ._records import Records
from ._schema import MessageSpec, parse_message

__all__ = [
    "Connection",
    "KeyedList",
    "Message",
    "MessageSpec",
    "ProtocolError",
    "Records",
    "Schema",
    "decode_request",
    "decode_response",
    "default_schema",
    "encode_request",
    "encode_request_parts",
    "encode_response",
    "parse_message",
]
