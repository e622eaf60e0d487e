"""Fuzz Avro schema evolution: ``kbatch.values.decode(..., reader_schema=reader)`` over values
fastavro wrote with a writer schema, against ``fastavro.schemaless_reader(fo, writer, reader)``.

Each (writer, reader) pair is made from a 16-bit seed (``pair``): a random writer
(``tests/support/avro_random.random_schema``), half of them given an optional array or map of
records (``["null", array<R>]``, issue 34 item 1's shape) and a quarter a field holding the
record itself (``rec: ["null", <itself>]``, decoded with ``max_depth`` 1-3 when the reader keeps
it); the reader evolved from it by the spec's allowed changes (``tests/support/avro_evolve``:
promotions, string <-> bytes, optional fields, fields added with defaults at every depth,
removed fields, enum symbols added or removed behind an enum default, union branches added
and reordered, fields and records renamed behind aliases); Spark's mapping for even seeds,
Arrow's for odd ones. The last 16 pairs are kept (kbatch caches their compiled programs), so
an input costs the values' writing and decoding, not a schema compilation.

Input layout::

    pair    uint16 LE   the pair's seed
    flags   uint8       bits 0-2: number of values - 1
    seed    uint32 LE   the values' seed (``avro_random.random_value`` for the writer)
    proj    uint16 LE   the projection: bits 0-14 seed ``fields`` (``support.projection.draw_fields``:
                        one to four of the reader's field paths, top-level names and dotted paths
                        into nested records, also through ``["null", record]``, now and then with
                        an ancestor or a repeat); bit 15 set: ``walk_tail=False``
    edits   3 bytes each, applied to copies of the values' bodies (``fixtures.edit_copies``)

Every body is framed with schema id 1 (Confluent's ``0x00`` + int32 id); the valid bodies and
the mutated copies (those an edit changed) decode in one call with ``errors="null"``, then again
projected: ``values.decode(..., fields=fields)``, or with bit 15
``values._decode.decode_records(..., fields=fields, walk_tail=False)`` (the writer's top-level
fields after the last one kept are not walked: the lazy scans' narrow decode).

Oracle: the column validates, one row per value, each error row names ``value``; a valid
body's row equals fastavro's reading of it (as ``expected`` / ``expected_arrow`` map it, cut at
``max_depth``), or is an error where fastavro fails too (or the Arrow mapping cannot hold the
value); a mutated body's row is an error or equals fastavro's reading of the same bytes. No
crash, no sanitizer report.

Oracle of the projected decode (``check_projection``); its column validates too, and:

* a row the whole decode reads, the projection reads, to the whole row cut to ``fields``
  (``support.projection.select``: nested records cut likewise; type and values compared as Arrow,
  so NaNs and dates Python cannot hold compare too);
* a row the whole decode refuses may be an error (naming ``value``) or a value: the fault may lie
  in what the projection skips unread (invalid UTF-8, an enum index, a boolean byte, a field that
  does not resolve) or, with ``walk_tail=False``, does not walk at all (anything after the last
  kept field). Such a value must equal fastavro's reading with the reader cut to ``fields``
  (``cut_reader``, the harness's own cut of the JSON) and, for ``walk_tail=False``, the writer
  cut after its last field the cut reader keeps (``cut_writer``; fastavro reads no further, as
  it ignores trailing bytes). fastavro refusing those bytes (other than with a
  ``UnicodeDecodeError``: fastavro's skip of a string checks UTF-8, kbatch's walk does not) is a
  finding. Where the cut schemas cannot be written as JSON (a record kept in part is also
  referenced by name elsewhere in what is kept, or the pair is recursive, whose nested levels
  would be read with the cut top record), the value must equal fastavro's reading with the whole
  reader cut to ``fields`` (``restrict``) when fastavro reads the body, and is not checked when
  it does not or with ``walk_tail=False`` (fastavro would walk the unwalked tail, which may hold
  a count of empty items it loops on).

Run ``python fuzz/fuzz_avro_evolution.py CORPUS_DIR [libFuzzer flags]``, or ``bash fuzz/run.sh``.
"""

from __future__ import annotations

import functools
import io
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import atheris
import fastavro

with atheris.instrument_imports(include=["kbatch"]):
    from kbatch import values
    from kbatch.values._decode import decode_records
    from kbatch.values._fields import FieldTree, field_tree

import fixtures
import oracle
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.avro_evolve import evolve, make_recursive, optional_collection, recursive_field
from support.avro_random import (
    Names,
    Undecodable,
    all_names,
    arrow_plain,
    expected,
    expected_arrow,
    random_schema,
    random_value,
    strip_logical,
)
from support.avro_values import framed
from support.projection import avro_paths, draw_fields, same, select

#: pairs kept (kbatch's own program cache holds 32 readers)
CACHED_PAIRS = 16
MAX_ITEMS = 1 << 12


@dataclass(frozen=True)
class Pair:
    writer: Any
    reader: Any
    wnames: dict[str, Any]
    rnames: dict[str, Any]
    registry: Any
    reader_text: str
    mapping: str
    max_depth: int | None  # a recursive reader's cut
    rec: str | None  # the reader's recursive field
    string_to_bytes: bool  # the reader may read a writer's string as bytes
    parsed: tuple[Any, Any]  # fastavro's parsed (writer, reader), logical types stripped


@functools.lru_cache(maxsize=CACHED_PAIRS)
def pair(seed: int) -> Pair:
    """The (writer, reader) pair of ``seed`` (see the module)."""
    rng = random.Random(seed)
    names = Names()
    writer = random_schema(rng, rng.randint(1, 3), names)
    if seed & 2:
        optional_collection(writer, rng)
    recursive = seed & 12 == 12
    if recursive:
        make_recursive(writer)
    reader = evolve(writer, rng, wide=True)
    rec = recursive_field(reader) if recursive else None
    return Pair(writer, reader, all_names(writer), all_names(reader), values.Registry({1: json.dumps(writer)}),
                json.dumps(reader), "arrow" if seed & 1 else "spark", 1 + seed % 3 if rec else None, rec,
                '"string"' in json.dumps(writer) and '"bytes"' in json.dumps(reader),
                (fastavro.parse_schema(strip_logical(writer)), fastavro.parse_schema(strip_logical(reader))))


def _cut(value: Any, field: str, depth: int, drop: bool) -> Any:
    """What ``max_depth`` keeps of a linked list through ``field``: ``depth`` levels, the last
    with the field None (``drop``: without it)."""
    if value is None:
        return None
    if depth == 1:
        return {k: v for k, v in value.items() if k != field} if drop else {**value, field: None}
    return {**value, field: _cut(value[field], field, depth - 1, drop)}


class _Rejects(Exception):
    """fastavro did not read the body, or its value has no Arrow form under the mapping."""


#: a value Python cannot hold (a date past year 9999 in a mutated body)
_UNHELD = object()


def want(p: Pair, body: bytes) -> Any:
    """fastavro's reading of ``body``, as kbatch's mapping gives it from ``to_pylist``."""
    try:
        raw = fastavro.schemaless_reader(io.BytesIO(body), *p.parsed)  # avro_random.read, parsed once
    except Exception as exc:  # fastavro's own errors: EOFError, UnicodeDecodeError, SchemaResolutionError...
        raise _Rejects(f"{type(exc).__name__}: {exc}") from exc
    if p.rec and p.max_depth:
        raw = _cut(raw, p.rec, p.max_depth, False)  # what is cut is not mapped (nor refused)
    try:
        value = (expected_arrow if p.mapping == "arrow" else expected)(raw, p.reader, p.rnames)
    except Undecodable as exc:
        raise _Rejects(str(exc)) from exc
    except (ValueError, OverflowError, ArithmeticError):
        return _UNHELD
    return _cut(value, p.rec, p.max_depth, True) if p.rec and p.max_depth else value


def _python(column: pa.Array, mapping: str) -> list[Any]:
    """The column's rows as Python values (a row Python cannot hold, e.g. a year past 9999 in a
    mutated value, as the ``_UNHELD`` marker)."""
    convert = arrow_plain if mapping == "arrow" else pa.Array.to_pylist
    try:
        return list(convert(column))
    except (ValueError, OverflowError, ArithmeticError):
        rows = []
        for i in range(len(column)):
            try:
                rows.append(convert(column.take([i]))[0])  # a copy: arrow_plain reads no slice
            except (ValueError, OverflowError, ArithmeticError):
                rows.append(_UNHELD)
        return rows


def _write(p: Pair, value: Any) -> bytes:
    """avro_random.encode with the writer parsed once."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, p.parsed[0], value)
    return out.getvalue()


# ---------------------------------------------------------------- projection

_PRIMITIVE = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _full_name(t: dict[str, Any], ns: str | None) -> str:
    space = t.get("namespace", ns)
    return t["name"] if "." in t["name"] or not space else f"{space}.{t['name']}"


def cut_reader(t: Any, tree: FieldTree | None, names: dict[str, Any], ns: str | None = None,
               cut: set[str] | None = None) -> Any:
    """Reader type ``t`` (JSON) cut to ``tree`` as ``kbatch.values.avro.project_avro`` cuts it: a
    record kept in part is a copy with only its kept fields (same name, aliases, defaults), a
    union of null and one record keeps its shape; a reference to a record kept in part is written
    out in full there (``cut`` collects the full names of the records cut)."""
    if tree is None:
        return t
    if isinstance(t, str):
        t = names[t]
    if isinstance(t, list):
        return [b if b == "null" else cut_reader(b, tree, names, ns, cut) for b in t]
    full = _full_name(t, ns)
    space = t.get("namespace", ns) if "." not in t["name"] else t["name"].rsplit(".", 1)[0]
    if cut is not None:
        cut.add(full)
    keep = dict(tree)
    return {**t, "fields": [{**f, "type": cut_reader(f["type"], keep[f["name"]], names, space, cut)}
                            for f in t["fields"] if f["name"] in keep]}


def _references(t: Any, out: set[str]) -> set[str]:
    """The names ``t`` refers to (not the types it defines)."""
    if isinstance(t, str):
        if t not in _PRIMITIVE:
            out.add(t)
    elif isinstance(t, list):
        for b in t:
            _references(b, out)
    elif isinstance(t, dict):
        kind = t["type"]
        if kind in ("record", "error"):
            for f in t["fields"]:
                _references(f["type"], out)
        elif kind == "array":
            _references(t["items"], out)
        elif kind == "map":
            _references(t["values"], out)
        elif isinstance(kind, (str, list, dict)) and kind not in _PRIMITIVE | {"enum", "fixed"}:
            _references(kind, out)
    return out


def cut_writer(writer: dict[str, Any], reader: dict[str, Any]) -> dict[str, Any]:
    """The writer's top-level record without its fields after the last one ``reader`` (cut)
    keeps: what a ``walk_tail=False`` decode walks. A writer field matches a reader field of its
    name, else one it is an alias of (as the compiler matches them)."""
    last = -1
    for k, wf in enumerate(writer["fields"]):
        if any(rf["name"] == wf["name"] or wf["name"] in rf.get("aliases", ()) for rf in reader["fields"]):
            last = k
    return {**writer, "fields": writer["fields"][:last + 1]}


def restrict(value: Any, tree: FieldTree | None) -> Any:
    """A decoded row (Python, a record as a dict) cut to ``tree``; a field ``max_depth`` cut is
    absent and stays so."""
    if tree is None or value is None:
        return value
    return {name: restrict(value[name], sub) for name, sub in tree if name in value}


@dataclass(frozen=True)
class Projection:
    fields: list[str]
    tree: FieldTree
    walk_tail: bool
    #: fastavro's parsed (writer, reader) cut to the projection, or None where the cut cannot be
    #: written as JSON (see the module)
    parsed: tuple[Any, Any] | None
    reader: Any  # the cut reader (JSON), for the mapping
    rnames: dict[str, Any]


@functools.lru_cache(maxsize=4 * CACHED_PAIRS)
def projection(pair_seed: int, proj: int) -> Projection:
    """The projection ``proj`` (the input's 16 bits) draws from pair ``pair_seed``'s reader."""
    p = pair(pair_seed)
    fields = draw_fields(random.Random(proj & 0x7FFF), avro_paths(p.reader, p.rnames))
    tree = field_tree(fields)
    assert tree is not None
    walk_tail = not proj & 0x8000
    cut: set[str] = set()
    reader = cut_reader(p.reader, tree, p.rnames, cut=cut)
    writer = p.writer if walk_tail else cut_writer(p.writer, reader)
    parsed = None
    if p.rec is None and not any(n in cut or (n in p.rnames and _full_name(p.rnames[n], None) in cut)
                                 for n in _references(reader, set())):
        try:
            parsed = (fastavro.parse_schema(strip_logical(writer)), fastavro.parse_schema(strip_logical(reader)))
        except Exception:  # noqa: BLE001 - a name the cut left undefined (its definition was cut)
            parsed = None
    return Projection(fields, tree, walk_tail, parsed, reader, all_names(reader))


def _projected_want(p: Pair, j: Projection, body: bytes) -> Any:
    """fastavro's reading of ``body`` with the cut schemas, mapped as kbatch maps it."""
    assert j.parsed is not None
    try:
        raw = fastavro.schemaless_reader(io.BytesIO(body), *j.parsed)
    except UnicodeDecodeError:
        return _SKIP  # fastavro's skip of a string checks UTF-8; kbatch's walk does not
    except TypeError:
        return _SKIP  # fastavro's own failure on a cut schema's shape (a record branch in a skipped union)
    except Exception as exc:
        raise _Rejects(f"{type(exc).__name__}: {exc}") from exc
    try:
        return (expected_arrow if p.mapping == "arrow" else expected)(raw, j.reader, j.rnames)
    except Undecodable as exc:
        raise _Rejects(str(exc)) from exc
    except (ValueError, OverflowError, ArithmeticError):
        return _UNHELD


#: no reference to compare with
_SKIP = object()


def check_projection(p: Pair, j: Projection, table: pa.Table, bodies: list[bytes], whole: pa.Table) -> None:
    """The projected decode of ``table`` against the whole one (``whole``) and fastavro (see the
    module)."""
    kw: dict[str, Any] = {"mapping": p.mapping, "max_depth": p.max_depth, "max_items": MAX_ITEMS}
    if j.walk_tail:
        out = values.decode(table, p.registry, reader_schema=p.reader_text, errors="null", fields=j.fields, **kw)
        errors = out.column("value_error").to_pylist()
    else:
        done = decode_records(table, p.registry, "value", p.reader_text, fields=j.fields, walk_tail=False, **kw)
        out = done.table
        errors = [str(done.errors[i]) if i in done.errors else None for i in range(out.num_rows)]
    oracle.check(out.num_rows == len(bodies), "projected: one row per value")
    column = out.column("value").combine_chunks()
    column.validate(full=True)
    whole_errors = whole.column("value_error").to_pylist()
    ok = pa.array([e is None for e in whole_errors])
    what = f"fields={j.fields}, walk_tail={j.walk_tail}"
    for i, (w, e) in enumerate(zip(whole_errors, errors, strict=True)):
        oracle.check(e is None or " - at value" in e, f"projected ({what}): an error without its place: {e!r}")
        oracle.check(w is not None or e is None,
                     f"projected ({what}): value {i} (body {bodies[i].hex()}) decodes whole but not projected: {e}")
    whole_cut = select(whole.column("value"), j.fields)
    oracle.check(column.type == whole_cut.type,
                 f"projected ({what}): type {column.type} != the whole's cut {whole_cut.type}")
    oracle.check(same(column.filter(ok), whole_cut.filter(ok)),
                 f"projected ({what}): rows differ from the whole decode's cut to the fields")
    rows = None
    for i, (w, e) in enumerate(zip(whole_errors, errors, strict=True)):
        if w is None or e is not None:
            continue
        # the whole decode refused this body, the projection read it: a fault only in what it skips
        rows = rows if rows is not None else _python(column, p.mapping)
        where = f"projected ({what}): value {i} (body {bodies[i].hex()}, whole decode: {w})"
        if j.parsed is not None:
            try:
                expect = _projected_want(p, j, bodies[i])
            except _Rejects as exc:
                raise oracle.Finding(f"{where}: kbatch decoded {rows[i]!r}, fastavro (cut schemas): {exc}") from exc
        elif j.walk_tail:
            try:
                expect = want(p, bodies[i])
            except _Rejects:
                continue  # the fault fastavro (whole reader) meets may lie in a skipped field
            if expect is _UNHELD:
                continue  # (what Python cannot hold may be in a field cut away)
            expect = restrict(expect, j.tree)
        else:
            continue
        if expect is _SKIP:
            continue
        oracle.check((rows[i] is _UNHELD and expect is _UNHELD) or oracle.same(rows[i], expect),
                     f"{where}: kbatch {rows[i]!r} != fastavro {expect!r}")


def TestOneInput(raw: bytes) -> None:
    if len(raw) < 9:
        return
    p = pair(int.from_bytes(raw[:2], "little"))
    rng = random.Random(int.from_bytes(raw[3:7], "little"))
    valid = [_write(p, random_value(rng, p.writer, p.wnames)) for _ in range(1 + (raw[2] & 7))]
    bodies = valid + fixtures.edit_copies(valid, raw[9:])
    table = pa.table({"value": pa.array([framed(1, b) for b in bodies], pa.binary())})
    out = values.decode(table, p.registry, reader_schema=p.reader_text, errors="null", mapping=p.mapping,
                        max_depth=p.max_depth, max_items=MAX_ITEMS)
    oracle.check(out.num_rows == len(bodies), "one row per value")
    column = out.column("value").combine_chunks()
    column.validate(full=True)
    errors = out.column("value_error").to_pylist()
    got = _python(column, p.mapping)
    for i, (body, error) in enumerate(zip(bodies, errors, strict=True)):
        oracle.check(error is None or " - at value" in error, f"an error without its place: {error!r}")
        if error is not None and i >= len(valid):
            continue  # a mutated body kbatch refuses: fastavro is not asked (it may loop on a huge count)
        try:
            expect = want(p, body)
        except _Rejects as exc:
            if p.string_to_bytes and str(exc).startswith("UnicodeDecodeError"):
                continue  # a string read as bytes is not checked for UTF-8 (Java's reader does not either)
            if p.max_depth:
                continue  # the levels max_depth cuts are skipped unread; fastavro reads (and may refuse) them
            oracle.check(error is not None, f"value {i} ({'valid' if i < len(valid) else 'mutated'}, "
                                            f"body {body.hex()}): kbatch decoded {got[i]!r}, fastavro: {exc}")
            continue
        oracle.check(error is None, f"valid value {i} (body {body.hex()}): kbatch error {error!r}, "
                                    f"fastavro read {expect!r}")
        oracle.check((got[i] is _UNHELD and expect is _UNHELD) or oracle.same(got[i], expect),
                     f"value {i} ({'valid' if i < len(valid) else 'mutated'}, body {body.hex()}): "
                     f"kbatch {got[i]!r} != fastavro {expect!r}")
    j = projection(int.from_bytes(raw[:2], "little"), int.from_bytes(raw[7:9], "little"))
    check_projection(p, j, table, bodies, out)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
