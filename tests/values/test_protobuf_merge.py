"""Protobuf's merge slow path (``kbatch.values.protobuf._merge``): a singular message written more
than once is merged on the wire, its occurrences' payloads concatenated, every other byte kept.

The fuzz finding behind it: a record whose message field came twice went through upb's
``SerializeToString``, which writes a map's entries in its hash table's order, so the whole
decode gave a map's entries in another order than the projected decode (which skipped the
merged field, so took no slow path) and than every record without a merge (the order in which
each key first came; the last value of a key wins). Each body here is checked three ways: as upb
reads it (maps compared as dicts: upb's order is its own), the whole decode against the projected
ones, and its maps' order against the wire's."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("grpc_tools")
from hypothesis import given, settings
from hypothesis import strategies as st
from support.proto_gen import varint

from kbatch import values
from kbatch.values import Registry, Schema
from kbatch.values.protobuf._merge import Merger

MERGE = """syntax = "proto3";
package mg;
message Inner { int32 a = 1; repeated int32 xs = 2; map<bool, uint32> flags = 4; }
message V { map<string, int32> mm = 1; Inner inner = 2; }
message Root {
  uint64 id = 1;
  Inner one = 2;
  Inner two = 3;
  map<bool, string> b = 4;
  map<string, V> vs = 5;
  oneof pick { Inner left = 6; string right = 7; }
}
"""
SCHEMA = values.compile_proto(MERGE)
ROOT = SCHEMA.message_class("mg.Root")
REG = Registry({1: Schema(MERGE, "PROTOBUF", id=1)})
FRAME = b"\x00\x00\x00\x00\x01\x02\x04"  # magic, id 1, message indexes [2]: mg.Root


def num(number: int, v: int, extra: int = 0) -> bytes:
    return varint(number << 3) + varint(v, extra)


def ld(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def entry(key: bytes, value: bytes) -> bytes:
    """A map entry's payload from its key's and value's encoded fields (either may repeat)."""
    return key + value


def upb_value(msg: Any) -> dict[str, Any]:
    """upb's parse as kbatch's row of it, maps as dicts (an empty one as [], as :func:`as_dicts`
    leaves it), absent -> null, a proto3 zero -> null."""
    out: dict[str, Any] = {}
    for fd in msg.DESCRIPTOR.fields:
        v = getattr(msg, fd.name)
        if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
            vf = fd.message_type.fields_by_name["value"]
            out[fd.name] = {k: upb_value(x) if vf.message_type is not None else x for k, x in v.items()} or []
        elif fd.is_repeated:
            out[fd.name] = [upb_value(x) if fd.message_type is not None else x for x in v]
        elif fd.has_presence:
            out[fd.name] = None if not msg.HasField(fd.name) else upb_value(v) if fd.message_type else v
        else:  # a uint64 as the int64 of its bits, as kbatch
            out[fd.name] = (v - 2**64 if fd.type == fd.TYPE_UINT64 and v >= 2**63 else v) or None
    return out


def as_dicts(row: Any) -> Any:
    """kbatch's row with its maps (lists of pairs) as dicts, recursively."""
    if isinstance(row, dict):
        return {k: as_dicts(v) for k, v in row.items()}
    if isinstance(row, list) and row and isinstance(row[0], tuple):
        return {k: as_dicts(v) for k, v in row}
    if isinstance(row, list):
        return [as_dicts(v) for v in row]
    return row


def decoded(body: bytes, fields: list[str] | None = None) -> dict[str, Any]:
    t = pa.table({"value": pa.array([FRAME + body], pa.binary())})
    out = values.decode(t, REG, errors="null", fields=fields)
    assert out.column("value_error").to_pylist() == [None]
    return out.column("value").to_pylist()[0]  # type: ignore[no-any-return]


def checked(body: bytes) -> dict[str, Any]:
    """The whole decode of ``body``, once it is upb's (maps as dicts) and each top-level field's
    projected decode (``fields=[name]``, where nothing is merged unless that field is) is its cut."""
    row = decoded(body)
    assert as_dicts(row) == upb_value(ROOT.FromString(body))
    for name in row:
        assert decoded(body, [name]) == {name: row[name]}, name
    return row


def test_a_message_written_twice_keeps_a_map_s_wire_order() -> None:
    """The finding, minimal: ``one`` twice (a merge), then the map ``b``'s entries false, true.
    upb would write them back true first; the kernel keeps them as they came."""
    body = ld(2, num(1, 1)) + ld(2, num(1, 2)) + ld(4, entry(num(1, 0), ld(2, b"0a"))) + ld(4, entry(num(1, 1), b""))
    row = checked(body)
    assert row["b"] == [(False, "0a"), (True, "")]
    assert row["one"] == {"a": 2, "xs": [], "flags": []}
    # what the slow path decoded before: upb's serialization, the key true first
    assert ROOT.FromString(body).SerializeToString().startswith(b"\x12\x02\x08\x02\x22\x04\x08\x01")


def test_a_key_written_twice_inside_an_entry() -> None:
    """An entry's key (and value) written twice, the first overlong: the last of each counts, in
    the entry's place; a later entry of the same key wins in the first one's place."""
    merge = ld(3, b"") + ld(3, num(1, 7))
    first = ld(4, entry(num(1, 1, 3) + num(1, 0, 2), ld(2, b"x") + ld(2, b"false")))  # key true, then false
    second = ld(4, entry(num(1, 0) + num(1, 1, 4), ld(2, b"true")))  # key false, then true
    third = ld(4, entry(num(1, 1), ld(2, b"TRUE")))
    row = checked(merge + first + second + third + ld(3, num(1, 8)))
    assert row["b"] == [(False, "false"), (True, "TRUE")]
    assert row["two"] == {"a": 8, "xs": [], "flags": []}


def test_maps_inside_a_message_written_twice_are_concatenated() -> None:
    """``one`` and ``two`` each written three times, their maps' entries spread over the
    occurrences, keys repeated across them: one map each, keys where they first came, the last
    values; a list inside concatenated; a root map between the occurrences keeps its own order."""
    def inner(a: int, xs: list[int], flags: list[tuple[int, int]]) -> bytes:
        return (num(1, a) if a else b"") + b"".join(num(2, x) for x in xs) + b"".join(
            ld(4, entry(num(1, k), num(2, v))) for k, v in flags)

    body = (ld(2, inner(1, [1], [(1, 10)])) + ld(3, inner(0, [], [(0, 5), (1, 6)]))
            + ld(4, entry(num(1, 1), ld(2, b"t"))) + ld(2, inner(0, [2, 3], [(0, 20), (1, 11)]))
            + ld(4, entry(num(1, 0), ld(2, b"f"))) + ld(3, inner(4, [], [(0, 7)])) + ld(2, inner(0, [], [(1, 12)])))
    row = checked(body)
    assert row["one"] == {"a": 1, "xs": [1, 2, 3], "flags": [(True, 12), (False, 20)]}
    assert row["two"] == {"a": 4, "xs": [], "flags": [(False, 7), (True, 6)]}
    assert row["b"] == [(True, "t"), (False, "f")]


def test_maps_of_messages_with_maps_and_merges_inside_their_values() -> None:
    """``vs``: map<string, V>, V holding a map and a message; a value's ``inner`` written twice
    (merged inside the entry), a value written twice inside one entry (merged too), a key
    repeated across entries (the last entry's whole value wins, in the first one's place)."""
    def v(mm: list[tuple[str, int]], *inners: bytes) -> bytes:
        return b"".join(ld(1, entry(ld(1, k.encode()), num(2, x))) for k, x in mm) + b"".join(ld(2, i) for i in inners)

    flags = ld(4, entry(num(1, 1), num(2, 3))) + ld(4, entry(num(1, 0), num(2, 4)))
    a1 = ld(5, entry(ld(1, b"a"), ld(2, v([("x", 1), ("y", 2), ("x", 3)], num(1, 1) + flags,
                                          ld(4, entry(num(1, 1), num(2, 9)))))))
    b1 = ld(5, entry(ld(1, b"b"), ld(2, v([("q", 1)])) + ld(2, v([("p", 2), ("q", 5)], num(2, 6)))))
    a2 = ld(5, entry(ld(1, b"a"), ld(2, v([("z", 9)], num(1, 5)))))
    c1 = ld(5, entry(ld(1, b"c"), ld(2, v([], flags, flags + num(2, 1)))))
    row = checked(a1 + ld(2, b"") + b1 + ld(2, num(1, 3)) + c1 + a2)
    assert [k for k, _ in row["vs"]] == ["a", "b", "c"]
    assert dict(row["vs"])["a"] == {"mm": [("z", 9)], "inner": {"a": 5, "xs": [], "flags": []}}
    assert dict(row["vs"])["b"] == {"mm": [("q", 5), ("p", 2)], "inner": {"a": None, "xs": [6], "flags": []}}
    assert dict(row["vs"])["c"]["inner"] == {"a": None, "xs": [1], "flags": [(True, 3), (False, 4)]}
    assert row["one"] == {"a": 3, "xs": [], "flags": []}


def test_a_oneof_message_member_merges_until_a_sibling_clears_it() -> None:
    """``left`` twice: merged; ``right`` then clears it, and ``left`` after starts afresh."""
    flags = ld(4, entry(num(1, 0), num(2, 1))) + ld(4, entry(num(1, 1), num(2, 2)))
    merged = ld(6, num(1, 1) + flags) + ld(6, num(2, 4) + ld(4, entry(num(1, 0), num(2, 3))))
    row = checked(merged + ld(4, entry(num(1, 1), b"")) + ld(4, entry(num(1, 0), b"")))
    assert row["left"] == {"a": 1, "xs": [4], "flags": [(False, 3), (True, 2)]} and row["right"] is None
    assert row["b"] == [(True, ""), (False, "")]
    row = checked(merged + ld(7, b"r") + ld(6, num(2, 5) + flags) + ld(6, num(1, 6)))
    assert row["left"] == {"a": 6, "xs": [5], "flags": [(False, 1), (True, 2)]} and row["right"] is None
    row = checked(merged + ld(7, b"r"))
    assert row["left"] is None and row["right"] == "r"


_kv = st.tuples(st.booleans(), st.integers(0, 3))
_inner = st.tuples(st.integers(0, 2), st.lists(st.integers(0, 3), max_size=2), st.lists(_kv, max_size=3))
_piece = st.one_of(st.tuples(st.sampled_from([2, 3, 6]), _inner), st.tuples(st.just(4), _kv),
                   st.tuples(st.just(7), st.text(max_size=2)), st.tuples(st.just(1), st.integers(0, 2**64 - 1)))


def _encode(pieces: list[tuple[int, Any]], extra: int) -> bytes:
    out = b""
    for number, value in pieces:
        if number in (2, 3, 6):
            a, xs, flags = value
            out += ld(number, num(1, a, extra) + b"".join(num(2, x) for x in xs) + b"".join(
                ld(4, num(1, int(k), extra) + num(2, x)) for k, x in flags))
        elif number == 4:
            out += ld(4, num(1, int(value[0]), extra) + ld(2, str(value[1]).encode()))
        elif number == 7:
            out += ld(7, value.encode())
        else:
            out += num(1, value, extra)
    return out


@settings(max_examples=120, deadline=None)
@given(pieces=st.lists(_piece, max_size=12), extra=st.integers(0, 2))
def test_random_fragments_merged_on_the_wire_are_upb_s_merge(pieces: list[tuple[int, Any]], extra: int) -> None:
    """Fragments of ``Root`` one after the other: the rewrite parses (upb) to the message the
    body parses to, and each map's entries decode in the order their keys first came."""
    body = _encode(pieces, extra)
    assert ROOT.FromString(Merger(ROOT.DESCRIPTOR)(body)) == ROOT.FromString(body)
    row = checked(body)
    first: list[bool] = []
    for number, value in pieces:
        if number == 4 and value[0] not in first:
            first.append(value[0])
    assert [k for k, _ in row["b"]] == first


def test_a_body_the_rewrite_cannot_walk_is_refused() -> None:
    with pytest.raises(ValueError, match="cut short"):
        Merger(ROOT.DESCRIPTOR)(ld(2, b"") + b"\x12\x05ab")
    with pytest.raises(ValueError, match="wire type 7"):
        Merger(ROOT.DESCRIPTOR)(b"\x0f")
    with pytest.raises(ValueError, match="unmatched end of group"):
        Merger(ROOT.DESCRIPTOR)(b"\x4b\x54")
