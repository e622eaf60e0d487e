"""Dead letters: the records whose key or value does not decode, kept raw with the reason.

The one definition both engines of ``kbatch convert --values avro`` use (the arrow engine in
process, the Spark engine in its executors' ``mapInArrow``): :func:`split` decodes a table of
kbatch's source columns and returns the good rows, typed, and the bad ones as they were read,
each with why (:func:`dead_letter_schema`); :func:`decoded_schema` is the good rows' schema,
known before any record is read (from the reader schemas alone), so a sink or a Spark plan can
be opened with it. Everything here is a module function on Arrow tables: picklable, no state.

A dead letter is the raw record (``key``, ``value`` as binary, ``topic``, ``partition``,
``offset``, ``timestamp``, ``timestampType``, and ``headers``, the root and extra columns when
the source has them) followed by:

============  ========  ===========================================================
column        type      what
============  ========  ===========================================================
column        string    ``"value"`` or ``"key"``: which one did not decode
schema_id     int32     the writer schema id the record names (null: none, unreadable)
error         string    the whole :class:`~kbatch.errors.ValueDecodeError` message
reason        string    what is wrong, without the location
path          string    where in the value: ``value``, ``value.items[2].price``, ``key``
byte          int64     the byte of the (framed) key or value where it goes wrong (null: unknown)
============  ========  ===========================================================

A record whose value and key both fail is one dead letter, the value's error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from ._decode import decode_records, resolve_reader, value_type
from ._errors import ValueDecodeError
from ._schema import Schema
from .protobuf import ProtoOptions, ProtoSchema

__all__ = ["DEAD_LETTER_COLUMNS", "dead_letter_schema", "dead_letters", "decoded_schema", "split"]

#: The columns a dead letter adds to the raw record's, in order.
DEAD_LETTER_COLUMNS = (
    pa.field("column", pa.string()),
    pa.field("schema_id", pa.int32()),
    pa.field("error", pa.string()),
    pa.field("reason", pa.string()),
    pa.field("path", pa.string()),
    pa.field("byte", pa.int64()),
)

Reader = Schema | ProtoSchema | int | str | None
OnError = Literal["dead-letter", "raise"]


def dead_letter_schema(source: pa.Schema) -> pa.Schema:
    """The Arrow schema of the dead letters of records read with ``source``'s columns.

    Parameters
    ----------
    source : pyarrow.Schema
        The raw records' columns as kbatch writes them (:func:`kbatch.arrow.kafka_schema`, with the
        root or extra columns when read).

    Returns
    -------
    pyarrow.Schema
        ``source``'s columns, then ``column``, ``schema_id``, ``error``, ``reason``, ``path``, ``byte``.

    Examples
    --------
    >>> from kbatch.arrow import kafka_schema
    >>> dead_letter_schema(kafka_schema(include_headers=False)).names[-7:]
    ['timestampType', 'column', 'schema_id', 'error', 'reason', 'path', 'byte']
    """
    clash = [f.name for f in DEAD_LETTER_COLUMNS if f.name in source.names]
    if clash:
        raise ValueError(f"the source already has the dead-letter column(s) {', '.join(clash)}")
    return pa.schema(list(source) + list(DEAD_LETTER_COLUMNS))


def decoded_schema(
    source: pa.Schema,
    *,
    values: Reader = None,
    keys: Reader = None,
    mapping: str = "spark",
    registry: Any = None,
    format: str = "auto",
    fields: Sequence[str] | None = None,
    protobuf: ProtoOptions | None = None,
) -> pa.Schema:
    """The schema of :func:`split`'s good rows, from the reader schemas alone (no record read).

    Parameters
    ----------
    source : pyarrow.Schema
        The raw records' columns.
    values, keys : Schema, ProtoSchema, int, str or None
        The reader schemas of the values and of the keys (a :class:`Schema`, an id in
        ``registry``, Avro text); ``None``: that column stays binary.
    mapping : {"spark"}
        The Arrow type mapping.
    registry : kbatch.values.Registry, optional
        Needed only for a reader given by id.
    format : {"auto", "avro", "json", "protobuf"}
        The language of readers given as text (``auto``: Avro).
    fields : sequence of str, optional
        Only these fields of the values (:func:`~kbatch.values.decode`'s projection).
    protobuf : ProtoOptions, optional
        Protobuf readers' options, as :func:`~kbatch.values.decode`'s.

    Returns
    -------
    pyarrow.Schema
        ``source`` with ``value`` (``key``) the reader's struct type, followed by
        ``value_schema_id`` (``key_schema_id``), int32.

    Examples
    --------
    >>> from kbatch.arrow import kafka_schema
    >>> s = decoded_schema(kafka_schema(include_headers=False), values='{"type": "record", "name": "r", '
    ...                    '"fields": [{"name": "a", "type": "long"}]}')
    >>> str(s.field("value").type), s.names[:3]
    ('struct<a: int64 not null>', ['key', 'value', 'value_schema_id'])
    """
    out = source
    for column, reader in (("value", values), ("key", keys)):
        if reader is None:
            continue
        field = pa.field(column, value_type(resolve_reader(registry, reader, format=format), mapping,
                                            protobuf=protobuf, fields=fields if column == "value" else None))
        at = out.get_field_index(column)
        if at < 0:
            raise ValueError(f"the source has no {column} column to decode")
        out = out.set(at, field).insert(at + 1, pa.field(f"{column}_schema_id", pa.int32()))
    return out


def split(
    raw: pa.Table | pa.RecordBatch,
    registry: Any,
    *,
    values: Reader = None,
    keys: Reader = None,
    mapping: str = "spark",
    on_error: OnError = "dead-letter",
    format: str = "auto",
    fields: Sequence[str] | None = None,
    protobuf: ProtoOptions | None = None,
) -> tuple[pa.Table, pa.Table]:
    """Decode ``raw``'s values (and keys) and part its rows into decoded ones and dead letters.

    Parameters
    ----------
    raw : pyarrow.Table or pyarrow.RecordBatch
        Records with kbatch's source columns (``value`` / ``key`` binary, ``headers``,
        ``topic``, ``partition``, ``offset``, ...).
    registry : kbatch.values.Registry or None
        Where the writer schemas are found (None: plain JSON, ``format="json"``).
    values, keys : Schema, ProtoSchema, int, str or None
        The reader schemas: ``None`` leaves that column as it is (binary, never a dead letter).
        For plain JSON, the (given or inferred) JSON Schema.
    mapping : {"spark"}
        The Arrow type mapping.
    format : {"auto", "avro", "json", "protobuf"}
        As :func:`~kbatch.values.decode`'s.
    on_error : {"dead-letter", "raise"}
        ``"raise"``: raise the :class:`ValueDecodeError` of the first record that does not
        decode instead (nothing is returned).
    fields : sequence of str, optional
        Decode only these fields of the values (:func:`~kbatch.values.decode`'s projection; the
        keys are decoded whole). A record is a dead letter when its kept fields do not decode,
        or its bytes cannot be walked (``docs/values.md``: what a skipped field still checks).
    protobuf : ProtoOptions, optional
        Protobuf readers' options (values and keys), as :func:`~kbatch.values.decode`'s.

    Returns
    -------
    (pyarrow.Table, pyarrow.Table)
        The rows that decoded, in :func:`decoded_schema`'s schema, and the rest, in
        :func:`dead_letter_schema`'s, both in ``raw``'s order. Every row of ``raw`` is in
        exactly one of them.

    Examples
    --------
    >>> import kbatch
    >>> from kbatch import values
    >>> reg = values.Registry({7: '"string"'})
    >>> raw = kbatch.decode(kbatch.encode([b"\\x00\\x00\\x00\\x00\\x07\\x06abc", b"{}"])).to_arrow()
    >>> good, dead = values.split(raw, reg, values=7)
    >>> good.column("value").to_pylist(), dead.column("reason").to_pylist()[0][:24]
    (['abc'], 'no schema registry frame')
    """
    table = pa.Table.from_batches([raw]) if isinstance(raw, pa.RecordBatch) else raw
    source = table.schema
    out = table
    bad: dict[int, tuple[str, ValueDecodeError]] = {}
    for column, reader in (("value", values), ("key", keys)):
        if reader is None:
            continue
        if registry is not None:
            reader = resolve_reader(registry, reader, format=format)
        done = decode_records(out, registry, column, reader, mapping, stop_at_first=on_error == "raise",
                              format=format, fields=fields if column == "value" else None, protobuf=protobuf)
        out = done.table
        for i, problem in done.errors.items():
            bad.setdefault(i, (column, problem))  # the value's error first: one dead letter per record
    good_schema = decoded_schema(source, values=values, keys=keys, mapping=mapping, registry=registry,
                                 format=format, fields=fields, protobuf=protobuf)
    if not bad:
        return out.cast(good_schema) if out.schema != good_schema else out, _empty(dead_letter_schema(source))
    rows = np.fromiter(sorted(bad), dtype=np.int64, count=len(bad))
    keep = np.ones(table.num_rows, dtype=bool)
    keep[rows] = False
    good = out.filter(pa.array(keep))
    if good.schema != good_schema:
        good = good.cast(good_schema)
    return good, dead_letters(table.take(pa.array(rows)), [bad[int(i)] for i in rows])


def dead_letters(raw: pa.Table, problems: list[tuple[str, ValueDecodeError]]) -> pa.Table:
    """``raw``'s rows (as read) with the dead-letter columns of ``problems``: one
    ``(column, error)`` per row, ``column`` being ``"value"`` or ``"key"``."""
    if len(problems) != raw.num_rows:
        raise ValueError(f"{raw.num_rows} rows but {len(problems)} errors")
    which = [column for column, _ in problems]
    errors = [p for _, p in problems]
    extra = [
        pa.array(which, pa.string()),
        pa.array([p.schema_id if p.schema_id >= 0 else None for p in errors], pa.int32()),
        pa.array([str(p) for p in errors], pa.string()),
        pa.array([p.reason for p in errors], pa.string()),
        pa.array([p.path for p in errors], pa.string()),
        pa.array([p.position if p.position >= 0 else None for p in errors], pa.int64()),
    ]
    out = raw
    for f, arr in zip(DEAD_LETTER_COLUMNS, extra, strict=True):
        out = out.append_column(f, arr)
    return out.cast(dead_letter_schema(raw.schema)) if out.schema != dead_letter_schema(raw.schema) else out


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()
