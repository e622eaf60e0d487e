"""JSON values into Arrow, in bulk: one buffer, one vectorised parse, per-record work only for bad ones.

:func:`parse_json_values` takes the bodies of ``n`` records (``(data, start, length)``, as the
frames give them) and the Arrow struct type of the values (:mod:`kbatch.values.json._schema`),
and returns a struct array of ``n`` rows (null where a record does not decode) and each bad
record's reason and path. The steps, none with a Python object per record:

1. **Join.** The bodies become ``binary_view`` entries over the table's bytes
   (:func:`kbatch.arrow.binary_column`), interleaved with one inline ``"\\n"`` view each, and one
   cast to ``large_binary`` copies them back to back: a newline-delimited buffer. A body whose
   first byte is not ``{`` (not an object, or pretty-printed with leading whitespace, or empty)
   is kept out of the bulk and parsed alone; so every line of the bulk yields at least one row or
   an error, and the row count proves that rows and records line up.
2. **UTF-8**: the bodies are checked in one pass (``pyarrow.json`` does not check strings).
3. **Parse** with ``pyarrow.json.read_json`` and the explicit schema (unknown fields ignored).
   Dates are parsed as strings and only those fields cast after (``pyarrow.json`` has no date
   parser). A pretty-printed body (newlines between its tokens) needs nothing: the parser takes
   newlines as the whitespace they are; only where ``pyarrow.json`` cuts the buffer into blocks
   (at a newline) might it cut such a body, and then the cut body is a parse error, never a
   wrong row. A raw newline (any control character) inside a string is refused by the parser.
4. **A failure** (a parse error, a row count that does not match, a failed cast) re-parses the
   buffer in blocks of :data:`BLOCK_RECORDS` records, slices of the same buffer, with the
   chunker that cuts only between values (``newlines_in_values``), and a failing block in halves
   down to single records: only to find which records are bad; each gets the parser's message
   and the column path it names. The good records' rows are what the blocks gave.
5. **Maps** (``additionalProperties``): ``pyarrow.json`` cannot build maps, and inferring a
   struct of every key seen cannot tell a null value from an absent key. A top-level field
   whose type holds a map is left out of the bulk parse and taken, for the same records, by
   DuckDB's JSON functions over the same buffer (``json_transform_strict(json_extract(body,
   '/field'), type)``, vectorised; integers come as their JSON text and are cast by Arrow, which
   refuses ``2.5`` where DuckDB would round it), then cast to the Arrow type. Without DuckDB,
   from ``orjson.loads`` per record (each value's JSON kind checked as ``pyarrow.json`` would),
   then ``pyarrow.array(..., type=)``: the same result at the per-record speed of the peer path.
   DuckDB's strict transform also wants every key of an object (``does not have key``): a field
   whose type holds an object with an optional (nullable) property is taken by ``orjson`` even
   where DuckDB is installed (:func:`_all_keys_required` says which fields DuckDB takes).
6. **Required properties of optional objects** (:mod:`._required`): ``pyarrow.json`` checks a
   non-nullable field even where its object is absent, so the parse type has those below a
   nullable object relaxed; after the parse a field null where its object is present is the
   record's error (``a required field was null or absent``, its path), and the rows take the
   wanted type. The maps' paths check no nullability: there every non-nullable field is checked.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.json as pj

from kbatch.codec import binary_column

from ._read import read_json
from ._required import conformed, missing_required, relaxed

try:
    import orjson

    _loads: Callable[[Any], Any] = orjson.loads
except ImportError:  # pragma: no cover - orjson is optional
    _loads = json.loads
_duckdb: Any
try:
    import duckdb as _duckdb
except ImportError:  # pragma: no cover - DuckDB is optional: maps then come from orjson
    _duckdb = None

__all__ = ["BLOCK_RECORDS", "parse_json_values"]

#: A bulk parse that fails is re-parsed in blocks of this many records to find the bad ones.
BLOCK_RECORDS = 1024
#: ``pyarrow.json``'s block size (its default), raised to fit the longest value.
DEFAULT_BLOCK_SIZE = 1 << 20
_OPEN_BRACE = ord("{")
_NEWLINE = ord("\n")
_COLUMN = re.compile(r"Column\((/[^)]*)\)")

Errors = dict[int, tuple[str, str]]


def parse_json_values(
    data: Any,
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    value_type: pa.StructType,
    *,
    column: str = "value",
    stop_at_first: bool = False,
    use_threads: bool = True,
) -> tuple[pa.Array, Errors]:
    """Parse ``n`` JSON bodies into a struct array of ``value_type``.

    Parameters
    ----------
    data : buffer
        The bytes the bodies are in.
    starts, lengths : numpy arrays of int64
        Each body's place in ``data`` (every length >= 0).
    value_type : pyarrow.StructType
        The values' type (:func:`~kbatch.values.json._schema.json_schema_type`).
    column : str
        ``value`` or ``key``: the first part of the error paths.
    stop_at_first : bool
        Stop at the first bad record (its error is then the only one returned).
    use_threads : bool
        Let ``pyarrow.json`` parse blocks on several threads.

    Returns
    -------
    (pyarrow.ChunkedArray, dict)
        ``n`` rows, null where a record did not decode; record index -> ``(reason, path)``.

    Examples
    --------
    >>> data = b'{"a": 1}{"a": "x"}{"a": 3, "b": 0}'
    >>> arr, errors = parse_json_values(data, np.array([0, 8, 18]), np.array([8, 10, 16]),
    ...                                 pa.struct([("a", pa.int64())]))
    >>> arr.to_pylist(), errors
    ([{'a': 1}, None, {'a': 3}], {1: ('JSON parse error: Column(/a) changed from number to string', 'value.a')})
    """
    n = len(starts)
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    parser = _Parser(value_type, column, use_threads, int(lengths.max(initial=0)))
    errors: Errors = {}
    if n == 0:
        return pa.chunked_array([], type=value_type), errors
    u8 = _as_u8(data)
    first = np.full(n, -1, dtype=np.int16)
    nonempty = lengths > 0
    first[nonempty] = u8[starts[nonempty]]
    bulk = np.flatnonzero(first == _OPEN_BRACE)
    alone = np.flatnonzero(first != _OPEN_BRACE)
    pieces: list[tuple[npt.NDArray[np.int64], pa.Array]] = []
    if len(bulk):
        rows, bad = _bulk(parser, u8, starts[bulk], lengths[bulk], stop_at_first)
        errors.update({int(bulk[k]): e for k, e in bad.items()})
        pieces += [(bulk[idx], arr) for idx, arr in rows]
    for i in alone.tolist():
        if stop_at_first and errors and i > min(errors):  # the first bad record is found
            break
        body = bytes(u8[starts[i]:starts[i] + lengths[i]])
        got = parser.one(body)
        if isinstance(got, tuple):
            errors[i] = got
        else:
            pieces.append((np.array([i], dtype=np.int64), got))
    if stop_at_first and errors:
        first_bad = min(errors)
        return pa.chunked_array([pa.nulls(n, value_type)]), {first_bad: errors[first_bad]}
    if len(pieces) == 1 and len(pieces[0][0]) == n:
        return pieces[0][1], errors
    return _assemble(pieces, n, value_type), errors


def _as_u8(data: Any) -> npt.NDArray[np.uint8]:
    if isinstance(data, np.ndarray) and data.dtype == np.uint8:
        return data
    return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)


def _assemble(pieces: list[tuple[npt.NDArray[np.int64], pa.Array]], n: int, value_type: pa.DataType) -> pa.Array:
    """The rows of ``pieces`` (record indices, rows) in record order, null where none."""
    arrays = [chunk for _, arr in pieces for chunk in _chunks(arr)] + [pa.nulls(1, value_type)]
    where = np.full(n, sum(len(idx) for idx, _ in pieces), dtype=np.int64)
    at = 0
    for idx, _ in pieces:
        where[idx] = np.arange(at, at + len(idx))
        at += len(idx)
    return pa.chunked_array([a.cast(value_type) if a.type != value_type else a for a in arrays],
                            type=value_type).take(pa.array(where))


def _chunks(arr: pa.Array | pa.ChunkedArray) -> list[pa.Array]:
    return list(arr.chunks) if isinstance(arr, pa.ChunkedArray) else [arr]


def _bulk(parser: _Parser, u8: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64],
          stop_at_first: bool) -> tuple[list[tuple[npt.NDArray[np.int64], pa.Array]], Errors]:
    """Records that all start with ``{``: joined, checked, parsed; the bad ones found."""
    m = len(starts)
    bodies = binary_column(u8, starts, lengths.astype(np.int32), binary="binary_view")
    joined, offsets = _join(bodies)
    buf = joined.buffers()[2]
    total = int(offsets[-1])
    buf = buf[int(offsets[0]):int(offsets[0]) + total] if buf is not None else pa.py_buffer(b"")
    offsets = offsets - offsets[0]
    bad_utf8: set[int] = set()
    try:
        bodies.cast(pa.string_view())
    except pa.ArrowInvalid:
        bad_utf8 = set(_find_bad(m, lambda lo, hi: _utf8_ok(bodies, lo, hi)))
    starts_in = offsets[0:-1:2]  # each body in buf, then its newline
    ends_in = offsets[1::2]

    def parse(lo: int, hi: int, careful: bool = True) -> pa.ChunkedArray:
        base = int(starts_in[lo])
        return parser.parse(buf[base:int(ends_in[hi - 1]) + 1], starts_in[lo:hi] - base, ends_in[lo:hi] - base,
                            careful)

    errors: Errors = {}
    if not bad_utf8:
        try:
            return [(np.arange(m, dtype=np.int64), parse(0, m, False))], errors
        except _Failure:
            pass
    out: list[tuple[npt.NDArray[np.int64], pa.Array]] = []
    for lo in range(0, m, BLOCK_RECORDS):
        hi = min(m, lo + BLOCK_RECORDS)
        for a, b, got in _blocks(parse, lo, hi, bad_utf8):
            if not isinstance(got, tuple):
                out.append((np.arange(a, b, dtype=np.int64), got))
            elif a in bad_utf8:
                errors[a] = ("invalid UTF-8 in the JSON text", parser.column)
            else:
                errors[a] = got
        if stop_at_first and errors:
            break
    return out, errors


def _join(bodies: pa.Array) -> tuple[pa.Array, npt.NDArray[np.int64]]:
    """``bodies`` (binary_view) back to back, each followed by ``\\n``: a large_binary array of
    ``2n`` entries whose data buffer is the newline-delimited text, and its offsets."""
    n = len(bodies)
    views = np.frombuffer(bodies.buffers()[1], dtype=np.int32)[bodies.offset * 4:(bodies.offset + n) * 4]
    both = np.empty((2 * n, 4), dtype=np.int32)
    both[0::2] = views.reshape(n, 4)
    both[1::2] = (1, _NEWLINE, 0, 0)  # length 1, "\n" inline
    interleaved = pa.Array.from_buffers(pa.binary_view(), 2 * n, [None, pa.py_buffer(both), *bodies.buffers()[2:]])
    joined = interleaved.cast(pa.large_binary())
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int64)[joined.offset:joined.offset + 2 * n + 1]
    return joined, offsets


def _utf8_ok(bodies: pa.Array, lo: int, hi: int) -> bool:
    try:
        bodies[lo:hi].cast(pa.string_view())
    except pa.ArrowInvalid:
        return False
    return True


def _find_bad(m: int, ok: Callable[[int, int], bool]) -> list[int]:
    """The indices in ``[0, m)`` whose single range fails ``ok``, found by halving."""
    bad: list[int] = []
    stack = [(0, m)]
    while stack:
        lo, hi = stack.pop()
        if ok(lo, hi):
            continue
        if hi - lo == 1:
            bad.append(lo)
            continue
        mid = (lo + hi) // 2
        stack += [(mid, hi), (lo, mid)]
    return sorted(bad)


def _blocks(parse: Callable[[int, int], pa.ChunkedArray], lo: int, hi: int,
            skip: set[int]) -> list[tuple[int, int, pa.ChunkedArray | tuple[str, str]]]:
    """``[lo, hi)`` parsed, halved where it fails: ``(a, b, rows or (reason, path))`` in order."""
    if any(lo <= i < hi for i in skip):
        if hi - lo == 1:
            return [(lo, hi, ("", ""))]
        mid = (lo + hi) // 2
        return _blocks(parse, lo, mid, skip) + _blocks(parse, mid, hi, skip)
    try:
        return [(lo, hi, parse(lo, hi))]
    except _Failure as exc:
        if hi - lo == 1:
            return [(lo, hi, exc.error)]
    mid = (lo + hi) // 2
    return _blocks(parse, lo, mid, skip) + _blocks(parse, mid, hi, skip)


class _Failure(Exception):
    def __init__(self, error: tuple[str, str]) -> None:
        super().__init__(error[0])
        self.error = error


class _Parser:
    """``pyarrow.json`` with the explicit schema of the values, dates and maps aside."""

    def __init__(self, value_type: pa.StructType, column: str, use_threads: bool, longest: int = 0) -> None:
        self.value_type = value_type
        # a block holds at least one whole value (a longer one would "straddle two blocks")
        self.block_size = max(DEFAULT_BLOCK_SIZE, longest + 2)
        self.column = column
        self.use_threads = use_threads
        self.python = [f for f in value_type if _has_map(f.type)]  # built by DuckDB or from orjson
        # DuckDB's json_transform_strict wants every key of an object: the fields holding an
        # object with optional properties are built from orjson
        self.strict_ok = {f.name: _all_keys_required(f.type) for f in self.python}
        bulk = [f for f in value_type if not _has_map(f.type)]
        self.bulk_type = pa.struct(bulk)
        self.dated = [_undated(f.type) != f.type for f in bulk]
        # an optional object's required properties are checked where it is present, after the parse
        self.relaxed_type = relaxed(self.bulk_type)
        self.parse_type = relaxed(pa.struct([f.with_type(_undated(f.type)) for f in bulk]))
        self.check_required = self.relaxed_type is not self.bulk_type
        self.options = [pj.ParseOptions(explicit_schema=pa.schema(list(self.parse_type)),
                                        unexpected_field_behavior="ignore", newlines_in_values=careful)
                        for careful in (False, True)]

    def parse(self, buf: pa.Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64],
              careful: bool = True) -> pa.ChunkedArray:
        """The rows of the records at ``buf[starts[k]:ends[k]]`` (newline-delimited text), or
        :class:`_Failure`; ``careful``: blocks cut only between values (a value may hold
        newlines: slower)."""
        rows = len(starts)
        try:
            table = read_json(buf, pj.ReadOptions(use_threads=self.use_threads, block_size=self.block_size),
                              self.options[careful])
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise _Failure(self._error(exc)) from None
        if table.num_rows != rows:
            raise _Failure((f"not one JSON object: {table.num_rows} JSON values in the record"
                            if rows == 1 else "a record is not one JSON object", self.column))
        arr = table.to_struct_array() if table.num_columns else pa.chunked_array([pa.array([{}] * rows,
                                                                                          type=pa.struct([]))])
        chunks = [self._dated(chunk) for chunk in arr.chunks] if any(self.dated) else arr.chunks
        if self.check_required:
            for chunk in chunks:
                missing = missing_required(chunk, self.bulk_type, self.column)
                if missing is not None:
                    raise _Failure(("a required field was null or absent", missing))
            arr = pa.chunked_array([conformed(chunk, self.bulk_type) for chunk in chunks], type=self.bulk_type)
        elif any(self.dated) or arr.type != self.bulk_type:  # pyarrow.json drops nested fields' not-null flags
            arr = pa.chunked_array([_typed(chunk, self.bulk_type) for chunk in chunks], type=self.bulk_type)
        if self.python:
            arr = self._with_maps(buf, starts, ends, arr)
        return arr

    def _dated(self, chunk: pa.StructArray) -> pa.StructArray:
        """A parsed chunk with its date fields (parsed as text) cast to dates: only the fields that
        hold dates are cast (a cast of the whole struct would copy every field)."""
        children = []
        for want, dated in zip(self.relaxed_type, self.dated, strict=True):
            child = chunk.field(want.name)
            if dated:
                try:
                    child = child.cast(want.type)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                    raise _Failure((f"not a valid date: {exc}", f"{self.column}.{want.name}")) from None
            children.append(child)
        fields = [pa.field(f.name, c.type, f.nullable) for f, c in zip(self.relaxed_type, children, strict=True)]
        return _typed(pa.StructArray.from_arrays(children, fields=fields, mask=chunk.is_null()), self.relaxed_type)

    def _with_maps(self, buf: pa.Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64],
                   chunked: pa.ChunkedArray) -> pa.ChunkedArray:
        arr = chunked.combine_chunks()
        fields = {f.name: arr.field(f.name) for f in self.bulk_type}
        by_duckdb = [f for f in self.python if _duckdb is not None and self.strict_ok[f.name]]
        by_orjson = [f for f in self.python if f not in by_duckdb]
        if by_duckdb:
            fields.update(_maps_duckdb(buf, starts, ends, by_duckdb, self.column))
        if by_orjson:
            fields.update(_maps_python(buf, starts, ends, by_orjson, self.column))
        for f in self.python:  # neither path checks nullability
            path = f"{self.column}.{f.name}"
            if not f.nullable and fields[f.name].null_count:
                raise _Failure(("a required field was null or absent", path))
            missing = missing_required(fields[f.name], f.type, path, everywhere=True)
            if missing is not None:
                raise _Failure(("a required field was null or absent", missing))
        return pa.chunked_array([pa.StructArray.from_arrays([fields[f.name] for f in self.value_type],
                                                            fields=list(self.value_type))])

    def one(self, body: bytes) -> pa.ChunkedArray | tuple[str, str]:
        """One record's row, or its ``(reason, path)``."""
        if not body.strip():
            return ("empty value: not a JSON object", self.column)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError:
            return ("invalid UTF-8 in the JSON text", self.column)
        try:
            return self.parse(pa.py_buffer(body + b"\n"), np.zeros(1, np.int64), np.full(1, len(body)))
        except _Failure as exc:
            return exc.error

    def _error(self, exc: Exception) -> tuple[str, str]:
        text = str(exc)
        text = re.sub(r" in row \d+$", "", text)
        m = _COLUMN.search(text)
        path = self.column + (m.group(1).replace("/", ".") if m else "")
        return text, path


def _maps_python(buf: pa.Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64],
                 fields: list[pa.Field], column: str) -> dict[str, pa.Array]:
    """The map-holding ``fields`` of each record, from ``orjson.loads`` (no DuckDB)."""
    text = memoryview(buf)
    try:
        objects = [_loads(text[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)]
    except ValueError as exc:  # pragma: no cover - the bulk parse refused it first
        raise _Failure((f"invalid JSON: {exc}", column)) from None
    out = {}
    for f in fields:
        got = [o.get(f.name) for o in objects]
        for value in got:
            _check_kind(value, f.type, f"{column}.{f.name}")
        try:
            out[f.name] = pa.array(got, type=f.type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise _Failure((f"{type(exc).__name__}: {exc}", f"{column}.{f.name}")) from None
    return out


_KINDS: dict[str, tuple[type, ...]] = {"int64": (int,), "double": (int, float), "bool": (bool,), "string": (str,)}


def _check_kind(value: Any, t: pa.DataType, path: str) -> None:
    """``value`` (from orjson) is of the JSON kind ``t`` wants, as pyarrow.json checks it
    (``pa.array`` would turn 2.5 into 2, or True into 1)."""
    if value is None:
        return
    if pa.types.is_map(t):
        if not isinstance(value, dict):
            raise _Failure((f"expected an object, got {type(value).__name__}", path))
        for v in value.values():
            _check_kind(v, t.item_type, path)
    elif pa.types.is_struct(t):
        if not isinstance(value, dict):
            raise _Failure((f"expected an object, got {type(value).__name__}", path))
        for f in t:
            _check_kind(value.get(f.name), f.type, f"{path}.{f.name}")
    elif pa.types.is_list(t):
        if not isinstance(value, list):
            raise _Failure((f"expected an array, got {type(value).__name__}", path))
        for v in value:
            _check_kind(v, t.value_type, path)
    else:
        kinds = _KINDS.get(str(t))
        if kinds is not None and (not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)):
            raise _Failure((f"expected {t}, got {type(value).__name__} {value!r}", path))


_LOCAL = threading.local()


def _maps_duckdb(buf: pa.Buffer, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64],
                 fields: list[pa.Field], column: str) -> dict[str, pa.Array]:
    """The map-holding ``fields`` of each record, by DuckDB's JSON functions over the bodies
    (``json_transform_strict(json_extract(body, '/field'), type)``: vectorised, no Python object
    per record), cast to the Arrow types."""
    assert _duckdb is not None
    con = getattr(_LOCAL, "duckdb", None)
    if con is None:
        con = _LOCAL.duckdb = _duckdb.connect()
    offsets = np.empty(len(starts) + 1, dtype=np.int64)
    offsets[:-1] = starts
    offsets[-1] = ends[-1] + 1 if len(ends) else 0  # each body with its newline (JSON whitespace)
    bodies = pa.Array.from_buffers(pa.large_string(), len(starts), [None, pa.py_buffer(offsets), buf])
    select = ", ".join(
        f"json_transform_strict(json_extract(b, '{_sql_text(_pointer(f.name))}'), "
        f"'{_sql_text(json.dumps(_duckdb_type(f.type)))}') AS c{k}" for k, f in enumerate(fields))
    con.register("kbatch_bodies", pa.table({"b": bodies}))
    try:
        got = con.sql(f"SELECT {select} FROM kbatch_bodies").to_arrow_table()  # names and types quoted above
    except (_duckdb.Error, UnicodeDecodeError) as exc:
        raise _Failure((f"JSON map: {_duckdb_message(exc)}", column)) from None
    finally:
        con.unregister("kbatch_bodies")
    out = {}
    for k, f in enumerate(fields):
        try:
            out[f.name] = got.column(k).combine_chunks().cast(f.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise _Failure((f"JSON map: {exc}", f"{column}.{f.name}")) from None
    return out


def _duckdb_message(exc: Exception) -> str:
    """The first line of DuckDB's error message. DuckDB quotes the value in some messages, cut at
    a byte count that may fall inside a UTF-8 character: its Python binding then fails to decode
    the message and raises :class:`UnicodeDecodeError`, whose bytes are decoded here leniently."""
    lenient = isinstance(exc, UnicodeDecodeError)
    text = bytes(exc.object).decode("utf-8", errors="replace") if lenient else str(exc)  # type: ignore[attr-defined]
    return (text.splitlines() or [""])[0]


def _pointer(name: str) -> str:
    return "/" + name.replace("~", "~0").replace("/", "~1")


def _sql_text(text: str) -> str:
    return text.replace("'", "''")


def _duckdb_type(t: pa.DataType) -> object:
    """``t`` as a DuckDB ``json_transform`` structure: a type name, ``[item]``, or ``{field: type}``;
    a map as the name ``MAP(VARCHAR, T)``."""
    if pa.types.is_map(t):
        inner = _duckdb_type(t.item_type)
        return f"MAP(VARCHAR, {inner if isinstance(inner, str) else _duckdb_sql(t.item_type)})"
    if pa.types.is_struct(t):
        return {f.name: _duckdb_type(f.type) for f in t}
    if pa.types.is_list(t):
        return [_duckdb_type(t.value_type)]
    return _duckdb_sql(t)


def _duckdb_sql(t: pa.DataType) -> str:
    """``t`` as a DuckDB SQL type name."""
    if pa.types.is_map(t):
        return f"MAP(VARCHAR, {_duckdb_sql(t.item_type)})"
    if pa.types.is_struct(t):
        return "STRUCT(" + ", ".join(f'"{f.name.replace(chr(34), chr(34) * 2)}" {_duckdb_sql(f.type)}'
                                     for f in t) + ")"
    if pa.types.is_list(t):
        return f"{_duckdb_sql(t.value_type)}[]"
    return _SQL_TYPES.get(str(t), "VARCHAR")


#: Integers come as their JSON text, cast by Arrow (DuckDB would round 2.5 to 2).
_SQL_TYPES = {"int64": "JSON", "double": "DOUBLE", "bool": "BOOLEAN", "string": "VARCHAR", "null": "VARCHAR",
              "date32[day]": "DATE", "timestamp[us, tz=UTC]": "TIMESTAMPTZ"}


def _typed(arr: pa.Array, t: pa.DataType) -> pa.Array:
    """``arr`` as type ``t``, which differs only in its fields' nullability (no copy)."""
    return arr if arr.type == t else arr.view(t)


def _all_keys_required(t: pa.DataType) -> bool:
    """Every object in ``t`` has only required (non-nullable) properties: what DuckDB's
    ``json_transform_strict`` takes (it refuses an object that lacks a key)."""
    if pa.types.is_struct(t):
        return all(not f.nullable and _all_keys_required(f.type) for f in t)
    if pa.types.is_map(t):
        return _all_keys_required(t.item_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _all_keys_required(t.value_type)
    return True


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(f.type) for f in t)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    return False


def _undated(t: pa.DataType) -> pa.DataType:
    """``t`` with date32 as string (parsed as text, cast after)."""
    if pa.types.is_date(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_undated(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_undated(t.value_type)))
    return t
