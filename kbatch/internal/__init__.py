"""Kafka's own state as tables: internal topics, KRaft metadata, producer snapshots.

Every ``log.dirs`` root holds Kafka's state beside the user's data:
``__consumer_offsets``, ``__transaction_state``, ``__share_group_state``,
``__cluster_metadata``, ``__remote_log_metadata``. Their records' keys and
values are Kafka messages; kbatch ships their definitions
(``kbatch/internal/definitions/``, Kafka's JSON format, loadable with
:meth:`kbatch.protocol.Schema.from_directory`) and decodes them the way the
broker does.

Decoding one record: :func:`decode_key_value` (``family`` from
:data:`FAMILIES`) returns a :class:`DecodedRecord` with the schema names,
versions and dicts; :func:`iter_decoded` does it for every record of a
:class:`kbatch.RecordTable`. An unknown record type or version raises
:class:`InternalRecordError` naming the offset, or, with
``on_unknown="raw"``, keeps the bytes. :class:`Registry` wraps other
definitions (a broker's own).

>>> from kbatch import internal
>>> key = bytes.fromhex("0001 0001 67 0001 74 00000000")
>>> internal.decode_key_value("__consumer_offsets", key, None).key
{'group': 'g', 'topic': 't', 'partition': 0}
"""

from ._errors import InternalRecordError
from ._groups import consumer_groups
from ._iterate import Entry, iter_decoded
from ._metadata import IMAGE_TABLES, cluster_metadata
from ._offsets import consumer_offsets
from ._producers import directories as directories
from ._producers import producer_snapshots
from ._records import (
    CONTROL_TYPES,
    DEFINITIONS,
    FAMILIES,
    DecodedRecord,
    Registry,
    decode_control_value,
    decode_key_value,
    default_registry,
    encode_key_value,
    family_of,
)
from ._sources import partitions as partitions
from ._transactions import TRANSACTION_STATES, transactions

__all__ = [
    "CONTROL_TYPES",
    "DEFINITIONS",
    "FAMILIES",
    "IMAGE_TABLES",
    "DecodedRecord",
    "Entry",
    "InternalRecordError",
    "Registry",
    "TRANSACTION_STATES",
    "consumer_groups",
    "cluster_metadata",
    "consumer_offsets",
    "producer_snapshots",
    "transactions",
    "decode_control_value",
    "decode_key_value",
    "default_registry",
    "encode_key_value",
    "family_of",
    "iter_decoded",
]
