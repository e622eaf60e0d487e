"""Typed values in a lazy scan: one topic's reader schemas fixed before reading, the columns the
scan gives, and the decode of each batch of records it reads.

What ``LogDir.scan_records(values=registry)``, :func:`kbatch.log.scan_logs` and
:func:`kbatch.polars.scan_kafka_log` (so :func:`kbatch.duckdb.register`) reach through
:meth:`kbatch.values.Registry.scan_values` (the log layer never imports ``kbatch.values``: it
calls the registry it is given, as ``RecordTable.to_arrow(values=registry)`` does).

The choices are ``kbatch convert --values auto``'s (``docs/values.md``): the reader schema of a
topic's values is the latest version of subject ``<topic>-value`` (``<topic>-key`` for keys),
whatever its language (Avro, JSON Schema, Protobuf), laid out by Spark's type mapping
(:func:`~kbatch.values.decoded_schema`). So the output's schema is known before any record is
read (Polars' IO plug-ins and DuckDB declare it up front), and one scan decodes one topic: each
topic has its own reader schema. A decoded column ``value`` is followed by ``value_schema_id``
(the writer's id) and, with ``errors="null"``, ``value_error`` (the whole
:class:`~kbatch.errors.ValueDecodeError` message a dead letter of ``kbatch convert`` carries as
``error``); likewise ``key``.

Two narrowings reach the decoder (``docs/scans.md``):

- ``fields=`` (:func:`kbatch.polars.scan_kafka_log`'s, ``LogDir.scan_records``'): the value
  struct holds only those fields, and the decoder skips the others (the projection of
  :func:`kbatch.values.decode`); the output's schema says so before any record is read.
- a filter on value fields (a :class:`~kbatch.log._scan_values.ValueFilter`, from a Polars
  predicate): the rows read are first decoded with only the fields the filter reads, the
  filter is evaluated on that, and only the records it keeps are decoded whole (their keys
  too). A record the filter rules out is not decoded further, so a fault in one of its other
  fields is not reported (as a field a projection leaves out is not checked); with
  ``errors="raise"`` a record the narrow decode cannot read makes the batch decode whole, so the
  error raised is the one the full decode raises.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ._dead_letter import decoded_schema
from ._decode import decode, decode_records
from ._errors import ValueDecodeError
from ._reader import reader_schema, topic_subject
from ._schema import Schema
from .protobuf import ProtoSchema

__all__ = ["DECODED_COLUMNS", "ScanValues"]

#: The columns a scan can decode, in the order they are decoded (as ``records_to_arrow``'s).
DECODED_COLUMNS = ("key", "value")


class ScanValues:
    """The typed values (and keys) of one topic's scan.

    Parameters
    ----------
    topic : str
        The topic scanned: its subjects ``<topic>-value`` / ``<topic>-key`` give the reader schemas.
    source : pyarrow.Schema
        The raw columns the scan can give (:func:`kbatch.arrow.kafka_schema` with headers, in its
        ``binary`` layout).
    values, keys : kbatch.values.Registry or None
        The registries to decode the values and the keys with (None: left as bytes).
    errors : {"raise", "null"}
        As :func:`kbatch.values.decode`'s.
    fields : sequence of str, optional
        Only these fields of the values (:func:`kbatch.values.decode`'s projection).

    Raises
    ------
    SchemaNotFoundError
        The registry has no subject ``<topic>-value`` (``<topic>-key``) to lay the column out by.
    """

    def __init__(self, topic: str, source: pa.Schema, values: Any = None, keys: Any = None, *,
                 errors: str = "raise", fields: Sequence[str] | None = None) -> None:
        if errors not in ("raise", "null"):
            raise ValueError(f"errors must be 'raise' or 'null', got {errors!r}")
        if fields is not None and values is None:
            raise ValueError("fields= projects the decoded values: give values= too")
        self.topic = topic
        self.errors = errors
        #: the value fields decoded (None: all)
        self.fields = None if fields is None else list(fields)
        #: column -> (registry, reader schema) of each decoded column, in decoding order
        self.readers: dict[str, tuple[Any, Schema | ProtoSchema]] = {}
        for column, registry in zip(DECODED_COLUMNS, (keys, values), strict=True):
            if registry is not None:
                self.readers[column] = (registry, reader_schema(registry, subject=topic_subject(topic, column),
                                                                format="auto"))
        given = {c: r for c, (_, r) in self.readers.items()}
        schema = decoded_schema(source, values=given.get("value"), keys=given.get("key"), fields=self.fields)
        if errors == "null":
            for column in self.readers:
                schema = schema.insert(schema.get_field_index(f"{column}_schema_id") + 1,
                                       pa.field(f"{column}_error", pa.string()))
        #: every column the scan can give: ``source``'s with the decoded ones typed, each followed
        #: by ``<column>_schema_id`` (and ``<column>_error``)
        self.schema = schema
        #: output column -> the decoded column it comes from
        self.sources = {name: column for column in self.readers
                        for name in (column, f"{column}_schema_id", f"{column}_error") if name in schema.names}

    def decoded(self, columns: Collection[str]) -> tuple[str, ...]:
        """The columns (``"key"``, ``"value"``) to decode for the output ``columns``."""
        return tuple(c for c in self.readers if any(self.sources.get(name) == c for name in columns))

    def decode(self, table: Any, base: pa.Table, columns: Sequence[str]) -> pa.Table:
        """The output ``columns`` of ``table`` (a ``RecordTable`` whose ``topic`` and ``partition``
        are set: error messages name them): ``base`` (its other columns, one row per record)
        with the columns :meth:`decoded` names decoded into it.

        With ``errors="raise"`` the first record of ``table`` whose key or value does not decode
        raises its :class:`~kbatch.errors.ValueDecodeError` (the value's when both fail, as a
        ``kbatch convert`` dead letter names it).
        """
        out = base
        bad: dict[int, ValueDecodeError] = {}
        for column in self.decoded(columns):
            registry, reader = self.readers[column]
            fields = self.fields if column == "value" else None
            if self.errors == "null":
                out = decode(table, registry, column, reader, "null", base=out, fields=fields)
                continue
            done = decode_records(table, registry, column, reader, base=out, fields=fields)
            out = done.table
            for i, problem in done.errors.items():  # a record whose key and value both fail: the value's
                bad[i] = problem if column == "value" else bad.get(i, problem)
        if bad:
            raise bad[min(bad)]
        out = out.select(list(columns))
        want = pa.schema([self.schema.field(c) for c in columns])
        return out if out.schema == want else out.cast(want)

    def judge(self, table: Any, base: pa.Table, columns: Sequence[str], where: Any) -> np.ndarray | None:
        """The rows of ``table`` (its raw columns in ``base``) that ``where`` (a
        :class:`~kbatch.log._scan_values.ValueFilter`) keeps, judged on a decode of only its
        fields; None when it judges none here and every row is to be decoded whole: the output
        ``columns`` decode no value, the filter's fields are all the decode would give, or a
        record does not decode with ``errors="raise"`` (the full decode raises its error).
        """
        if "value" not in self.decoded(columns):
            return None
        registry, reader = self.readers["value"]
        narrow = list(where.fields)
        given = self.fields if self.fields is not None else self.schema.field("value").type.names
        if not set(narrow) <= set(given) or set(narrow) == set(given):
            return None  # (a field the output leaves out: Polars says so itself; or nothing to save)
        # the fields after the last one it reads are not walked: a record it rules out is not
        # checked further, one it keeps is decoded whole after
        done = decode_records(table, registry, "value", reader, base=base, fields=narrow, walk_tail=False)
        if done.errors and self.errors == "raise":
            return None
        return np.asarray(where(done.table), dtype=np.bool_)
