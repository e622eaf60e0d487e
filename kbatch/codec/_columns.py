"""The Kafka source's columns, written once: names and Spark SQL types.

Spark's ``spark.read.format("kafka")`` schema, the ``headers`` column it adds with
``includeHeaders``, and kbatch's extra columns. Every field is nullable. The Arrow
schema (:func:`kbatch.arrow.kafka_schema`), the Spark DDL (:func:`kbatch.arrow.spark_ddl`)
and Spark's ``StructType`` (:func:`kbatch.spark.kafka_struct`) are all built from these
tuples; nothing here imports pyarrow or pyspark.

>>> [name for name, _ in columns(include_headers=True, extra_columns=False)][-2:]
['timestampType', 'headers']
"""

from __future__ import annotations

from typing import Any, Final, Literal, Protocol, runtime_checkable

import numpy as np

__all__ = [
    "BINARY_KINDS",
    "EXTRA_COLUMNS",
    "HEADERS_COLUMN",
    "KAFKA_COLUMNS",
    "BinaryKind",
    "RecordColumns",
    "columns",
    "ddl",
]

#: Arrow type of ``key``, ``value`` and header values (header keys: the matching string type).
BinaryKind = Literal["binary", "large_binary", "binary_view"]
BINARY_KINDS: Final = ("binary", "large_binary", "binary_view")


@runtime_checkable
class RecordColumns(Protocol):
    """What the conversions of :mod:`kbatch.arrow` read of a table: :class:`kbatch.RecordTable` is one.

    A structural type, so that :mod:`kbatch.arrow` needs no import of :mod:`kbatch.codec._table`
    (which reaches :mod:`kbatch.arrow` at call time, for ``RecordTable.to_arrow`` and friends).
    """

    @property
    def records(self) -> np.ndarray: ...
    @property
    def batches(self) -> np.ndarray: ...
    @property
    def headers(self) -> np.ndarray: ...
    @property
    def data(self) -> Any: ...
    @property
    def topic(self) -> str | None: ...
    @property
    def partition(self) -> int | None: ...

#: (name, Spark SQL type) of the columns of Spark's Kafka source, in its order.
KAFKA_COLUMNS: Final = (
    ("key", "binary"),
    ("value", "binary"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("timestamp", "timestamp"),
    ("timestampType", "int"),
)
#: Added by ``includeHeaders``: a list of (key, value) structs.
HEADERS_COLUMN: Final = ("headers", "array<struct<key: string, value: binary>>")
#: kbatch's extra columns (``extra_columns=True``).
EXTRA_COLUMNS: Final = (
    ("leaderEpoch", "int"),
    ("producerId", "bigint"),
    ("producerEpoch", "smallint"),
    ("sequence", "int"),
    ("isTransactional", "boolean"),
)


def columns(*, include_headers: bool, extra_columns: bool) -> list[tuple[str, str]]:
    """(name, Spark SQL type) of every column, in order, for these options."""
    out = list(KAFKA_COLUMNS)
    if include_headers:
        out.append(HEADERS_COLUMN)
    if extra_columns:
        out += EXTRA_COLUMNS
    return out


def ddl(*, include_headers: bool, extra_columns: bool) -> str:
    """The Spark DDL string of :func:`columns`.

    >>> ddl(include_headers=False, extra_columns=False)
    'key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType int'
    """
    return ", ".join(f"{name} {kind}" for name, kind in columns(include_headers=include_headers,
                                                                 extra_columns=extra_columns))
