"""``decode``: a table's framed Avro or Protobuf values (or keys) as a typed Arrow struct column.

The steps: the frames (:func:`~kbatch.values.frames`: each record's writer schema id and body);
the reader schema (named, or the subject's latest, or the newest writer met); one program per
writer id (:class:`~kbatch.values._avro_compile.AvroProgram`, cached per reader schema for
the process); the kernel over the whole table with the GIL released; the kernel's buffers
handed to Arrow without a copy. A record that does not decode (no frame, unknown id, a bad
body) raises :class:`ValueDecodeError`, or with ``errors="null"`` is a null value with its
message in ``<column>_error``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ._arrow_build import build_array
from ._avro_compile import AvroProgram
from ._avro_layout import Layout
from ._avro_schema import parse_avro_schema
from ._avrokernel import ERRORS, OPS, run
from ._errors import AvroSchemaError, SchemaNotFoundError, ValueDecodeError, field_path
from ._framing import Framing, frames, parse_frames, schema_id_header
from ._proto_decode import ProtoOptions, is_protobuf, run_protobuf
from ._proto_schema import ProtoSchema
from ._schema import Schema

__all__ = ["MAX_ITEMS", "Decoded", "decode", "decode_records", "reader_program", "resolve_reader"]

Errors = Literal["raise", "null"]
#: Items (of a type written in no bytes, such as null) one array or map may hold.
MAX_ITEMS = 1 << 24
_PROGRAMS: OrderedDict[tuple[Any, ...], AvroProgram] = OrderedDict()
_PROGRAMS_SIZE = 32
_LOCK = threading.Lock()


def decode(
    table: Any,
    registry: Any,
    column: str = "value",
    reader_schema: Schema | ProtoSchema | int | str | None = None,
    errors: Errors = "raise",
    mapping: str = "spark",
    *,
    framing: Framing = "confluent",
    schema_id: int = -1,
    max_items: int = MAX_ITEMS,
    protobuf: ProtoOptions | None = None,
) -> pa.Table:
    """Decode a table's Avro or Protobuf values (or keys) into a typed struct column.

    Parameters
    ----------
    table : kbatch.RecordTable or pyarrow.Table
        Records as kbatch gives them: a ``RecordTable``, or an Arrow table with kbatch's
        columns (``value`` / ``key`` binary, and ``headers``, ``offset``, ``partition``,
        ``topic`` when present).
    registry : kbatch.values.Registry
        Where writer schemas are found by id (or GUID).
    column : {"value", "key"}
        What to decode.
    reader_schema : Schema, ProtoSchema, int, str or None
        The output's layout: a :class:`Schema` (Avro or Protobuf: its ``schema_type`` picks the
        decoder), a compiled :class:`ProtoSchema`, a schema id, or Avro schema text. By default
        the latest version of the writers' subject (when the registry knows it), else the
        writer schema with the highest id in the table.
    errors : {"raise", "null"}
        ``"raise"``: :class:`ValueDecodeError` for the first record that does not decode,
        naming its offset, partition, schema id, field path and byte. ``"null"``: such a
        record's value is null and a ``<column>_error`` string column says why.
    mapping : {"spark"}
        The Arrow types (Spark's ``from_avro``; see :mod:`kbatch.values._avro_layout`).
    framing : {"confluent", "raw"}
        ``"raw"``: the values have no frame and are written with ``schema_id`` (whose schema
        then also lays out the output unless ``reader_schema`` is given).
    schema_id : int
        With ``framing="raw"``: the writer schema's id.
    max_items : int
        The most items an array or map of zero-byte items (nulls, empty records) may hold.
    protobuf : ProtoOptions, optional
        For Protobuf values (the reader schema's ``schemaType`` is ``PROTOBUF``, or a
        :class:`ProtoSchema`): Spark's ``from_protobuf`` options (``emit_default_values``,
        ``enums_as_ints``, ``recursive_depth``) and the message to decode.

    Returns
    -------
    pyarrow.Table
        The table's columns with ``<column>`` replaced by the decoded struct (the reader
        schema's type; null for a null value), then ``<column>_schema_id`` (int32, the writer
        schema id; null where the value names none) and, with ``errors="null"``,
        ``<column>_error``.
    """
    if errors not in ("raise", "null"):
        raise ValueError(f"errors must be 'raise' or 'null', got {errors!r}")
    done = decode_records(table, registry, column, reader_schema, mapping, stop_at_first=errors == "raise",
                          framing=framing, schema_id=schema_id, max_items=max_items, protobuf=protobuf)
    out = done.table
    if errors == "null":
        text: list[str | None] = [None] * out.num_rows
        for i, problem in done.errors.items():
            text[i] = str(problem)
        at_col = out.schema.get_field_index(f"{column}_schema_id")
        out = out.add_column(at_col + 1, f"{column}_error", pa.array(text, type=pa.string()))
    return out


class Decoded(NamedTuple):
    """What :func:`decode_records` gives: the decoded table and every record's error."""

    #: the table's columns with ``<column>`` the decoded struct (null where it failed), then
    #: ``<column>_schema_id``
    table: pa.Table
    #: row index -> why that record did not decode (the structured error, not its text)
    errors: dict[int, ValueDecodeError]


def decode_records(
    table: Any,
    registry: Any,
    column: str = "value",
    reader_schema: Schema | ProtoSchema | int | str | None = None,
    mapping: str = "spark",
    *,
    stop_at_first: bool = False,
    framing: Framing = "confluent",
    schema_id: int = -1,
    max_items: int = MAX_ITEMS,
    protobuf: ProtoOptions | None = None,
) -> Decoded:
    """:func:`decode`'s work, with every record's :class:`ValueDecodeError` returned, not raised.

    The one decoding path of :func:`decode` (``errors="raise"`` / ``"null"``) and of
    :func:`kbatch.values.split` (good rows and dead letters). ``stop_at_first``: the kernel stops
    at the first bad record, which is then raised (``errors="raise"``); otherwise every bad record
    is a null value and an entry in :attr:`Decoded.errors`. Parameters as :func:`decode`'s.
    """
    if column not in ("value", "key"):
        raise ValueError(f"column must be 'value' or 'key', got {column!r}")
    source = _Source(table, column, framing, schema_id)
    f = source.frames
    n = len(f)
    ids = f.schema_id.copy()
    live = (f.error == 0) & (f.length >= 0)
    by_id = live & (ids >= 0)
    met_ids = ids[by_id]
    one = len(met_ids) and met_ids.min() == met_ids.max()  # one writer: the common case, no sort
    distinct = [int(met_ids[0])] if one else np.unique(met_ids).tolist()
    writers: dict[int, Schema] = {}
    unknown: dict[int, str] = {}
    for i in distinct:
        try:
            writers[i] = registry.schema(i)
        except SchemaNotFoundError as exc:
            unknown[i] = f"unknown schema id {i}: {exc}"
    # schemas named by GUID (the 0x01 framings): compiled apart, their id shown when known
    by_guid: list[Schema | None] = []
    guid_unknown: dict[int, str] = {}
    for k, g in enumerate(f.guids):
        try:
            by_guid.append(registry.schema_by_guid(g))
        except SchemaNotFoundError as exc:
            by_guid.append(None)
            guid_unknown[k] = f"unknown schema GUID {g}: {exc}"
    named = live & (f.guid_index >= 0)
    if f.guids:
        guid_ids = np.array([-1 if s is None else _id_of(s) for s in by_guid], dtype=np.int32)
        ids[named] = guid_ids[f.guid_index[named]]
    met = {**writers, **{-2 - k: s for k, s in enumerate(by_guid) if s is not None}}
    reader = resolve_reader(registry, reader_schema, met)
    data = _as_uint8(f.data)
    kernel_errors: dict[int, ValueDecodeError] = {}
    layout: Layout
    if is_protobuf(reader):
        writer_key = np.where(by_id & ~np.isin(ids, list(unknown)), ids, -1).astype(np.int64)
        if f.guids:
            known = np.array([s is not None for s in by_guid], dtype=bool)
            guided = named & known[np.maximum(f.guid_index, 0)]
            writer_key[guided] = -2 - f.guid_index[guided].astype(np.int64)
        done_pb = run_protobuf(reader, protobuf or ProtoOptions(), data, f.start, f.length, writer_key, met,
                               column, stop_at_first, indexed=framing == "confluent")
        layout, columns = done_pb.program.layout, done_pb.columns
        for i, (reason, path, position) in done_pb.errors.items():
            frame = int(f.start[i] - source.raw_start[i])
            kernel_errors[i] = ValueDecodeError(reason, offset=source.offset(i), partition=source.partition(i),
                                                topic=source.topic(i), schema_id=int(ids[i]), path=path,
                                                position=position + frame if position >= 0 else -1)
        entry = np.where(writer_key != -1, 0, -1).astype(np.int32)
    else:
        program = reader_program(reader, mapping)
        entry = np.full(n, -1, dtype=np.int32)
        with _LOCK:
            pcs = {i: program.add_writer_schema(w) for i, w in writers.items()}
            guid_pcs = [-1 if s is None else program.add_writer_schema(s) for s in by_guid]
            prog, aux, consts, coldesc = program.arrays()
        if f.guids:
            entry[named] = np.array(guid_pcs, dtype=np.int32)[f.guid_index[named]]
        ids_by_id = np.where(by_id, ids, -1)
        if pcs:
            keys = np.array(sorted(pcs), dtype=np.int64)
            values = np.array([pcs[k] for k in sorted(pcs)], dtype=np.int32)
            at = np.searchsorted(keys, ids_by_id)
            hit = by_id & (at < len(keys)) & (keys[np.minimum(at, len(keys) - 1)] == ids_by_id)
            entry[hit] = values[at[hit]]
        starts = np.where(entry >= 0, f.start, 0).astype(np.int64)
        lengths = np.where(entry >= 0, f.length, 0).astype(np.int64)
        columns, kerrors, _ = run(prog, aux, consts, coldesc, data, starts, lengths, entry, program.null_entry,
                                     stop_at_first, max_items)

        layout = program.layout
        for row in kerrors:
            i = int(row["record"])
            kernel_errors[i] = _kernel_error(program, row, column, source, i, int(ids[i]),
                                             int(f.start[i] - source.raw_start[i]))
    # every error, by record: framing, unknown ids, then the kernel's
    messages: dict[int, ValueDecodeError] = {}
    for i in np.flatnonzero(f.error).tolist():
        messages[i] = f.error_at(i, offset=source.offset(i), partition=source.partition(i), topic=source.topic(i))
    if unknown:
        for i in np.flatnonzero(by_id & np.isin(ids, list(unknown))).tolist():
            messages[i] = ValueDecodeError(unknown[int(ids[i])], offset=source.offset(i),
                                           partition=source.partition(i), topic=source.topic(i),
                                           schema_id=int(ids[i]), path=column,
                                           position=1 if f.start[i] > source.raw_start[i] else -1)
    for k, message in guid_unknown.items():
        for i in np.flatnonzero(named & (f.guid_index == k)).tolist():
            messages[i] = ValueDecodeError(message, offset=source.offset(i), partition=source.partition(i),
                                           topic=source.topic(i), path=column)
    for i in np.flatnonzero(live & (entry < 0)).tolist():  # never a value silently lost
        messages.setdefault(i, ValueDecodeError("no schema for this value", offset=source.offset(i),
                                                partition=source.partition(i), topic=source.topic(i),
                                                path=column))
    messages.update(kernel_errors)
    if stop_at_first and messages:
        raise messages[min(messages)]
    value = build_array(layout, columns)
    schema_ids = pa.array(ids, type=pa.int32(), mask=ids < 0 if framing == "confluent" else np.ones(n, bool))
    out = source.base
    at_col = out.schema.get_field_index(column)
    if at_col >= 0:
        out = out.set_column(at_col, column, value)
    else:
        at_col = out.num_columns
        out = out.append_column(column, value)
    out = out.add_column(at_col + 1, f"{column}_schema_id", schema_ids)
    return Decoded(out, messages)




def _id_of(schema: Schema) -> int:
    return -1 if schema.id is None else int(schema.id)


def _as_uint8(data: Any) -> npt.NDArray[np.uint8]:
    view = memoryview(data).cast("B")
    return np.frombuffer(view, dtype=np.uint8) if len(view) else np.zeros(1, np.uint8)


def resolve_reader(registry: Any, reader_schema: Schema | ProtoSchema | int | str | None,
                   writers: dict[int, Schema] | None = None) -> Any:
    """The reader schema a decode lays its output out by: ``reader_schema`` (a :class:`Schema`, an
    id looked up in ``registry``, Avro text), else the latest version of the one subject of
    ``writers`` (the writer schemas met, by id), else the newest writer."""
    if isinstance(reader_schema, (Schema, ProtoSchema)):
        return reader_schema
    if isinstance(reader_schema, bool):
        raise TypeError("reader_schema must be a Schema, a schema id or schema text")
    if isinstance(reader_schema, int):
        return registry.schema(reader_schema)
    if isinstance(reader_schema, str):
        return Schema(reader_schema)
    if reader_schema is not None:
        raise TypeError(f"reader_schema must be a Schema, a schema id or schema text, "
                        f"got {type(reader_schema).__name__}")
    if not writers:
        raise AvroSchemaError("no writer schema in the table to lay the output out by: name a reader_schema")
    subjects = {w.subject for w in writers.values() if w.subject}
    if len(subjects) == 1:
        try:
            return registry.latest(subjects.pop())
        except SchemaNotFoundError:
            pass
    return writers[max(writers)]


def reader_program(reader: Schema, mapping: str) -> AvroProgram:
    """The compiled program of ``reader`` (writers are added to it as met), cached per process."""
    key = (reader.text, tuple((name, s.text) for name, s in reader.dependencies), mapping)
    with _LOCK:
        program = _PROGRAMS.get(key)
        if program is not None:
            _PROGRAMS.move_to_end(key)
            return program
    program = AvroProgram(parse_avro_schema(reader), mapping)
    with _LOCK:
        _PROGRAMS[key] = program
        while len(_PROGRAMS) > _PROGRAMS_SIZE:
            _PROGRAMS.popitem(last=False)
    return program


def _kernel_error(program: AvroProgram, row: Any, column: str, source: _Source, i: int, schema_id: int,
                  frame: int) -> ValueDecodeError:
    code, pc_, detail = int(row["code"]), int(row["pc"]), int(row["detail"])
    ins = program.code[pc_] if 0 <= pc_ < len(program.code) else [0, 0, 0, 0]
    reason = ERRORS.get(code, f"error {code}")
    if reason.startswith("cannot resolve"):
        reason = f"{reason}: {program.messages[detail]}" if 0 <= detail < len(program.messages) else reason
    elif reason.startswith("union"):
        count = 2 if ins[0] == OPS["NULLABLE"] else ins[1]
        reason = f"{reason}: index {detail}, the writer's union has {count} branches"
    elif reason.startswith("enum symbol index"):
        reason = f"{reason}: index {detail}, the writer's enum has {ins[3]} symbols"
    elif reason.startswith("truncated"):
        reason = f"{reason}: {detail} bytes wanted, fewer left" if detail > 0 else reason
    elif detail:
        reason = f"{reason} ({detail})"
    path = program.paths[pc_] if 0 <= pc_ < len(program.paths) else "value"
    path = field_path(path, [int(x) for x in row["index"] if x >= 0], column)
    position = int(row["position"])
    return ValueDecodeError(reason, offset=source.offset(i), partition=source.partition(i), topic=source.topic(i),
                            schema_id=schema_id, path=path, position=position + frame if position >= 0 else -1)


class _Source:
    """The table's bytes, frames and record identity, from a RecordTable or an Arrow table."""

    def __init__(self, table: Any, column: str, framing: Framing, schema_id: int) -> None:
        if isinstance(table, pa.Table):
            self._from_arrow(table, column, framing, schema_id)
        else:
            records = table.records
            self.frames = frames(table, column=column, framing=framing, schema_id=schema_id)
            self.raw_start = np.asarray(records[f"{column}_start"], dtype=np.int64)
            self._offsets = np.asarray(records["offset"])
            self._partition = -1 if table.partition is None else int(table.partition)
            self._topic = table.topic or ""
            self._partitions: npt.NDArray[Any] | None = None
            self._topics: list[Any] | None = None
            self.base = _base_table(table, column)

    def _from_arrow(self, table: pa.Table, column: str, framing: Framing, schema_id: int) -> None:
        arr = table.column(column).combine_chunks() if table.num_rows else pa.array([], pa.binary())
        if not pa.types.is_large_binary(arr.type):
            arr = arr.cast(pa.large_binary())
        n = len(arr)
        offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64)[arr.offset:arr.offset + n + 1] if n else \
            np.zeros(1, np.int64)
        data = arr.buffers()[2] if n and arr.buffers()[2] is not None else pa.py_buffer(b"")
        starts = offsets[:-1].copy()
        lengths = np.diff(offsets)
        if arr.null_count:
            lengths[np.asarray(arr.is_null())] = -1
        buf: Any = data
        header = None
        if framing == "confluent" and "headers" in table.column_names and n:
            header, buf = _arrow_header(table.column("headers"), schema_id_header(column), data, n)
        self.frames = parse_frames(buf, starts, lengths, framing=framing, schema_id=schema_id, header=header,
                                   column=column)
        self.raw_start = starts
        self._offsets = np.asarray(table.column("offset").fill_null(-1)) if "offset" in table.column_names else \
            np.full(n, -1, np.int64)
        self._partition = -1
        self._topic = ""
        self._partitions = np.asarray(table.column("partition").fill_null(-1)) \
            if "partition" in table.column_names else None  # null: unknown (a table of no partition)
        self._topics = table.column("topic").to_pylist() if "topic" in table.column_names else None
        self.base = table

    def offset(self, i: int) -> int:
        return int(self._offsets[i])

    def partition(self, i: int) -> int:
        return int(self._partitions[i]) if self._partitions is not None else self._partition

    def topic(self, i: int) -> str:
        return str(self._topics[i] or "") if self._topics is not None else self._topic


def _unview(t: pa.DataType) -> pa.DataType:
    """``t`` with binary and string views as binary and string (what ``to_arrow`` gives)."""
    if t == pa.binary_view():
        return pa.binary()
    if t == pa.string_view():
        return pa.string()
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_unview(t.value_type)))
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_unview(f.type)) for f in t])
    return t


def _base_table(table: Any, column: str) -> pa.Table:
    """``table.to_arrow()`` without copying the bytes of ``column`` (replaced by the decoded
    values): views, then the other byte columns cast to ``to_arrow``'s types."""
    views = table.to_arrow(binary="binary_view")
    for i, f in enumerate(views.schema):
        if f.name != column and _unview(f.type) != f.type:
            views = views.set_column(i, f.with_type(_unview(f.type)), views.column(i).cast(_unview(f.type)))
    return views


def _arrow_header(headers: Any, name: bytes, data: Any, n: int) -> tuple[tuple[Any, Any], Any]:
    """The schema id header of each row of an Arrow ``headers`` column (list<struct<key, value>>)
    as ``(start, length)`` into a buffer of the value bytes followed by the headers' values."""
    start = np.zeros(n, dtype=np.int64)
    length = np.full(n, -2, dtype=np.int64)
    lists = headers.combine_chunks()
    flat = pc.list_flatten(lists)
    if not len(flat):
        return (start, length), data
    owner = np.asarray(pc.list_parent_indices(lists))
    keys = flat.field("key")
    keys = keys.cast(pa.binary()) if not pa.types.is_binary(keys.type) else keys
    match = np.flatnonzero(np.asarray(pc.equal(keys, pa.scalar(name, pa.binary())).fill_null(False)))
    if not match.size:
        return (start, length), data
    values = flat.field("value").cast(pa.large_binary()).take(pa.array(match))
    rows = owner[match]
    last = np.unique(rows[::-1], return_index=True)
    first_owner, at = last
    chosen = (len(match) - 1 - at)
    base = len(memoryview(data))
    extra = values.take(pa.array(chosen))
    offs = np.frombuffer(extra.buffers()[1], dtype=np.int64)[extra.offset:extra.offset + len(extra) + 1]
    blob = extra.buffers()[2].to_pybytes() if extra.buffers()[2] is not None else b""
    start[first_owner] = base + offs[:-1]
    length[first_owner] = np.diff(offs)
    if extra.null_count:
        length[first_owner[np.asarray(extra.is_null())]] = -1
    return (start, length), bytes(memoryview(data)) + blob
