"""A log.dirs root holding Confluent-framed Avro values and the registry's ``_schemas`` topic, for the
tests of ``kbatch.values.split`` and ``kbatch convert --values avro``.

:func:`write_avro_root` writes:

- ``_schemas-0``: subject ``orders-value`` versions 1 (id 1) and 2 (id 2: a field added with a
  default), ``orders-key`` version 1 (id 3, a string);
- ``orders-0``: values of both versions interleaved, keys framed with id 3, and the bad values
  :data:`BAD` (an unknown id, a body cut inside ``items[2].price``, no magic byte);
- ``plain-0``: values that are not Avro, in a topic with no subject (stays binary).

The expected decoding is fastavro's (``schemaless_reader(writer, reader)``), in :class:`AvroRoot`.
"""

from __future__ import annotations

import io
import json
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kbatch
from support import schemas_topic

ITEM = {"type": "record", "name": "Item", "fields": [
    {"name": "sku", "type": "string"}, {"name": "price", "type": "double"}]}  # fmt: skip
V1 = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "customer", "type": "string"},
    {"name": "items", "type": {"type": "array", "items": ITEM}}]}  # fmt: skip
V2 = {**V1, "fields": [*V1["fields"],
                       {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]},
                        "default": "NEW"},
                       {"name": "note", "type": ["null", "string"], "default": None}]}  # fmt: skip
KEY = "string"


def framed(schema_id: int, body: bytes) -> bytes:
    """Confluent's frame: 0x00, the id as a big-endian int32, the body."""
    return b"\x00" + struct.pack(">i", schema_id) + body


def avro(schema: Any, value: Any) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


def read_avro(body: bytes, writer: Any, reader: Any) -> Any:
    import fastavro

    return fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(writer), fastavro.parse_schema(reader))


def order(i: int, version: int) -> dict[str, Any]:
    row: dict[str, Any] = {"id": i, "customer": f"c{i}",
                           "items": [{"sku": f"s{i}-{j}", "price": i + j / 4} for j in range(i % 4)]}
    if version == 2:
        row["status"] = "PAID" if i % 2 else "NEW"
        row["note"] = None if i % 3 else f"n{i}"
    return row


def _truncated() -> tuple[bytes, int]:
    """An order whose body ends inside ``items[2].price`` (8 bytes wanted, 3 left), and the byte
    (in the framed value) where that price starts."""
    items = [{"sku": "aaaa", "price": 1.0}, {"sku": "bbbb", "price": 2.0}, {"sku": "cccc", "price": 3.0}]
    body = avro(V1, {"id": 5, "customer": "cut", "items": items})
    return framed(1, body[:-6]), 5 + len(body) - 1 - 8  # the array's end byte and 5 of price's 8 bytes gone


@dataclass
class AvroRoot:
    """What :func:`write_avro_root` wrote and what decoding it must give."""

    root: Path
    #: offset -> the decoded value (fastavro, laid out by V2) of the good records of orders-0
    good: dict[int, Any] = field(default_factory=dict)
    #: offset -> the writer schema id of the good records
    ids: dict[int, int] = field(default_factory=dict)
    #: offset -> (reason prefix, path, byte) of the bad records
    bad: dict[int, tuple[str, str, int | None]] = field(default_factory=dict)
    #: offset -> the decoded key
    keys: dict[int, str] = field(default_factory=dict)
    #: the raw values and keys of orders-0, by offset
    raw: list[bytes] = field(default_factory=list)
    raw_keys: list[bytes] = field(default_factory=list)


def write_avro_root(root: Path, n: int = 40, *, with_schemas: bool = True) -> AvroRoot:
    """The root described in the module's docstring, ``n`` good orders (plus the bad ones)."""
    root.mkdir(parents=True, exist_ok=True)
    if with_schemas:
        schemas_topic.write_topic(root, [
            schemas_topic.schema("orders-value", 1, 1, json.dumps(V1)),
            schemas_topic.schema("orders-key", 1, 3, json.dumps(KEY)),
            schemas_topic.schema("orders-value", 2, 2, json.dumps(V2)),
        ])
    out = AvroRoot(root)
    bad = [
        (framed(99, avro(V1, order(1, 1))), "unknown schema id 99", "value", 1),
        (_truncated()[0], "truncated value", "value.items[2].price", _truncated()[1]),
        (b"{\"id\": 7}", "no schema registry frame", "value", 0),
    ]
    vals: list[bytes] = []
    keys: list[bytes] = []
    offset = 0
    for i in range(n):
        version = 1 + (i % 2)
        body = avro(V1 if version == 1 else V2, order(i, version))
        vals.append(framed(version, body))
        keys.append(framed(3, avro(KEY, f"k{i}")))
        out.good[offset] = read_avro(body, V1 if version == 1 else V2, V2)
        out.ids[offset] = version
        out.keys[offset] = f"k{i}"
        offset += 1
        if i % 13 == 6 and bad:
            value, reason, path, byte = bad.pop(0)
            vals.append(value)
            keys.append(framed(3, avro(KEY, f"bad{offset}")))
            out.bad[offset] = (reason, path, byte)
            out.keys[offset] = f"bad{offset}"
            offset += 1
    assert not bad, "n too small for every bad value"
    out.raw, out.raw_keys = vals, keys
    _write_orders(out)
    with kbatch.LogWriter(root, "plain", 0) as w:
        w.append(kbatch.encode([b"p%d" % j for j in range(5)], base_offset=0,
                               timestamps=[1_700_000_000_000] * 5))
    return out


def _write_orders(r: AvroRoot) -> None:
    """orders-0 written (again) from ``r.raw`` and ``r.raw_keys``, 7 records a batch."""
    shutil.rmtree(r.root / "orders-0", ignore_errors=True)
    vals, keys = r.raw, r.raw_keys
    with kbatch.LogWriter(r.root, "orders", 0, segment_bytes=4000) as w:
        for start in range(0, len(vals), 7):
            part = slice(start, start + 7)
            m = len(vals[part])
            w.append(kbatch.encode(vals[part], keys=keys[part], base_offset=start,
                                   timestamps=[1_700_000_000_000 + 1000 * j for j in range(start, start + m)]))


def grow(r: AvroRoot, more: int = 6) -> None:
    """``more`` good version-2 orders and one bad value (id 98, unknown) appended to orders-0 (a
    later run's new records; the log is written again with its old records first, as
    ``write_log`` grows a log)."""
    start = len(r.raw)
    for k in range(more):
        i = 1000 + k
        body = avro(V2, order(i, 2))
        r.raw.append(framed(2, body))
        r.raw_keys.append(framed(3, avro(KEY, f"k{i}")))
        r.good[start + k] = read_avro(body, V2, V2)
        r.ids[start + k] = 2
        r.keys[start + k] = f"k{i}"
    bad = start + more
    r.raw.append(framed(98, avro(V2, order(bad, 2))))
    r.raw_keys.append(framed(3, avro(KEY, f"bad{bad}")))
    r.bad[bad] = ("unknown schema id 98", "value", 1)
    r.keys[bad] = f"bad{bad}"
    _write_orders(r)
