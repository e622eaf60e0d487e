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
    edits   3 bytes each, applied to copies of the values' bodies (``fixtures.edit_copies``)

Every body is framed with schema id 1 (Confluent's ``0x00`` + int32 id); the valid bodies and
the mutated copies (those an edit changed) decode in one call with ``errors="null"``.

Oracle: the column validates, one row per value, each error row names ``value``; a valid
body's row equals fastavro's reading of it (as ``expected`` / ``expected_arrow`` map it, cut at
``max_depth``), or is an error where fastavro fails too (or the Arrow mapping cannot hold the
value); a mutated body's row is an error or equals fastavro's reading of the same bytes. No
crash, no sanitizer report.

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


def TestOneInput(raw: bytes) -> None:
    if len(raw) < 7:
        return
    p = pair(int.from_bytes(raw[:2], "little"))
    rng = random.Random(int.from_bytes(raw[3:7], "little"))
    valid = [_write(p, random_value(rng, p.writer, p.wnames)) for _ in range(1 + (raw[2] & 7))]
    bodies = valid + fixtures.edit_copies(valid, raw[7:])
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


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
