"""Typed values (issue 29): Confluent-framed Protobuf values into typed Arrow columns, one thread.

Workload (``KBATCH_BENCH_RECORDS``, default 200,000 records, Confluent framing with message
indexes ``[0]``, 500 records per batch, decoded once with ``kbatch.decode`` into a
``RecordTable``): the same 18 fields as the Avro bench's order record, in Protobuf: int64,
string, enum, two Timestamps, int64 cents, two proto3 ``optional`` strings, a nested message
with a nested message, a repeated message, a repeated string, a map, a string id, an int32
date, bytes, int32, bool, an ``optional`` float.

Contenders, same run, same records:

``kbatch``
    ``kbatch.values.decode(table, registry)``: the struct column (Spark's mapping), the schema
    id column, the table's other columns.
``upb-parse``
    upb's ``Message.FromString`` per record (the value sliced past its 6-byte frame) into a list
    of messages: parsing only, no Arrow. The issue's goal: kbatch at least 3x this.
``upb+protarrow``
    The same, then ``protarrow.messages_to_table``: typed Arrow from upb. Goal: kbatch at least
    40x this.
``upb+MessageToDict``
    The same, then ``MessageToDict(preserving_proto_field_name=True)`` and
    ``pa.Table.from_pylist``.

Run ``PYTHONPATH=. python bench/test_bench_values_protobuf.py`` for the table (best of 3
interleaved rounds), or under pytest-benchmark.
"""

from __future__ import annotations

import functools
import os
import random
import sys
from collections.abc import Callable
from typing import Any

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("grpc_tools")

from google.protobuf import __version__ as protobuf_version  # noqa: E402
from google.protobuf.json_format import MessageToDict  # noqa: E402
from workload import BATCH_RECORDS, best_interleaved, machine  # noqa: E402

import kbatch  # noqa: E402
from kbatch import values  # noqa: E402

N_RECORDS = int(os.environ.get("KBATCH_BENCH_RECORDS", "200000"))

ORDER = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; CANCELLED = 3; }
  message Geo { double lat = 1; double lon = 2; }
  message Address { string street = 1; string city = 2; Geo geo = 3; }
  message Item { string sku = 1; int32 qty = 2; int64 price_cents = 3; }
  int64 order_id = 1;
  string customer = 2;
  Status status = 3;
  google.protobuf.Timestamp created_at = 4;
  google.protobuf.Timestamp updated_at = 5;
  int64 total_cents = 6;
  optional string coupon = 7;
  optional string note = 8;
  Address address = 9;
  repeated Item items = 10;
  repeated string tags = 11;
  map<string, string> attributes = 12;
  string request_id = 13;
  int32 ship_date = 14;
  bytes checksum = 15;
  int32 priority = 16;
  bool gift = 17;
  optional float weight = 18;
}
"""
SCHEMA = values.compile_proto(ORDER)
Order = SCHEMA.message_class("shop.Order")
FRAME = b"\x00\x00\x00\x00\x01\x00"  # magic, schema id 1, message indexes [0]


def order(rng: random.Random, i: int) -> Any:
    m = Order(order_id=10_000_000 + i, customer=f"customer-{rng.randrange(100000):05d}", status=rng.randrange(4),
              total_cents=rng.randrange(10**7), request_id=f"{rng.getrandbits(128):032x}",
              ship_date=20454 + rng.randrange(365), checksum=rng.randbytes(16), priority=rng.randrange(10),
              gift=rng.random() < 0.1)
    m.created_at.FromMilliseconds(1_767_225_600_000 + rng.randrange(10**10))
    if rng.random() >= 0.3:
        m.updated_at.FromMicroseconds(1_767_225_600_000_000 + rng.randrange(10**13))
    if rng.random() >= 0.7:
        m.coupon = f"C{rng.randrange(1000)}"
    if rng.random() >= 0.8:
        m.note = "leave at the door"
    m.address.street = f"{rng.randrange(200)} Main Street"
    m.address.city = rng.choice(["Oslo", "Lyon", "Porto"])
    if rng.random() >= 0.3:
        m.address.geo.lat, m.address.geo.lon = rng.uniform(-90, 90), rng.uniform(-180, 180)
    for _ in range(rng.randrange(1, 4)):
        m.items.add(sku=f"SKU-{rng.randrange(10**6)}", qty=rng.randrange(1, 5), price_cents=rng.randrange(10**5))
    m.tags.extend(rng.sample(["gift", "express", "fragile", "eco", "bulk"], rng.randrange(0, 3)))
    m.attributes.update({"channel": rng.choice(["web", "app"]), "region": "eu"})
    if rng.random() >= 0.5:
        m.weight = rng.uniform(0, 20)
    return m


@functools.cache
def framed() -> list[bytes]:
    rng = random.Random(29)
    return [FRAME + order(rng, i).SerializeToString() for i in range(N_RECORDS)]


@functools.cache
def table() -> kbatch.RecordTable:
    return kbatch.decode(kbatch.encode(framed(), max_batch_records=BATCH_RECORDS))


REGISTRY = values.Registry({1: values.Schema(ORDER, "PROTOBUF", id=1)})


def kbatch_values() -> int:
    return int(values.decode(table(), REGISTRY).num_rows)


def upb_parse() -> list[Any]:
    parse = Order.FromString
    return [parse(v[6:]) for v in table().values()]


def upb_protarrow() -> int:
    import protarrow

    return int(protarrow.messages_to_table(upb_parse(), Order).num_rows)


def upb_dicts() -> int:
    return int(pa.Table.from_pylist([MessageToDict(m, preserving_proto_field_name=True)
                                     for m in upb_parse()]).num_rows)


CONTENDERS: dict[str, Callable[[], Any]] = {
    "kbatch": kbatch_values,
    "upb-parse": upb_parse,
    "upb+protarrow": upb_protarrow,
    "upb+MessageToDict": upb_dicts,
}


@pytest.mark.parametrize("name", list(CONTENDERS))
def test_values_protobuf(benchmark: Any, name: str) -> None:
    fn = CONTENDERS[name]
    if name == "upb+protarrow":
        pytest.importorskip("protarrow")
    fn()
    result = benchmark.pedantic(fn, rounds=3, iterations=1)
    assert (len(result) if isinstance(result, list) else result) == N_RECORDS


def test_kbatch_equals_upb() -> None:
    """The benchmarked decode is right: the first 300 values field by field as upb reads them."""
    out = values.decode(table(), REGISTRY).column("value").to_pylist()[:300]
    for got, m in zip(out, upb_parse()[:300], strict=True):
        assert got["order_id"] == m.order_id and got["customer"] == m.customer
        assert got["status"] == Order.Status.Name(m.status) if m.status else got["status"] is None
        assert [(i["sku"], i["qty"]) for i in got["items"]] == [(i.sku, i.qty) for i in m.items]
        assert dict(got["attributes"]) == dict(m.attributes) and got["tags"] == list(m.tags)
        assert got["coupon"] == (m.coupon if m.HasField("coupon") else None)
        assert got["weight"] == (pytest.approx(m.weight) if m.HasField("weight") else None)
        assert (got["address"]["geo"] is None) == (not m.address.HasField("geo"))


def main() -> None:
    try:
        import protarrow
        peers = f"protarrow {protarrow.__version__}, "
    except ImportError:
        CONTENDERS.pop("upb+protarrow")
        peers = "protarrow not installed, "
    print(f"machine: {machine()}; {N_RECORDS} records ({len(framed()[0])} B the first), one thread; "
          f"protobuf (upb) {protobuf_version}, {peers}pyarrow {pa.__version__}, Python {sys.version.split()[0]}\n")
    print("| contender | records/s | kbatch is |")
    print("| --- | ---: | ---: |")
    best = best_interleaved(dict(CONTENDERS), 3)
    for name, t in best.items():
        print(f"| {name} | {N_RECORDS / t:,.0f} | {t / best['kbatch']:.1f}x faster |")


if __name__ == "__main__":
    main()
