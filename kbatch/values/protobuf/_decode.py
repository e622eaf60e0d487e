"""Protobuf values: the message indexes of each body, the message they name, the kernel run,
and the slow path for records whose singular messages must be merged.

:func:`kbatch.values.decode` comes here when the reader schema is Protobuf; the frames, the
registry look-ups, the error records and the output table are :mod:`kbatch.values._decode`'s,
shared with Avro.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from .._errors import ProtobufSchemaError, field_path
from .._fields import FieldTree
from .._schema import Schema
from ._any import render_any_columns
from ._compile import ProtoProgram
from ._merge import Merger
from ._protokernel import ERRORS, MERGE, message_indexes, run
from ._schema import ProtoSchema, compile_proto

__all__ = ["ProtoOptions", "ProtoRun", "is_protobuf", "reader_layout", "run_protobuf"]

_CACHE: OrderedDict[Any, Any] = OrderedDict()
_CACHE_SIZE = 64
_LOCK = threading.Lock()
_LONG_KEY = np.uint64(0xFFFFFFFFFFFFFFFF)


@dataclass(frozen=True)
class ProtoOptions:
    """Spark ``from_protobuf`` options: ``emit.default.values``, ``enums.as.ints``,
    ``recursive.fields.max.depth``, ``convert.any.fields.to.json`` (``any_as_json``); and the
    message to decode (full name) when not the one the values name."""

    emit_default_values: bool = False
    enums_as_ints: bool = False
    recursive_depth: int = -1
    message: str | None = None
    any_as_json: bool = False


def is_protobuf(schema: Any) -> bool:
    """Whether ``schema`` is a Protobuf schema (registry ``PROTOBUF`` or compiled)."""
    return isinstance(schema, ProtoSchema) or (isinstance(schema, Schema) and schema.schema_type == "PROTOBUF")


def _cached(key: Any, make: Any) -> Any:
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _CACHE.move_to_end(key)
            return hit
    value = make()
    with _LOCK:
        _CACHE[key] = value
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return value


def compiled(schema: Schema | ProtoSchema) -> ProtoSchema:
    """``schema`` compiled once per process (by text and references)."""
    if isinstance(schema, ProtoSchema):
        return schema
    key = ("schema", schema.text, tuple((n, s.text) for n, s in schema.dependencies))
    return _cached(key, lambda: compile_proto(schema))  # type: ignore[no-any-return]


def reader_layout(reader: Schema | ProtoSchema, options: ProtoOptions | None = None,
                  fields: FieldTree | None = None) -> Any:
    """The output columns of a Protobuf reader schema (its root message, or ``options.message``),
    only ``fields`` when given."""
    options = options or ProtoOptions()
    schema = compiled(reader)
    return program_of(schema.with_message(options.message or schema.message), options, fields).layout


def program_of(reader: ProtoSchema, options: ProtoOptions, fields: FieldTree | None = None) -> ProtoProgram:
    """The program of ``reader``'s message under ``options``, cut to ``fields``, cached per process."""
    key = ("program", id(reader.pool), reader.descriptor_set, reader.message, options, fields)
    return _cached(key, lambda: ProtoProgram(  # type: ignore[no-any-return]
        reader, emit_default_values=options.emit_default_values, enums_as_ints=options.enums_as_ints,
        recursive_depth=options.recursive_depth, any_as_json=options.any_as_json, fields=fields))


def _unpack(key: int) -> list[int]:
    count = key & 63
    return [(key >> (6 + 6 * k)) & 63 for k in range(count)]


def _read_indexes(body: bytes) -> list[int]:
    """Confluent's message indexes read one by one (the rare long ones)."""
    out: list[int] = []
    pos = 0

    def varint() -> int:
        nonlocal pos
        v = shift = 0
        while True:
            b = body[pos]
            pos += 1
            v |= (b & 0x7F) << shift
            if b < 0x80:
                return (v >> 1) ^ -(v & 1)
            shift += 7

    count = varint()
    for _ in range(count):
        out.append(varint())
    return out or [0]


def _entries(proto_reader: ProtoSchema, options: ProtoOptions, data: npt.NDArray[np.uint8],
             start: npt.NDArray[np.int64], length: npt.NDArray[np.int64], writer_key: npt.NDArray[np.int64],
             writers: dict[int, Schema], column: str, ok: npt.NDArray[np.bool_], key: npt.NDArray[np.uint64],
             errors: dict[int, tuple[str, str, int]],
             fields: FieldTree | None) -> tuple[ProtoProgram, npt.NDArray[np.int32]]:
    """The program of the reader's root message (or ``options.message``), and each record's
    entry: 0 where its writer and message indexes name that message; else an error."""
    n = len(start)
    # the message each (writer, indexes) names
    distinct: list[tuple[int, int]] = []
    wks, keys = writer_key[ok], key[ok].astype(np.int64)
    for wk in ([int(wks[0])] if len(wks) and wks.min() == wks.max() else np.unique(wks).tolist()):
        mine = keys if len(distinct) == 0 and len(wks) and wks.min() == wks.max() else keys[wks == wk]
        one = len(mine) and mine.min() == mine.max()  # one message: the common case, no sort
        distinct += [(wk, int(k)) for k in ([int(mine[0])] if one else np.unique(mine).tolist())]
    named: dict[tuple[int, int], str | Exception] = {}
    long_rows = np.flatnonzero(ok & (key == _LONG_KEY)).tolist()
    long_names: dict[int, str | Exception] = {}

    def message_of(wk: int, indexes: list[int]) -> str | Exception:
        try:
            return compiled(writers[wk]).message_by_indexes(indexes)
        except ProtobufSchemaError as exc:
            return exc

    for wk, k in distinct:
        if np.uint64(k & 0xFFFFFFFFFFFFFFFF) != _LONG_KEY:
            named[(wk, k)] = message_of(wk, _unpack(k & 0xFFFFFFFFFFFFFFFF))
    for i in long_rows:
        body = bytes(data[start[i]:start[i] + length[i]])
        long_names[i] = message_of(int(writer_key[i]), _read_indexes(body))
    # the message that lays out the output
    target = options.message
    if target is None:  # the reader's root message (the same for every batch)
        target = proto_reader.message
    proto_reader = proto_reader.with_message(target)
    program = program_of(proto_reader, options, fields)
    entry = np.full(n, -1, np.int32)
    for (wk, k), name in named.items():
        rows = ok & (writer_key == wk) & (key.astype(np.int64) == k)
        if isinstance(name, str) and name == program.message:
            entry[rows] = 0
        else:
            reason = str(name) if isinstance(name, Exception) else \
                f"the value is a {name}, the output is laid out as {program.message}"
            for i in np.flatnonzero(rows).tolist():
                errors[i] = (reason, column, 0)
    for i, name in long_names.items():
        if isinstance(name, str) and name == program.message:
            entry[i] = 0
        else:
            errors[i] = (str(name) if isinstance(name, Exception) else
                         f"the value is a {name}, the output is laid out as {program.message}", column, 0)
    return program, entry


@dataclass
class ProtoRun:
    """What :func:`run_protobuf` gives back: the columns to build, and the errors by record."""

    program: ProtoProgram
    columns: list[tuple[Any, ...]]
    #: record -> (reason, field path, byte position from the start of the message indexes, or -1)
    errors: dict[int, tuple[str, str, int]]
    #: bytes of message indexes before each body
    used: npt.NDArray[np.int64]


def run_protobuf(reader: Schema | ProtoSchema, options: ProtoOptions, data: npt.NDArray[np.uint8],
                 start: npt.NDArray[np.int64], length: npt.NDArray[np.int64], writer_key: npt.NDArray[np.int64],
                 writers: dict[int, Schema], column: str, stop_at_first: bool, *, indexed: bool = True,
                 fields: FieldTree | None = None) -> ProtoRun:
    """Decode the bodies ``data[start:start + length]`` of the records with ``writer_key >= 0``
    (or <= -2: a GUID's writer), whose schemas are ``writers[writer_key]``; only ``fields`` when
    given (the others skipped as unknown fields are)."""
    n = len(start)
    has = writer_key != -1
    used = np.zeros(n, np.int64)
    key = np.zeros(n, np.uint64)
    bad = np.zeros(n, np.uint8)
    lengths = np.where(has, length, -1).astype(np.int64)
    if indexed:
        message_indexes(data, start, lengths, used, key, bad)
    else:  # raw framing: a bare message, the first of the file (or options.message)
        key[:] = 1
    errors: dict[int, tuple[str, str, int]] = {}
    for i in np.flatnonzero(has & (bad != 0)).tolist():
        errors[i] = ("bad message indexes after the schema id", column, 0)
    ok = has & (bad == 0)
    proto_reader = compiled(reader) if isinstance(reader, Schema) else reader
    if not indexed:  # raw framing: bare messages of the reader's message (or options.message)
        program = program_of(proto_reader.with_message(options.message or proto_reader.message), options, fields)
        entry = np.where(has, 0, -1).astype(np.int32)
    else:
        program, entry = _entries(proto_reader, options, data, start, length, writer_key, writers, column, ok,
                                  key, errors, fields)
    starts = np.where(entry >= 0, start + used, 0).astype(np.int64)
    lens = np.where(entry >= 0, length - used, 0).astype(np.int64)
    msgs, field_table, aux, consts, coldesc = program.arrays()
    columns, kerrors, _ = run(msgs, field_table, aux, consts, coldesc, data, starts, lens, entry, stop_at_first)
    merged: set[int] = set()
    while True:  # the slow path: singular messages merged on the wire, the kernel decodes the result
        merge = [int(r["record"]) for r in kerrors if int(r["code"]) == MERGE and int(r["record"]) not in merged]
        if not merge:
            break
        cls = program.schema.message_class()
        merged_bytes = Merger(cls.DESCRIPTOR)
        extra = bytearray()
        base = len(data)
        for i in merge:
            merged.add(i)
            body = bytes(data[starts[i]:starts[i] + lens[i]])
            try:  # upb's parse says whether the body is good (its serialization would reorder maps)
                cls.FromString(body)
            except Exception as exc:  # noqa: BLE001 - upb's DecodeError
                errors[i] = (f"does not parse (upb): {exc}", column, 0)
                entry[i] = -1
                continue
            try:
                canon = merged_bytes(body)
            except ValueError as exc:
                errors[i] = (f"cannot be merged: {exc}", column, 0)
                entry[i] = -1
                continue
            starts[i] = base + len(extra)
            lens[i] = len(canon)
            extra += canon
        data = np.concatenate([data, np.frombuffer(bytes(extra) or b"\0", np.uint8)])
        columns, kerrors, _ = run(msgs, field_table, aux, consts, coldesc, data, starts, lens, entry, stop_at_first)
    for r in kerrors:
        i = int(r["record"])
        code, fi = int(r["code"]), int(r["pc"])
        reason = ERRORS.get(code, f"error {code}")
        if int(r["detail"]) and code == 1:
            reason = f"{reason}: {int(r['detail'])} bytes wanted, fewer left"
        path = program.paths[fi] if 0 <= fi < len(program.paths) else "value"
        path = field_path(path, [int(x) for x in r["index"] if x >= 0], column)
        position = int(r["position"])
        errors[i] = (reason, path, position + int(used[i]) if position >= 0 else -1)
    if program.any_columns:
        columns = list(columns)
        render_any_columns(program, columns, column, errors)
    return ProtoRun(program, columns, errors, used)
