"""An Avro map whose encoded entries repeat a key: one entry per key, holding the last value, where
the key first stood. fastavro reads a map into a dict (first insertion's place, last value); Java's
``GenericDatumReader.readMap`` calls ``Map.put`` for every entry (so Spark's ``from_avro`` keeps the
last value too). The bodies are written by hand (fastavro writes only the leaves: its writer takes a
dict, which cannot repeat a key) and every expectation is fastavro's reading of the same bytes."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.avro_random import all_names, arrow_plain, expected, expected_arrow
from support.refcodec import varlong

import kbatch
from kbatch import values

# ---------------------------------------------------------------- bodies written by hand


@dataclass
class M:
    """A map's encoding: blocks of ``(key, value)`` entries (keys may repeat), each block written
    with a negative count and its byte size when ``sized``."""

    blocks: list[list[tuple[str, Any]]]
    sized: bool = False


@dataclass
class U:
    """A union's value: its branch index and the value."""

    branch: int
    value: Any


def _string(s: str) -> bytes:
    b = s.encode()
    return varlong(len(b)) + b


def enc(t: Any, v: Any) -> bytes:
    """``v`` of type ``t`` in Avro's binary encoding (maps as :class:`M`, unions as :class:`U`)."""
    if isinstance(t, list):
        return varlong(v.branch) + enc(t[v.branch], v.value)
    kind = t if isinstance(t, str) else t["type"]
    if kind == "record":
        return b"".join(enc(f["type"], v[f["name"]]) for f in t["fields"])
    if kind == "array":
        items = b"".join(enc(t["items"], x) for x in v)
        return (varlong(len(v)) + items if v else b"") + b"\x00"
    if kind == "map":
        out = b""
        for block in v.blocks:
            body = b"".join(_string(k) + enc(t["values"], x) for k, x in block)
            out += varlong(-len(block)) + varlong(len(body)) + body if v.sized else varlong(len(block)) + body
        return out + b"\x00"
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(t), v)
    return buf.getvalue()


def _framed(body: bytes) -> bytes:
    return b"\x00\x00\x00\x00\x01" + body


def decode(writer: Any, bodies: list[bytes], reader: Any = None, **kw: Any) -> Any:
    registry = values.Registry({1: json.dumps(writer)})
    table = kbatch.decode(kbatch.encode([_framed(b) for b in bodies]))
    out = values.decode(table, registry, reader_schema=None if reader is None else json.dumps(reader),
                        errors="null", **kw)
    out.column("value").validate(full=True)
    return out


def fastavro_reads(writer: Any, body: bytes, reader: Any = None, arrow: bool = False) -> Any:
    value = fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(writer),
                                       None if reader is None else fastavro.parse_schema(reader))
    t = writer if reader is None else reader
    return (expected_arrow if arrow else expected)(value, t, all_names(t))


def record(fields: dict[str, Any], name: str = "R") -> dict[str, Any]:
    return {"type": "record", "name": name, "fields": [{"name": k, "type": t} for k, t in fields.items()]}


def amap(values_type: Any) -> dict[str, Any]:
    return {"type": "map", "values": values_type}


# ---------------------------------------------------------------- the cases

ITEM = record({"n": "int", "tags": {"type": "array", "items": "string"}, "note": ["null", "string"]}, "Item")
LONG_KEY = "k" * 40
WIDE_KEY = "clé-ünïcødé-" * 5
CASES: dict[str, tuple[Any, Any]] = {
    "one block": (record({"m": amap("int")}), {"m": M([[("a", 1), ("b", 2), ("a", 3)]])}),
    "across blocks": (record({"m": amap("int")}), {"m": M([[("a", 1), ("b", 2)], [("b", 5), ("c", 6), ("a", 7)]])}),
    "sized blocks": (record({"m": amap("long")}),
                     {"m": M([[("a", 1), ("b", 2)], [("b", -5)], [("a", 2**40), ("c", 6)]], sized=True)}),
    "every key the same": (record({"m": amap("string")}), {"m": M([[("x", str(i)) for i in range(9)]])}),
    "no repeat": (record({"m": amap("int")}), {"m": M([[("a", 1), ("b", 2), ("c", 3)]])}),
    "empty and single": (record({"e": amap("int"), "s": amap("int")}), {"e": M([]), "s": M([[("a", 1)]])}),
    "the empty key": (record({"m": amap("int")}), {"m": M([[("", 1), ("a", 2), ("", 3)]])}),
    "long keys": (record({"m": amap("bytes")}),
                  {"m": M([[(LONG_KEY, b"1"), (WIDE_KEY, b"2"), (LONG_KEY[:-1], b"3"), (LONG_KEY, b"4"),
                            (WIDE_KEY, b"")]])}),
    "many entries": (record({"m": amap("int")}), {"m": M([[(f"key{i % 7}", i) for i in range(40)],
                                                          [(f"key{i % 11}", -i) for i in range(30)]])}),
    "keys alike but in the middle": (record({"m": amap("int")}),  # first and last 8 bytes alike
                                     {"m": M([[("abcdefgh-1-stuvwxyz", 1), ("abcdefgh-2-stuvwxyz", 2),
                                               ("abcdefgh-1-stuvwxyz", 3), ("abc-1-xyz", 4), ("abc-2-xyz", 5)]])}),
    "a few dozen entries": (record({"m": amap("int")}), {"m": M([[(f"key{i % 23}", i) for i in range(30)]])}),
    "many distinct": (record({"m": amap("int")}), {"m": M([[(f"k{i}", i) for i in range(100)] + [("k50", -1)]])}),
    "booleans doubles nulls": (record({"b": amap("boolean"), "d": amap("double"), "z": amap("null")}),
                               {"b": M([[("t", True), ("f", False), ("t", False), ("u", True)]]),
                                "d": M([[("x", 1.5), ("y", 2.5), ("x", -0.25)]]),
                                "z": M([[("a", None), ("b", None), ("a", None)]])}),
    "fixed and enum values": (record({"m": amap({"type": "fixed", "name": "F", "size": 3}),
                                      "e": amap({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]})}),
                              {"m": M([[("a", b"abc"), ("b", b"def"), ("a", b"xyz")]]),
                               "e": M([[("p", "A"), ("q", "B"), ("p", "C")]])}),
    "record values with lists": (record({"m": amap(ITEM)}), {"m": M([[
        ("a", {"n": 1, "tags": ["x", "y"], "note": U(1, "first")}),
        ("b", {"n": 2, "tags": [], "note": U(0, None)}),
        ("a", {"n": 3, "tags": ["z"], "note": U(0, None)}),
        ("c", {"n": 4, "tags": ["p", "q", "r"], "note": U(1, "c")}),
        ("b", {"n": 5, "tags": ["s", "t"], "note": U(1, "last b")})]])}),
    "maps in an array": (record({"a": {"type": "array", "items": amap("int")}}),
                         {"a": [M([[("a", 1), ("a", 2)]]), M([]), M([[("b", 1), ("c", 2), ("b", 3)]])]}),
    "map of maps": (record({"m": amap(amap("int"))}), {"m": M([[
        ("x", M([[("a", 1), ("a", 2), ("b", 3)]])),
        ("y", M([[("c", 4)]])),
        ("x", M([[("d", 5), ("e", 6), ("d", 7)], [("e", 8)]])),
        ("z", M([]))]])}),
    "nullable map": (record({"m": ["null", amap("int")], "n": ["null", amap("int")]}),
                     {"m": U(1, M([[("a", 1), ("b", 2), ("a", 3)]])), "n": U(0, None)}),
    "map in a union of members": (record({"u": ["null", "int", amap(ITEM)]}),
                                  {"u": U(2, M([[("a", {"n": 1, "tags": ["x"], "note": U(0, None)}),
                                                 ("a", {"n": 2, "tags": ["y", "z"], "note": U(1, "two")})]]))}),
    "record in a map in a record": (record({"id": "long", "inner": record({"m": amap("string"), "after": "int"},
                                                                          "Inner"), "tail": "string"}),
                                    {"id": 7, "inner": {"m": M([[("a", "1"), ("a", "2")], [("a", "3")]]),
                                                        "after": 9}, "tail": "end"}),
}  # fmt: skip


@pytest.mark.parametrize("mapping", ["spark", "arrow"])
@pytest.mark.parametrize("case", list(CASES))
def test_a_map_repeating_a_key_reads_as_fastavro_reads_it(case: str, mapping: str) -> None:
    schema, value = CASES[case]
    body = enc(schema, value)
    want = fastavro_reads(schema, body, arrow=mapping == "arrow")
    out = decode(schema, [body, body], mapping=mapping)  # twice: the second map's rows after the first's
    assert out.column("value_error").to_pylist() == [None, None]
    if mapping == "arrow":
        assert arrow_plain(out.column("value").combine_chunks()) == [want, want]
    else:
        assert out.column("value").to_pylist() == [want, want]


def test_the_last_value_is_kept_where_the_key_first_stood() -> None:
    schema, value = CASES["across blocks"]
    out = decode(schema, [enc(schema, value)])
    assert out.column("value").to_pylist() == [{"m": [("a", 7), ("b", 5), ("c", 6)]}]


def test_records_around_a_map_repeating_keys_and_a_failing_one_keep_their_rows() -> None:
    schema = record({"m": amap(ITEM), "after": "string"})
    value = {"m": M([[("a", {"n": 1, "tags": ["x"], "note": U(1, "n")}),
                      ("a", {"n": 2, "tags": [], "note": U(0, None)}),
                      ("b", {"n": 3, "tags": ["y"], "note": U(0, None)})]]), "after": "ok"}
    good = enc(schema, value)
    bad = good[:-2]  # the map read (and its keys merged), then the string after it cut short
    out = decode(schema, [good, bad, good])
    want = fastavro_reads(schema, good)
    assert out.column("value").to_pylist() == [want, None, want]
    errors = out.column("value_error").to_pylist()
    assert errors[0] is None and errors[2] is None and "truncated value" in errors[1]


def test_an_evolved_read_keeps_the_last_value_of_a_key() -> None:
    writer = record({"m": amap(record({"n": "int"}, "V")), "gone": amap("int")})
    reader = record({"m": amap(record({"n": "long", "added": {"type": "string"}}, "V"))})
    reader["fields"][0]["type"]["values"]["fields"][1]["default"] = "d"
    body = enc(writer, {"m": M([[("a", {"n": 1}), ("b", {"n": 2}), ("a", {"n": 3})]], sized=True),
                        "gone": M([[("x", 1), ("x", 2)]])})
    out = decode(writer, [body], reader)
    want = fastavro_reads(writer, body, reader)
    assert want == {"m": [("a", {"n": 3, "added": "d"}), ("b", {"n": 2, "added": "d"})]}
    assert out.column("value").to_pylist() == [want]


def test_a_projected_read_keeps_the_last_value_of_a_key() -> None:
    schema = record({"skipped": amap("int"), "m": amap(ITEM), "id": "int"})
    body = enc(schema, {"skipped": M([[("x", 1), ("x", 2)]], sized=True),
                        "m": M([[("a", {"n": 1, "tags": ["x"], "note": U(0, None)}),
                                 ("a", {"n": 2, "tags": ["y"], "note": U(1, "two")})]]), "id": 5})
    out = decode(schema, [body], fields=["m", "id"])
    whole = fastavro_reads(schema, body)
    assert out.column("value").to_pylist() == [{"m": whole["m"], "id": 5}]
    assert whole["m"] == [("a", {"n": 2, "tags": ["y"], "note": "two"})]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=st.lists(st.lists(st.tuples(st.sampled_from(["", "a", "b", "cc", "key-" * 5, "é"]),
                                          st.integers(-(2**31), 2**31 - 1)), max_size=24), max_size=4),
       sized=st.booleans())
def test_any_blocks_of_repeating_keys_read_as_a_dict_of_them(blocks: list[list[tuple[str, int]]], sized: bool) -> None:
    schema = record({"m": amap(record({"v": "int", "l": {"type": "array", "items": "int"}}, "V"))})
    blocks = [b for b in blocks if b]  # a block of no entries ends the map
    value = {"m": M([[(k, {"v": v, "l": [v] * (abs(v) % 3)}) for k, v in b] for b in blocks], sized)}
    body = enc(schema, value)
    last: dict[str, int] = {}
    for b in blocks:
        for k, v in b:
            last[k] = v
    want = {"m": [(k, {"v": v, "l": [v] * (abs(v) % 3)}) for k, v in last.items()]}
    assert fastavro_reads(schema, body) == want
    assert decode(schema, [body]).column("value").to_pylist() == [want]
