"""Typed values (issue 29): Confluent-framed JSON Schema values into typed Arrow columns.

Workloads (``KBATCH_BENCH_RECORDS``, default 200,000 records, Confluent framing ``0x00`` + id +
JSON text, 500 records per batch, decoded once with ``kbatch.decode`` into a ``RecordTable``):

``order``
    The Avro bench's 18-field order record as JSON (~560 B): integers, strings, an enum,
    date-time strings, a decimal as a number, nullable fields, a nested object with a nullable
    nested object, an array of objects, an array of strings, a uuid, a date; no map.
``order+map``
    The same with its ``attributes`` field, an object of strings
    (``additionalProperties``): an Arrow map, built by DuckDB's JSON functions for that field
    (``orjson`` per record where DuckDB is not installed).
``flat``
    A flat 5-field object (~80 B): integer, integer, string, number, boolean.

Contenders, same run, same records:

``kbatch``
    ``kbatch.values.decode(table, registry)``: frames, the bodies joined, one
    ``pyarrow.json`` parse with the JSON Schema's explicit Arrow schema, the struct column,
    the schema id column, the table's other columns.
``orjson-arrow``
    ``orjson.loads`` per value (sliced past its 5-byte frame), then ``pa.Table.from_pylist``:
    typed Arrow without kbatch. The "vs." baseline.
``pyarrow.json``
    ``pyarrow.json.read_json`` by itself on the same bodies already joined into one
    newline-delimited buffer (built before timing), with the same explicit schema (map fields
    left out: it cannot build maps): the parse kbatch's decode wraps.

Run ``PYTHONPATH=. python bench/test_bench_values_json.py`` for the table (best of 3
interleaved rounds), or under pytest-benchmark.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import random
import sys
import uuid
from collections.abc import Callable
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pj = pytest.importorskip("pyarrow.json")
orjson = pytest.importorskip("orjson")

from workload import BATCH_RECORDS, best_interleaved, machine  # noqa: E402

import kbatch  # noqa: E402
from kbatch import values  # noqa: E402

N_RECORDS = int(os.environ.get("KBATCH_BENCH_RECORDS", "200000"))

_STR = {"type": "string"}
_NSTR = {"type": ["string", "null"]}
ORDER: dict[str, Any] = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["order_id", "customer", "status", "created_at", "total", "address", "items", "tags", "request_id",
                 "ship_date", "checksum", "priority", "gift"],
    "properties": {
        "order_id": {"type": "integer"},
        "customer": _STR,
        "status": {"type": "string", "enum": ["NEW", "PAID", "SHIPPED", "CANCELLED"]},
        "created_at": {"type": "string", "format": "date-time"},
        "updated_at": {"oneOf": [{"type": "null"}, {"type": "string", "format": "date-time"}]},
        "total": {"type": "number"},
        "coupon": _NSTR,
        "note": _NSTR,
        "address": {"$ref": "#/definitions/Address"},
        "items": {"type": "array", "items": {"$ref": "#/definitions/Item"}},
        "tags": {"type": "array", "items": _STR},
        "request_id": {"type": "string", "format": "uuid"},
        "ship_date": {"type": "string", "format": "date"},
        "checksum": _STR,
        "priority": {"type": "integer"},
        "gift": {"type": "boolean"},
        "weight": {"type": ["number", "null"]},
    },
    "definitions": {
        "Address": {"type": "object", "required": ["street", "city"], "properties": {
            "street": _STR, "city": _STR,
            "geo": {"type": ["object", "null"], "properties": {"lat": {"type": "number"},
                                                                "lon": {"type": "number"}}}}},
        "Item": {"type": "object", "properties": {"sku": _STR, "qty": {"type": "integer"},
                                                  "price": {"type": "number"}}},
    },
}  # fmt: skip
ORDER_MAP = json.loads(json.dumps(ORDER))
ORDER_MAP["properties"]["attributes"] = {"type": "object", "additionalProperties": _STR}
FLAT = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "n": {"type": "integer"}, "name": _STR, "score": {"type": "number"},
                   "ok": {"type": "boolean"}},
}  # fmt: skip
SCHEMAS = {"order": ORDER, "order+map": ORDER_MAP, "flat": FLAT}


def order_value(rng: random.Random, i: int, with_map: bool) -> dict[str, Any]:
    epoch = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    at = epoch + datetime.timedelta(milliseconds=rng.randrange(10**10))
    out = {
        "order_id": 10_000_000 + i,
        "customer": f"customer-{rng.randrange(100000):05d}",
        "status": rng.choice(["NEW", "PAID", "SHIPPED", "CANCELLED"]),
        "created_at": at.isoformat().replace("+00:00", "Z"),
        "updated_at": None if rng.random() < 0.3 else
        (at + datetime.timedelta(microseconds=rng.randrange(10**9))).isoformat().replace("+00:00", "Z"),
        "total": rng.randrange(10**7) / 100,
        "coupon": None if rng.random() < 0.7 else f"C{rng.randrange(1000)}",
        "note": None if rng.random() < 0.8 else "leave at the door",
        "address": {"street": f"{rng.randrange(200)} Main Street", "city": rng.choice(["Oslo", "Lyon", "Porto"]),
                    "geo": None if rng.random() < 0.3 else {"lat": rng.uniform(-90, 90),
                                                            "lon": rng.uniform(-180, 180)}},
        "items": [{"sku": f"SKU-{rng.randrange(10**6)}", "qty": rng.randrange(1, 5),
                   "price": rng.randrange(10**5) / 100} for _ in range(rng.randrange(1, 4))],
        "tags": rng.sample(["gift", "express", "fragile", "eco", "bulk"], rng.randrange(0, 3)),
        "request_id": str(uuid.UUID(int=rng.getrandbits(128))),
        "ship_date": (datetime.date(2026, 1, 1) + datetime.timedelta(days=rng.randrange(365))).isoformat(),
        "checksum": rng.randbytes(16).hex(),
        "priority": rng.randrange(10),
        "gift": rng.random() < 0.1,
        "weight": None if rng.random() < 0.5 else rng.uniform(0, 20),
    }  # fmt: skip
    if with_map:
        out["attributes"] = {"channel": rng.choice(["web", "app"]), "region": "eu"}
    return out


def flat_value(rng: random.Random, i: int) -> dict[str, Any]:
    return {"id": i, "n": rng.randrange(1000), "name": f"name-{rng.randrange(10**6)}", "score": rng.random(),
            "ok": rng.random() < 0.5}


@functools.cache
def framed(kind: str) -> list[bytes]:
    rng = random.Random(29)
    distinct = []
    for i in range(1000):  # 1,000 distinct values, repeated
        value = flat_value(rng, i) if kind == "flat" else order_value(rng, i, kind == "order+map")
        distinct.append(b"\x00\x00\x00\x00\x01" + json.dumps(value).encode())
    return [distinct[i % len(distinct)] for i in range(N_RECORDS)]


@functools.cache
def table(kind: str) -> kbatch.RecordTable:
    return kbatch.decode(kbatch.encode(framed(kind), max_batch_records=BATCH_RECORDS))


@functools.cache
def registry(kind: str) -> values.Registry:
    return values.Registry({1: values.Schema(json.dumps(SCHEMAS[kind]), "JSON")})


@functools.cache
def joined(kind: str) -> pa.Buffer:
    return pa.py_buffer(b"\n".join(v[5:] for v in table(kind).values()) + b"\n")


@functools.cache
def parse_options(kind: str) -> Any:
    t = values.json_schema_type(SCHEMAS[kind])
    fields = [f.with_type(pa.string()) if pa.types.is_date(f.type) else f for f in t
              if not pa.types.is_map(f.type)]
    return pj.ParseOptions(explicit_schema=pa.schema(fields), unexpected_field_behavior="ignore")


def kbatch_values(kind: str) -> int:
    return int(values.decode(table(kind), registry(kind)).num_rows)


def orjson_arrow(kind: str) -> int:
    loads = orjson.loads
    return int(pa.Table.from_pylist([loads(v[5:]) for v in table(kind).values()]).num_rows)


def pyarrow_json(kind: str) -> int:
    return int(pj.read_json(pa.BufferReader(joined(kind)), parse_options=parse_options(kind)).num_rows)


CONTENDERS: dict[str, Callable[[str], Any]] = {
    "kbatch": kbatch_values,
    "orjson-arrow": orjson_arrow,
    "pyarrow.json": pyarrow_json,
}


@pytest.mark.parametrize("kind", list(SCHEMAS))
@pytest.mark.parametrize("name", list(CONTENDERS))
def test_values_json(benchmark: Any, name: str, kind: str) -> None:
    fn = functools.partial(CONTENDERS[name], kind)
    fn()
    assert benchmark.pedantic(fn, rounds=3, iterations=1) == N_RECORDS


@pytest.mark.parametrize("kind", list(SCHEMAS))
def test_kbatch_equals_orjson(kind: str) -> None:
    """The benchmarked decode is right: the first 1,000 values as orjson reads them (times,
    dates and maps in their Arrow form)."""
    out = values.decode(table(kind), registry(kind)).column("value").to_pylist()[:1000]
    for got, body in zip(out, table(kind).values()[:1000], strict=True):
        want = orjson.loads(body[5:])
        for key in ("created_at", "updated_at"):
            if want.get(key) is not None:
                want[key] = datetime.datetime.fromisoformat(want[key])
        if "ship_date" in want:
            want["ship_date"] = datetime.date.fromisoformat(want["ship_date"])
        if "attributes" in want:
            want["attributes"] = list(want["attributes"].items())
        got = {k: v for k, v in got.items() if k in want or v is not None}
        assert got == want


def main() -> None:
    print(f"machine: {machine()}; {N_RECORDS} records; orjson {orjson.__version__}, pyarrow {pa.__version__}, "
          f"Python {sys.version.split()[0]}\n")
    print("| workload | contender | records/s | MB/s | vs. orjson-arrow | vs. pyarrow.json (time) |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for kind in SCHEMAS:
        best = best_interleaved({name: functools.partial(fn, kind) for name, fn in CONTENDERS.items()}, 3)
        size = sum(len(v) for v in framed(kind)) / 1e6
        for name, t in best.items():
            print(f"| {kind} ({len(framed(kind)[0])} B) | {name} | {N_RECORDS / t:,.0f} | {size / t:,.0f} | "
                  f"{best['orjson-arrow'] / t:.1f}x | {t / best['pyarrow.json']:.2f} |")


if __name__ == "__main__":
    main()
