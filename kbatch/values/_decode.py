"""``decode``: a table's framed Avro, JSON Schema or Protobuf values (or keys), or plain JSON, as a
typed Arrow struct column.

The steps: the frames (:func:`~kbatch.values.frames`: each record's writer schema id and body);
the reader schema (named, or the subject's latest, or the newest writer met), whose language
picks the decoder (JSON: :mod:`~kbatch.values.json._decode`; Protobuf:
:mod:`~kbatch.values.protobuf._decode`; Avro, below); for Avro, one program per writer id
(:class:`~kbatch.values.avro._compile.AvroProgram`, cached per reader schema for the process),
the kernel over the whole table with the GIL released; the kernel's buffers handed to Arrow
without a copy. A record that does not decode (no frame, unknown id, a bad
body) raises :class:`ValueDecodeError`, or with ``errors="null"`` is a null value with its
message in ``<column>_error``.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from ._arrow_build import build_array
from ._errors import (
    AvroSchemaError,
    JsonSchemaError,
    ProtobufSchemaError,
    SchemaNotFoundError,
    ValueDecodeError,
    field_path,
)
from ._fields import FieldTree, field_tree, project_struct
from ._framing import Framing, frames, parse_frames, schema_id_header
from ._schema import Schema
from .avro import ERRORS, MAX_RECURSION_DEPTH, OPS, AvroProgram, parse_avro_schema, project_avro, run
from .json import SAMPLE_RECORDS, infer_json_schema, json_schema_type, parse_json_values
from .protobuf import ProtoOptions, ProtoSchema, reader_layout, run_protobuf

__all__ = ["FORMATS", "MAX_ITEMS", "MIN_RECORDS_PER_THREAD", "Decoded", "base_table", "decode", "decode_records",
           "reader_program", "resolve_reader",
           "value_type"]

Errors = Literal["raise", "null"]
#: ``format=``: by each schema's ``schemaType`` (``auto``), or one language.
FORMATS = ("auto", "avro", "json", "protobuf")
#: schemaType -> the format name users give
_FORMAT_OF = {"AVRO": "avro", "JSON": "json", "PROTOBUF": "protobuf"}
#: Items (of a type written in no bytes, such as null) one array or map may hold.
MAX_ITEMS = 1 << 24
_PROGRAMS: OrderedDict[tuple[Any, ...], AvroProgram] = OrderedDict()
_PROGRAMS_SIZE = 32
_LOCK = threading.Lock()
#: ``threads`` splits a table only into parts of at least this many records.
MIN_RECORDS_PER_THREAD = 4096


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
    max_depth: int | None = None,
    threads: int = 1,
    base: pa.Table | None = None,
    format: str = "auto",
    sample: int = SAMPLE_RECORDS,
    protobuf: ProtoOptions | None = None,
    fields: Sequence[str] | None = None,
) -> pa.Table:
    """Decode a table's Avro, JSON or Protobuf values (or keys) into a typed struct column.

    Parameters
    ----------
    table : kbatch.RecordTable or pyarrow.Table
        Records as kbatch gives them: a ``RecordTable``, or an Arrow table with kbatch's
        columns (``value`` / ``key`` binary, and ``headers``, ``offset``, ``partition``,
        ``topic`` when present).
    registry : kbatch.values.Registry or None
        Where writer schemas are found by id (or GUID). None only with ``format="json"``:
        plain JSON values, no frame (the schema is ``reader_schema``, else inferred).
    column : {"value", "key"}
        What to decode.
    reader_schema : Schema, ProtoSchema, int, str or None
        The output's layout: a :class:`Schema` (its ``schema_type`` picks the decoder), a compiled
        :class:`ProtoSchema`, a schema id, or schema text (Avro; JSON Schema or ``.proto`` text
        with ``format="json"`` / ``"protobuf"`` or when the writers are all of that language). By default the
        latest version of the writers' subject (when the registry knows it), else the writer
        schema with the highest id in the table; for plain JSON, a schema inferred from the
        first ``sample`` values.
    errors : {"raise", "null"}
        ``"raise"``: :class:`ValueDecodeError` for the first record that does not decode,
        naming its offset, partition, schema id, field path and byte. ``"null"``: such a
        record's value is null and a ``<column>_error`` string column says why.
    mapping : {"spark", "arrow"}
        The Arrow types: Spark's (what ``from_avro`` gives; enums and uuids as strings,
        timestamps in microseconds) or Arrow's own (enums as dictionaries, uuids as 16 bytes,
        timestamps and times in their own unit, durations as intervals, other unions as dense
        unions): the table in ``docs/values.md``.
    framing : {"confluent", "raw"}
        ``"raw"``: the values have no frame and are written with ``schema_id`` (whose schema
        then also lays out the output unless ``reader_schema`` is given).
    schema_id : int
        With ``framing="raw"``: the writer schema's id.
    max_items : int
        The most items an array or map of zero-byte items (nulls, empty records) may hold.
    max_depth : int, optional
        Keep a recursive record this many levels deep (1-15; Spark's
        ``recursiveFieldMaxDepth``: 1 drops the recursive field, 2 keeps one level of it, ...);
        deeper levels are left out of the type and their bytes skipped. Without it a recursive
        reader schema raises :class:`AvroSchemaError`.
    threads : int
        Decode in this many parts at once (the kernel runs without the GIL), each of at least
        :data:`MIN_RECORDS_PER_THREAD` records; the output is the same, its decoded column in
        one chunk per part (no copy). 1 (the default: callers such as ``kbatch convert`` and
        Spark already run one decode per core); 0: one per CPU. Avro values only (JSON and Protobuf
        values decode in one part).
    base : pyarrow.Table, optional
        With a ``RecordTable``: the table to put the decoded column in, one row per record
        (default ``table.to_arrow()``); e.g. one whose keys are already decoded.
    format : {"auto", "avro", "json", "protobuf"}
        The values' language: ``"auto"`` by the reader schema's ``schemaType`` (records whose
        writer schema is of another language are errors); ``"json"`` without a registry:
        plain JSON.
    sample : int
        Plain JSON without ``reader_schema``: the schema is inferred from this many first values
        (:func:`kbatch.values.infer_json_schema`).
    protobuf : ProtoOptions, optional
        For Protobuf values (the reader schema's ``schemaType`` is ``PROTOBUF``, or a
        :class:`ProtoSchema`): Spark's ``from_protobuf`` options (``emit_default_values``,
        ``enums_as_ints``, ``recursive_depth``) and the message to decode.
    fields : sequence of str, optional
        Decode only these fields of the values (projection): top-level names (``"customer"``) or
        dotted paths into nested records (``"address.city"``; through a union of null and one
        record too). The struct then holds only them (a nested record only its kept fields), in
        the reader schema's order, each with the type and values the whole decode gives it; the
        other fields' bytes are walked, not decoded (``docs/values.md``: what is still checked in
        them). A name the reader schema lacks is a ``ValueError`` naming the fields there are.

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
                          framing=framing, schema_id=schema_id, max_items=max_items, max_depth=max_depth,
                          threads=threads, base=base, format=format, sample=sample, protobuf=protobuf,
                          fields=fields)
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
    max_depth: int | None = None,
    threads: int = 1,
    base: pa.Table | None = None,
    format: str = "auto",
    sample: int = SAMPLE_RECORDS,
    protobuf: ProtoOptions | None = None,
    fields: Sequence[str] | None = None,
    walk_tail: bool = True,
) -> Decoded:
    """:func:`decode`'s work, with every record's :class:`ValueDecodeError` returned, not raised.

    The one decoding path of :func:`decode` (``errors="raise"`` / ``"null"``) and of
    :func:`kbatch.values.split` (good rows and dead letters). ``stop_at_first``: the kernel stops
    at the first bad record, which is then raised (``errors="raise"``); otherwise every bad record
    is a null value and an entry in :attr:`Decoded.errors`. ``walk_tail=False`` (with ``fields``,
    Avro): the writer's fields after the last one kept are not walked (their faults unseen: what a
    lazy scan's value filter judges by, :mod:`kbatch.values._scan`). Other parameters as
    :func:`decode`'s.
    """
    if column not in ("value", "key"):
        raise ValueError(f"column must be 'value' or 'key', got {column!r}")
    if max_depth is not None and (type(max_depth) is not int or not 1 <= max_depth <= MAX_RECURSION_DEPTH):
        raise ValueError(f"max_depth must be 1 to {MAX_RECURSION_DEPTH} (Spark's recursiveFieldMaxDepth), "
                         f"got {max_depth!r}")
    if type(threads) is not int or threads < 0:
        raise ValueError(f"threads must be an int >= 0, got {threads!r}")
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    tree = field_tree(fields)
    plain = registry is None
    if plain and format != "json":
        raise ValueError("a registry is needed, except for plain JSON values (format='json')")
    source = _Source(table, column, "raw" if plain else framing, schema_id, base)
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
    reader: Schema | ProtoSchema
    if plain:
        reader = _plain_reader(reader_schema, f, sample, column)
    else:
        reader = resolve_reader(registry, reader_schema, met, format)
    kind = reader.schema_type
    if format != "auto" and _FORMAT_OF[kind] != format:
        raise ValueError(f"format={format!r} but the reader schema is {kind}")
    # the dispatch point: each language decodes the records whose writer schema is of its kind
    foreign = {i: w.schema_type for i, w in met.items() if w.schema_type != kind}
    if kind == "PROTOBUF":
        return _decode_protobuf(source, ids, live, by_id, named, foreign, unknown, guid_unknown, met, reader, column,
                                stop_at_first, framing == "confluent", protobuf or ProtoOptions(), tree)
    assert isinstance(reader, Schema)  # a compiled ProtoSchema is PROTOBUF
    if kind == "JSON":
        return _decode_json(source, ids, live, by_id, named, foreign, unknown, guid_unknown, reader, column,
                            stop_at_first, plain, tree)
    if kind != "AVRO":
        raise ValueError(f"{kind} values are not decoded yet")
    entry = np.full(n, -1, dtype=np.int32)
    writers = {i: w for i, w in writers.items() if i not in foreign}
    by_guid = [None if s is None or -2 - k in foreign else s for k, s in enumerate(by_guid)]
    program = reader_program(reader, mapping, max_depth, tree, walk_tail or tree is None)
    with _LOCK:
        pcs = {i: program.add_writer_schema(w) for i, w in writers.items()}
        guid_pcs = [-1 if s is None else program.add_writer_schema(s) for s in by_guid]
        prog, aux, consts, coldesc = program.arrays()
    entry = np.full(n, -1, dtype=np.int32)
    if f.guids:
        entry[named] = np.array(guid_pcs, dtype=np.int32)[f.guid_index[named]]
    if len(pcs) == 1 and not f.guids:  # one writer: the common case, one pass
        (only, pc_only), = pcs.items()
        entry = np.where(by_id & (ids == only), np.int32(pc_only), np.int32(-1))
    elif pcs:
        ids_by_id = np.where(by_id, ids, -1)
        keys = np.array(sorted(pcs), dtype=np.int64)
        values = np.array([pcs[k] for k in sorted(pcs)], dtype=np.int32)
        at = np.searchsorted(keys, ids_by_id)
        hit = by_id & (at < len(keys)) & (keys[np.minimum(at, len(keys) - 1)] == ids_by_id)
        entry[hit] = values[at[hit]]
    # the kernel reads a record's (start, length) only where its entry is >= 0
    starts = np.ascontiguousarray(f.start, dtype=np.int64)
    lengths = np.ascontiguousarray(f.length, dtype=np.int64)
    data = _as_uint8(f.data)
    parts = _parts(n, threads)

    def part(lo: int, hi: int) -> tuple[list[Any], Any, int]:
        return run(prog, aux, consts, coldesc, data, starts[lo:hi], lengths[lo:hi], entry[lo:hi],
                   program.null_entry, stop_at_first, max_items)

    if len(parts) == 1:
        results = [part(0, n)]
    else:  # the kernel releases the GIL: the parts run at once
        with ThreadPoolExecutor(len(parts)) as pool:
            results = list(pool.map(lambda bounds: part(*bounds), parts))

    messages = _front_errors(source, column, ids, by_id, named, unknown, guid_unknown, foreign, kind,
                             live & (entry < 0))
    for (lo, _), (_, kerrors, _) in zip(parts, results, strict=True):
        for row in kerrors:
            i = lo + int(row["record"])
            messages[i] = _kernel_error(program, row, column, source, i, int(ids[i]),
                                        int(f.start[i] - source.raw_start[i]))
    _raise_first(messages, stop_at_first)
    if sum(done for _, _, done in results) != n:  # pragma: no cover - only on an error, raised above
        raise RuntimeError("the value kernel stopped early")
    arrays = [build_array(program.layout, columns) for columns, _, _ in results]
    value = arrays[0] if len(arrays) == 1 else pa.chunked_array(arrays, type=arrays[0].type)
    return Decoded(_assemble(source, column, value, ids, framing != "confluent"), messages)



def _front_errors(source: _Source, column: str, ids: npt.NDArray[np.int32], by_id: npt.NDArray[np.bool_],
                  named: npt.NDArray[np.bool_], unknown: dict[int, str], guid_unknown: dict[int, str],
                  foreign: dict[int, str], kind: str, unread: npt.NDArray[np.bool_]) -> dict[int, ValueDecodeError]:
    """Every error found before a decoder runs, by record: framing, unknown ids and GUIDs, writer
    schemas of another language than the reader's, and any record left unread (never a value
    silently lost)."""
    f = source.frames
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
    for key, other in foreign.items():
        rows = by_id & (ids == key) if key >= 0 else named & (f.guid_index == -2 - key)
        for i in np.flatnonzero(rows).tolist():
            messages[i] = ValueDecodeError(f"written with a {other} schema, the reader schema is {kind}",
                                           offset=source.offset(i), partition=source.partition(i),
                                           topic=source.topic(i), schema_id=int(ids[i]), path=column)
    for i in np.flatnonzero(unread).tolist():
        messages.setdefault(i, ValueDecodeError("no schema for this value", offset=source.offset(i),
                                                partition=source.partition(i), topic=source.topic(i),
                                                path=column))
    return messages


def _raise_first(messages: dict[int, ValueDecodeError], stop_at_first: bool) -> None:
    """``errors="raise"``: the error of the first bad record, whichever step found it (framing, the
    registry, the decoder), so every language raises the same one; each caller merges the
    decoder's errors into ``messages`` (from :func:`_front_errors`) before."""
    if stop_at_first and messages:
        raise messages[min(messages)]


def _assemble(source: _Source, column: str, value: Any, ids: npt.NDArray[np.int32], plain: bool) -> pa.Table:
    """The table's columns with ``column`` the decoded values, then ``<column>_schema_id``."""
    n = len(ids)
    schema_ids = pa.array(ids, type=pa.int32(), mask=np.ones(n, bool) if plain else ids < 0)
    out = source.base
    at_col = out.schema.get_field_index(column)
    if at_col >= 0:
        out = out.set_column(at_col, column, value)
    else:
        at_col = out.num_columns
        out = out.append_column(column, value)
    return out.add_column(at_col + 1, f"{column}_schema_id", schema_ids)


def _decode_json(source: _Source, ids: npt.NDArray[np.int32], live: npt.NDArray[np.bool_],
                 by_id: npt.NDArray[np.bool_], named: npt.NDArray[np.bool_], foreign: dict[int, str],
                 unknown: dict[int, str], guid_unknown: dict[int, str], reader: Schema, column: str,
                 stop_at_first: bool, plain: bool, tree: FieldTree | None) -> Decoded:
    """JSON values (JSON Schema writers, or plain JSON): :func:`parse_json_values` over the
    records whose writer is a JSON Schema the registry has (every live record, for plain JSON);
    with ``tree``, the parser is given the type of the kept fields only."""
    f = source.frames
    n = len(f)
    value_type = project_struct(json_schema_type(reader), tree)
    if plain:
        usable = live.copy()
    else:
        usable = by_id & ~np.isin(ids, [*unknown, *(k for k in foreign if k >= 0)])
        usable |= named  # by GUID (whose schema may have no id)
        for k in guid_unknown:
            usable &= ~(named & (f.guid_index == k))
        for k in (k for k in foreign if k < 0):
            usable &= ~(named & (f.guid_index == -2 - k))
        usable &= live
    messages = _front_errors(source, column, ids, by_id, named, unknown, guid_unknown, foreign, "JSON",
                             live & ~usable)
    sel = np.flatnonzero(usable)
    if stop_at_first and messages:  # only the bodies before the first error found so far can come first
        sel = sel[sel < min(messages)]
    parsed, bad = parse_json_values(_as_uint8(f.data), f.start[sel], f.length[sel], value_type, column=column,
                                    stop_at_first=stop_at_first)
    for k, (reason, path) in bad.items():
        i = int(sel[k])
        messages[i] = ValueDecodeError(reason, offset=source.offset(i), partition=source.partition(i),
                                       topic=source.topic(i), schema_id=int(ids[i]), path=path)
    _raise_first(messages, stop_at_first)
    if len(sel) == n:
        value = parsed
    else:
        where = np.full(n, len(sel), dtype=np.int64)
        where[sel] = np.arange(len(sel))
        value = pa.chunked_array([*parsed.chunks, pa.nulls(1, value_type)], type=value_type).take(pa.array(where))
    return Decoded(_assemble(source, column, value, ids, plain), messages)


def _decode_protobuf(source: _Source, ids: npt.NDArray[np.int32], live: npt.NDArray[np.bool_],
                     by_id: npt.NDArray[np.bool_], named: npt.NDArray[np.bool_], foreign: dict[int, str],
                     unknown: dict[int, str], guid_unknown: dict[int, str], met: dict[int, Schema],
                     reader: Schema | ProtoSchema, column: str, stop_at_first: bool, indexed: bool,
                     options: ProtoOptions, tree: FieldTree | None) -> Decoded:
    """Protobuf values: :func:`run_protobuf` over the records whose writer is a Protobuf schema the
    registry has (``met``: by id, and ``-2 - k`` for the ``k``-th GUID); ``indexed``: Confluent's
    message indexes follow the frame (not with ``framing="raw"``)."""
    f = source.frames
    skip = [*unknown, *(k for k in foreign if k >= 0)]
    writer_key = np.where(by_id & ~np.isin(ids, skip), ids, -1).astype(np.int64)
    if f.guids:
        known = np.array([-2 - k in met and -2 - k not in foreign for k in range(len(f.guids))], dtype=bool)
        guided = named & known[np.maximum(f.guid_index, 0)]
        writer_key[guided] = -2 - f.guid_index[guided].astype(np.int64)
    done = run_protobuf(reader, options, _as_uint8(f.data), f.start, f.length, writer_key, met, column,
                        stop_at_first, indexed=indexed, fields=tree)
    messages = _front_errors(source, column, ids, by_id, named, unknown, guid_unknown, foreign, "PROTOBUF",
                             live & (writer_key == -1))
    for i, (reason, path, position) in done.errors.items():
        frame = int(f.start[i] - source.raw_start[i])
        messages[i] = ValueDecodeError(reason, offset=source.offset(i), partition=source.partition(i),
                                       topic=source.topic(i), schema_id=int(ids[i]), path=path,
                                       position=position + frame if position >= 0 else -1)
    _raise_first(messages, stop_at_first)
    value = build_array(done.program.layout, done.columns)
    return Decoded(_assemble(source, column, value, ids, not indexed), messages)


def _plain_reader(reader_schema: Schema | ProtoSchema | int | str | None, f: Any, sample: int, column: str) -> Schema:
    """Plain JSON's schema: the one given (JSON Schema text or a Schema), else one inferred from
    the first ``sample`` live values."""
    if isinstance(reader_schema, Schema):
        return reader_schema if reader_schema.schema_type == "JSON" else Schema(reader_schema.text, "JSON")
    if isinstance(reader_schema, str):
        return Schema(reader_schema, "JSON")
    if reader_schema is not None:
        raise TypeError("plain JSON takes a JSON Schema (text or a Schema) as reader_schema, or none")
    live = np.flatnonzero((f.error == 0) & (f.length >= 0))[:sample]
    return Schema(json.dumps(infer_json_schema(_as_uint8(f.data), f.start[live], f.length[live], column=column)),
                  "JSON")



def _parts(n: int, threads: int) -> list[tuple[int, int]]:
    """``[0, n)`` cut into ``threads`` (0: one per CPU) ranges of at least
    :data:`MIN_RECORDS_PER_THREAD` records."""
    want = (os.cpu_count() or 1) if threads == 0 else threads
    k = max(1, min(want, n // MIN_RECORDS_PER_THREAD))
    cuts = [n * i // k for i in range(k + 1)]
    return list(itertools.pairwise(cuts))


def _id_of(schema: Schema) -> int:
    return -1 if schema.id is None else int(schema.id)


def _as_uint8(data: Any) -> npt.NDArray[np.uint8]:
    view = memoryview(data).cast("B")
    return np.frombuffer(view, dtype=np.uint8) if len(view) else np.zeros(1, np.uint8)


def resolve_reader(registry: Any, reader_schema: Schema | ProtoSchema | int | str | None,
                   writers: dict[int, Schema] | None = None, format: str = "auto") -> Schema | ProtoSchema:
    """The reader schema a decode lays its output out by: ``reader_schema`` (a :class:`Schema` or a
    compiled :class:`ProtoSchema`, an id looked up in ``registry``, schema text: JSON Schema or
    ``.proto`` text with ``format="json"`` / ``"protobuf"`` or when every writer met is of that
    language, else Avro), else the latest version of the one subject of ``writers`` (the writer
    schemas met, by id), else the newest writer."""
    if isinstance(reader_schema, (Schema, ProtoSchema)):
        return reader_schema
    if isinstance(reader_schema, bool):
        raise TypeError("reader_schema must be a Schema, a schema id or schema text")
    if isinstance(reader_schema, int):
        return registry.schema(reader_schema)  # type: ignore[no-any-return]
    if isinstance(reader_schema, str):
        kinds = {w.schema_type for w in (writers or {}).values()}
        if format in ("json", "protobuf"):
            text_kind = format.upper()
        elif format == "auto" and len(kinds) == 1 and kinds <= {"JSON", "PROTOBUF"}:
            text_kind = kinds.pop()
        else:
            text_kind = "AVRO"
        return Schema(reader_schema, text_kind)
    if reader_schema is not None:
        raise TypeError(f"reader_schema must be a Schema, a schema id or schema text, "
                        f"got {type(reader_schema).__name__}")
    if not writers:
        if format == "json":
            raise JsonSchemaError("no writer schema in the table to lay the output out by: name a reader_schema")
        if format == "protobuf":
            raise ProtobufSchemaError("no writer schema in the table to lay the output out by: name a reader_schema")
        raise AvroSchemaError("no writer schema in the table to lay the output out by: name a reader_schema")
    subjects = {w.subject for w in writers.values() if w.subject}
    if len(subjects) == 1:
        try:
            return registry.latest(subjects.pop())  # type: ignore[no-any-return]
        except SchemaNotFoundError:
            pass
    return writers[max(writers)]


def value_type(reader: Schema | ProtoSchema, mapping: str = "spark", max_depth: int | None = None,
               protobuf: ProtoOptions | None = None, fields: Sequence[str] | None = None) -> pa.DataType:
    """The Arrow type values decode into with reader schema ``reader``, by its language (Avro:
    ``mapping`` and ``max_depth``; Protobuf: the options ``protobuf``, whose message, else the
    reader's root message, lays the values out), with only ``fields`` when given."""
    tree = field_tree(fields)
    if reader.schema_type == "PROTOBUF":
        return reader_layout(reader, protobuf, tree).arrow_type(0)
    assert isinstance(reader, Schema)
    if reader.schema_type == "JSON":
        return project_struct(json_schema_type(reader), tree)
    if reader.schema_type != "AVRO":
        raise ValueError(f"{reader.schema_type} values are not decoded yet")
    layout = reader_program(reader, mapping, max_depth, tree).layout
    return layout.arrow_type(layout.root.col)


def reader_program(reader: Schema, mapping: str, max_depth: int | None = None,
                   fields: FieldTree | None = None, walk_tail: bool = True) -> AvroProgram:
    """The compiled program of ``reader`` cut to ``fields`` (writers are added to it as met),
    cached per process: one per (reader, fields, walk_tail), holding the code of each writer met."""
    key = (reader.text, tuple((name, s.text) for name, s in reader.dependencies), mapping, max_depth, fields,
           walk_tail)
    with _LOCK:
        program = _PROGRAMS.get(key)
        if program is not None:
            _PROGRAMS.move_to_end(key)
            return program
    program = AvroProgram(project_avro(parse_avro_schema(reader), fields), mapping, max_depth, walk_tail)
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

    def __init__(self, table: Any, column: str, framing: Framing, schema_id: int, base: pa.Table | None) -> None:
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
            self.base = base_table(table, (column,)) if base is None else base
            if self.base.num_rows != len(self.frames):
                raise ValueError(f"base has {self.base.num_rows} rows, the table {len(self.frames)} records")

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


def base_table(table: Any, columns: tuple[str, ...], binary: str = "binary", **options: Any) -> pa.Table:
    """``table.to_arrow(binary=binary, **options)`` without copying the bytes of ``columns``
    (replaced by the decoded values): views, then the other byte columns cast to ``binary``'s
    types."""
    views = table.to_arrow(binary="binary_view", **options)
    if binary == "binary_view":
        return views
    for i, f in enumerate(views.schema):
        if f.name not in columns and _unview(f.type) != f.type:
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
