"""Typed values (issue 27): Confluent-framed Avro values into typed Arrow columns, one thread and two.

Workloads (``KBATCH_BENCH_RECORDS``, default 200,000 records, Confluent framing, 500 records
per batch, decoded once with ``kbatch.decode`` into a ``RecordTable``):

``order``
    The issue's 18-field order record (~220 B): long, string, enum, timestamps, decimal,
    nullable fields, a nested record with a nullable nested record, an array of records, an
    array of strings, a map, a uuid, a date, a fixed.
``flat``
    A flat 5-field record (~35 B): long, int, string, double, boolean.
``order-2-versions``
    The order records, every other one written with the previous version (no ``weight``,
    schema id 2), decoded with the latest as reader: the cost of evolution (the issue: within
    1.2x of one version).

Contenders, same run, same records:

``kbatch``
    ``kbatch.values.decode(table, registry)``: the struct column (Spark's mapping), the
    schema id column, the table's other columns.
``kbatch-2-threads``
    The same with ``threads=2``: the table's two halves decoded at once (the kernel runs
    without the GIL), the column in two chunks.
``fastavro-dicts``
    ``fastavro.schemaless_reader`` per record (the value sliced past its 5-byte frame) into
    a list of dicts: what one writes without kbatch. The "vs." baseline.
``fastavro-dicts-2-threads``
    The same, the two halves in two threads (fastavro holds the GIL: the peer for two threads).
``fastavro-arrow``
    The same, then ``pa.Table.from_pylist``: typed Arrow from fastavro.
``pyruhvro``
    ``pyruhvro.deserialize_array`` (Rust, one thread) on the bodies (the 5-byte frames cut off
    before timing) into Arrow; only where it takes the schema (0.4 panics with "not
    implemented" on the order record's decimal, uuid and fixed fields) and with one writer
    version (it resolves no evolution).
``datafusion``
    ``SessionContext.read_avro(...).to_arrow_table()`` of the same records written once as an
    Avro container file (no codec; the write is not timed), one target partition: DataFusion's
    Rust Avro reader, the issue's arrow-avro reference. One writer version only.
``record-decode+to_arrow``
    Not a contender: kbatch's own record decode of the same batches plus ``to_arrow``, the
    cost the value decode is compared with (the issue: at most 3x on nested values, 1.5x on
    flat ones).

Projection (issue 37), ``test_projection`` on the ``order`` workload, same run, same records:
``kbatch.values.decode(..., fields=["customer", "total"])`` (2 of the 18 fields: a string and a
decimal; the other 16, the arrays and the map among them, walked by the program's ``SKIP``
instructions, not decoded) against the whole decode (``all-18``). The ``2-of-18`` case also
times both interleaved, best of 5 in CPU time (one thread each; wall time on a shared machine
moves with its load), and reports the ratio (the issue's target: 4x on 5,000,000 values;
``KBATCH_BENCH_RECORDS=5000000``).

Run ``PYTHONPATH=. python bench/test_bench_values.py`` for the table (best of 3 interleaved
rounds), or under pytest-benchmark. pyruhvro and datafusion are optional: a contender whose
package is absent, or that cannot read a workload, is shown as such, not timed.
"""

from __future__ import annotations

import datetime
import decimal
import functools
import io
import json
import os
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
fastavro = pytest.importorskip("fastavro")

from workload import BATCH_RECORDS, best_interleaved, machine, report  # noqa: E402

import kbatch  # noqa: E402
from kbatch import values  # noqa: E402
from kbatch.arrow import to_arrow  # noqa: E402

N_RECORDS = int(os.environ.get("KBATCH_BENCH_RECORDS", "200000"))

ORDER = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "status", "type": {"type": "enum", "name": "Status",
                                    "symbols": ["NEW", "PAID", "SHIPPED", "CANCELLED"]}},
        {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "updated_at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]},
        {"name": "total", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
        {"name": "coupon", "type": ["null", "string"]},
        {"name": "note", "type": ["null", "string"]},
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "street", "type": "string"},
            {"name": "city", "type": "string"},
            {"name": "geo", "type": ["null", {"type": "record", "name": "Geo", "fields": [
                {"name": "lat", "type": "double"}, {"name": "lon", "type": "double"}]}]}]}},
        {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
            {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"},
            {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}}]}}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attributes", "type": {"type": "map", "values": "string"}},
        {"name": "request_id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "ship_date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "checksum", "type": {"type": "fixed", "name": "MD5", "size": 16}},
        {"name": "priority", "type": "int"},
        {"name": "gift", "type": "boolean"},
        {"name": "weight", "type": ["null", "float"], "default": None},
    ],
}  # fmt: skip
#: The order record's previous version: no weight (which the reader fills with its default).
ORDER_V1 = dict(ORDER, fields=[f for f in ORDER["fields"] if f["name"] != "weight"])
FLAT = {
    "type": "record", "name": "Flat",
    "fields": [{"name": "id", "type": "long"}, {"name": "n", "type": "int"}, {"name": "name", "type": "string"},
               {"name": "score", "type": "double"}, {"name": "ok", "type": "boolean"}],
}  # fmt: skip
SCHEMAS = {"order": ORDER, "flat": FLAT, "order-2-versions": ORDER}


def order_value(rng: random.Random, i: int) -> dict[str, Any]:
    epoch = datetime.datetime(2026, 1, 1, tzinfo=datetime.timezone.utc)
    return {
        "order_id": 10_000_000 + i,
        "customer": f"customer-{rng.randrange(100000):05d}",
        "status": rng.choice(["NEW", "PAID", "SHIPPED", "CANCELLED"]),
        "created_at": epoch + datetime.timedelta(milliseconds=rng.randrange(10**10)),
        "updated_at": None if rng.random() < 0.3 else epoch + datetime.timedelta(microseconds=rng.randrange(10**13)),
        "total": decimal.Decimal(rng.randrange(10**7)).scaleb(-2),
        "coupon": None if rng.random() < 0.7 else f"C{rng.randrange(1000)}",
        "note": None if rng.random() < 0.8 else "leave at the door",
        "address": {"street": f"{rng.randrange(200)} Main Street", "city": rng.choice(["Oslo", "Lyon", "Porto"]),
                    "geo": None if rng.random() < 0.3 else {"lat": rng.uniform(-90, 90),
                                                            "lon": rng.uniform(-180, 180)}},
        "items": [{"sku": f"SKU-{rng.randrange(10**6)}", "qty": rng.randrange(1, 5),
                   "price": decimal.Decimal(rng.randrange(10**5)).scaleb(-2)} for _ in range(rng.randrange(1, 4))],
        "tags": rng.sample(["gift", "express", "fragile", "eco", "bulk"], rng.randrange(0, 3)),
        "attributes": {"channel": rng.choice(["web", "app"]), "region": "eu"},
        "request_id": uuid.UUID(int=rng.getrandbits(128)),
        "ship_date": datetime.date(2026, 1, 1) + datetime.timedelta(days=rng.randrange(365)),
        "checksum": rng.randbytes(16),
        "priority": rng.randrange(10),
        "gift": rng.random() < 0.1,
        "weight": None if rng.random() < 0.5 else rng.uniform(0, 20),
    }  # fmt: skip


def flat_value(rng: random.Random, i: int) -> dict[str, Any]:
    return {"id": i, "n": rng.randrange(1000), "name": f"name-{rng.randrange(10**6)}", "score": rng.random(),
            "ok": rng.random() < 0.5}


@functools.cache
def framed(kind: str) -> list[bytes]:
    rng = random.Random(27)
    schema = fastavro.parse_schema(SCHEMAS[kind])
    old = fastavro.parse_schema(ORDER_V1)
    make = flat_value if kind == "flat" else order_value
    distinct = []
    for i in range(1000):  # 1,000 distinct values, repeated (fastavro's writer is the slow part)
        out = io.BytesIO()
        previous = kind == "order-2-versions" and i % 2 == 1
        fastavro.schemaless_writer(out, old if previous else schema, make(rng, i))
        distinct.append((b"\x00\x00\x00\x00\x02" if previous else b"\x00\x00\x00\x00\x01") + out.getvalue())
    return [distinct[i % len(distinct)] for i in range(N_RECORDS)]


@functools.cache
def encoded(kind: str) -> bytes:
    return kbatch.encode(framed(kind), max_batch_records=BATCH_RECORDS)


@functools.cache
def table(kind: str) -> kbatch.RecordTable:
    return kbatch.decode(encoded(kind))


@functools.cache
def registry(kind: str) -> values.Registry:
    return values.Registry({1: json.dumps(SCHEMAS[kind]), 2: json.dumps(ORDER_V1)})


def kbatch_values(kind: str) -> int:
    return int(values.decode(table(kind), registry(kind), reader_schema=1).num_rows)


def kbatch_values_2_threads(kind: str) -> int:
    return int(values.decode(table(kind), registry(kind), reader_schema=1, threads=2).num_rows)


def fastavro_dicts(kind: str, part: slice = slice(None)) -> list[Any]:
    schema = fastavro.parse_schema(SCHEMAS[kind])
    reader = fastavro.schemaless_reader
    vals = table(kind).values()[part]
    if kind == "order-2-versions":
        old = fastavro.parse_schema(ORDER_V1)
        return [reader(io.BytesIO(v[5:]), old if v[4] == 2 else schema, schema) for v in vals]
    return [reader(io.BytesIO(v[5:]), schema) for v in vals]


def fastavro_dicts_2_threads(kind: str) -> list[Any]:
    half = N_RECORDS // 2
    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(functools.partial(fastavro_dicts, kind), [slice(0, half), slice(half, None)])
    return first + second


def fastavro_arrow(kind: str) -> int:
    return int(pa.Table.from_pylist(fastavro_dicts(kind)).num_rows)


@functools.cache
def bodies(kind: str) -> list[bytes]:
    return [v[5:] for v in framed(kind)]


def pyruhvro_arrow(kind: str) -> int:
    import pyruhvro

    if kind == "order-2-versions":
        raise NotImplementedError("one writer schema only")
    batch = pyruhvro.deserialize_array(bodies(kind), json.dumps(SCHEMAS[kind]))
    return int(batch.num_rows)


@functools.cache
def container_file(kind: str) -> str:
    """The workload's records as an Avro container file (no codec), written once."""
    schema = fastavro.parse_schema(SCHEMAS[kind])
    path = os.path.join(tempfile.mkdtemp(prefix="kbatch-bench-avro-"), f"{kind}.avro")
    with open(path, "wb") as out:
        fastavro.writer(out, schema, (fastavro.schemaless_reader(io.BytesIO(v), schema) for v in bodies(kind)),
                        codec="null")
    return path


def datafusion_arrow(kind: str) -> int:
    import datafusion

    if kind == "order-2-versions":
        raise NotImplementedError("one writer schema only")
    ctx = datafusion.SessionContext(datafusion.SessionConfig().with_target_partitions(1))
    return int(ctx.read_avro(container_file(kind)).to_arrow_table().num_rows)


def record_decode(kind: str) -> int:
    return int(to_arrow(kbatch.decode(encoded(kind))).num_rows)


CONTENDERS: dict[str, Callable[[str], Any]] = {
    "kbatch": kbatch_values,
    "kbatch-2-threads": kbatch_values_2_threads,
    "fastavro-dicts": fastavro_dicts,
    "fastavro-dicts-2-threads": fastavro_dicts_2_threads,
    "fastavro-arrow": fastavro_arrow,
    "pyruhvro": pyruhvro_arrow,
    "datafusion": datafusion_arrow,
    "record-decode+to_arrow": record_decode,
}
#: Peers that are optional packages (skipped when absent).
OPTIONAL = {"pyruhvro": "pyruhvro", "datafusion": "datafusion"}


def runnable(name: str, kind: str) -> str | None:
    """Why contender ``name`` cannot run ``kind`` here (None: it can)."""
    if name in OPTIONAL:
        try:
            __import__(OPTIONAL[name])
        except ImportError:
            return "not installed"
    try:
        CONTENDERS[name](kind) if name in OPTIONAL else None
    except BaseException as exc:  # pyruhvro panics (a BaseException) on types it lacks
        if isinstance(exc, KeyboardInterrupt):
            raise
        return f"cannot: {type(exc).__name__}: {str(exc)[:60]}"
    return None


@pytest.mark.parametrize("kind", list(SCHEMAS))
@pytest.mark.parametrize("name", list(CONTENDERS))
def test_values(benchmark: Any, name: str, kind: str) -> None:
    why = runnable(name, kind)
    if why:
        pytest.skip(why)
    fn = functools.partial(CONTENDERS[name], kind)
    fn()
    result = benchmark.pedantic(fn, rounds=3, iterations=1)
    assert (len(result) if isinstance(result, list) else result) == N_RECORDS


#: Projection cases: the value fields decoded (None: all 18 of the order record).
PROJECTION: dict[str, list[str] | None] = {"all-18": None, "2-of-18": ["customer", "total"]}


def kbatch_fields(fields: list[str] | None) -> int:
    return int(values.decode(table("order"), registry("order"), reader_schema=1, fields=fields).num_rows)


@pytest.mark.parametrize("case", list(PROJECTION))
def test_projection(benchmark: Any, case: str) -> None:
    fn = functools.partial(kbatch_fields, PROJECTION[case])
    fn()
    assert benchmark.pedantic(fn, rounds=3, iterations=1) == N_RECORDS
    if PROJECTION[case] is not None:
        best = best_cpu({name: functools.partial(kbatch_fields, fields) for name, fields in PROJECTION.items()}, 5)
        ratio = best["all-18"] / best[case]
        benchmark.extra_info.update(best, ratio=ratio)
        report(f"order, {N_RECORDS:,} values, CPU time: {case} {best[case]:.3f} s, all-18 {best['all-18']:.3f} s: "
               f"{ratio:.2f}x", ">= 4x", ratio >= 4)


def best_cpu(fns: dict[str, Callable[[], Any]], rounds: int) -> dict[str, float]:
    """Best CPU time of each of ``fns`` (run once first), over ``rounds`` rounds running each in turn."""
    best = dict.fromkeys(fns, float("inf"))
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.process_time()
            fn()
            best[name] = min(best[name], time.process_time() - t0)
    return best


def test_projection_equals_the_whole_decode_s_fields() -> None:
    whole = values.decode(table("order"), registry("order"), reader_schema=1).column("value")[:1000]
    part = values.decode(table("order"), registry("order"), reader_schema=1,
                         fields=PROJECTION["2-of-18"]).column("value")[:1000]
    assert part.to_pylist() == [{"customer": v["customer"], "total": v["total"]} for v in whole.to_pylist()]


@pytest.mark.parametrize("kind", ["order", "order-2-versions"])
def test_kbatch_equals_fastavro(kind: str) -> None:
    """The benchmarked decode is right: the first 1,000 values as fastavro reads them."""
    out = values.decode(table(kind), registry(kind), reader_schema=1).column("value").to_pylist()[:1000]
    ref = fastavro_dicts(kind)[:1000]
    for got, want in zip(out, ref, strict=True):
        want = dict(want, status=want["status"], request_id=str(want["request_id"]),
                    attributes=list(want["attributes"].items()))
        assert got == want


def main() -> None:
    print(f"machine: {machine()}; {N_RECORDS} records, one thread and two; fastavro {fastavro.__version__}, "
          f"pyarrow {pa.__version__}, Python {sys.version.split()[0]}\n")
    print("| workload | contender | records/s | vs. fastavro-dicts |")
    print("| --- | --- | ---: | ---: |")
    for kind in SCHEMAS:
        why = {name: runnable(name, kind) for name in CONTENDERS}
        best = best_interleaved({name: functools.partial(fn, kind) for name, fn in CONTENDERS.items()
                                 if not why[name]}, 3)
        base = best["fastavro-dicts"]
        for name, t in best.items():
            print(f"| {kind} ({len(framed(kind)[0])} B) | {name} | {N_RECORDS / t:,.0f} | {base / t:.1f}x |")
        for name, reason in why.items():
            if reason:
                print(f"| {kind} | {name} | {reason} | |")
        print(f"| {kind} | kbatch / record-decode+to_arrow | | {best['kbatch'] / best['record-decode+to_arrow']:.2f} |")
        two = best["kbatch"] / best["kbatch-2-threads"]
        print(f"| {kind} | kbatch-2-threads speed-up over kbatch | | {two:.2f}x |")
        if "datafusion" in best:
            print(f"| {kind} | datafusion / kbatch (time) | | {best['datafusion'] / best['kbatch']:.2f} |")
        if kind == "order":
            one_version = best["kbatch"]
        if kind == "order-2-versions":
            print(f"| {kind} | kbatch / kbatch on order (one version) | | {best['kbatch'] / one_version:.2f} |")
    best = best_cpu({name: functools.partial(kbatch_fields, fields) for name, fields in PROJECTION.items()}, 5)
    for name, t in best.items():
        print(f"| order, fields: {name} | kbatch (CPU time) | {N_RECORDS / t:,.0f} | "
              f"{best['all-18'] / t:.2f}x all-18 |")


if __name__ == "__main__":
    main()
