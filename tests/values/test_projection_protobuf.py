"""Projection of Protobuf values (issue 37 item 2): the fields not asked for are left out of the
program's field table, so the kernel skips them as it skips unknown fields. For random ``.proto``
files and messages, and for oneofs written in any order (a kept member's siblings still clear
it), the projected decode equals the whole decode's selected fields."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("grpc_tools")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.projection import assert_projected, draw_fields, struct_paths
from support.proto_gen import message_classes, random_message, random_proto

from kbatch import values
from kbatch.values import ProtoOptions, Registry, Schema

_RUNS = itertools.count()


def decode_both(bodies: list[bytes | None], registry: Registry, fields: list[str],
                **kw: Any) -> tuple[pa.Table, pa.Table]:
    t = pa.table({"value": pa.array(bodies, pa.binary()), "offset": pa.array(range(len(bodies)), pa.int64())})
    return (values.decode(t, registry, errors="null", **kw),
            values.decode(t, registry, errors="null", fields=fields, **kw))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_proto_files_projected_equal_the_whole_decode_s_fields(tmp_path, data) -> None:
    text, spec = data.draw(st.composite(lambda draw: random_proto(draw, "gen"))())
    tmp = tmp_path / f"run{next(_RUNS)}"
    tmp.mkdir()
    classes = message_classes(tmp, text)
    root = len(spec) - 1
    rng = random.Random(data.draw(st.integers(0, 2**32 - 1)))
    msgs = [random_message(rng, spec, classes, root).SerializeToString() for _ in range(4)]
    indexes = bytes([2, 2 * root]) if root else b"\x00"
    bodies: list[bytes | None] = [b"\x00" + (3).to_bytes(4, "big") + indexes + m for m in msgs]
    bodies.append(None)
    bodies.append(bodies[0][:-1] if len(msgs[0]) else b"\x00\x00\x00\x00\x03" + indexes + b"\x0a\x05")  # cut short
    registry = Registry({3: Schema(text, "PROTOBUF", id=3)})
    options = ProtoOptions(message=f"gen.M{root}")
    paths = struct_paths(values.arrow_type(registry.schema(3), protobuf=options))
    fields = draw_fields(rng, paths)
    whole, part = decode_both(bodies, registry, fields, protobuf=options)
    assert_projected(whole, part, fields)
    assert part.column("value").type == values.arrow_type(registry.schema(3), protobuf=options, fields=fields)


ONEOF = """syntax = "proto3";
package oo;
import "google/protobuf/wrappers.proto";
message Inner { int32 a = 1; string b = 2; }
message M {
  oneof pick { string s = 1; Inner m = 2; int64 n = 3; google.protobuf.Int32Value w = 6; }
  int32 other = 4;
  Inner keep = 5;
}
"""
REG = Registry({1: Schema(ONEOF, "PROTOBUF", id=1)})
M = values.compile_proto(ONEOF).message_class("oo.M")
FRAME = b"\x00\x00\x00\x00\x01\x02\x02"  # magic, id 1, message indexes [1]

_inner = st.builds(lambda a, b: {"a": a, "b": b}, st.integers(-5, 5), st.text(max_size=2))
_write = st.one_of(st.tuples(st.just("s"), st.text(max_size=3)), st.tuples(st.just("m"), _inner),
                   st.tuples(st.just("n"), st.integers(-(2**63), 2**63 - 1)),
                   st.tuples(st.just("w"), st.integers(-3, 3)), st.tuples(st.just("other"), st.integers(-3, 3)),
                   st.tuples(st.just("keep"), _inner))
ONEOF_PATHS = ["s", "m", "m.a", "m.b", "n", "w", "other", "keep", "keep.a", "keep.b"]


def fragment(name: str, value: Any) -> bytes:
    """A message of one field set: fragments one after the other are one message, merged."""
    if name == "w":
        return M(w={"value": value}).SerializeToString()
    return M(**{name: value}).SerializeToString()


@settings(max_examples=80, deadline=None)
@given(records=st.lists(st.lists(_write, max_size=5), min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_a_kept_oneof_member_is_cleared_by_a_sibling_left_out(records: list[list[tuple[str, Any]]],
                                                                seed: int) -> None:
    bodies: list[bytes | None] = [FRAME + b"".join(fragment(*w) for w in writes) for writes in records]
    fields = draw_fields(random.Random(seed), ONEOF_PATHS)
    whole, part = decode_both(bodies, REG, fields)
    assert_projected(whole, part, fields)


def test_the_oneof_by_hand() -> None:
    card_then_cash = FRAME + fragment("s", "x") + fragment("n", 9)
    cash_then_card = FRAME + fragment("n", 9) + fragment("s", "x")
    message_then_number = FRAME + fragment("m", {"a": 1, "b": "q"}) + fragment("n", 2)
    _, part = decode_both([card_then_cash, cash_then_card, message_then_number], REG, ["s", "m.a"])
    assert str(part.schema.field("value").type) == "struct<s: string, m: struct<a: int32>>"
    assert part.column("value").to_pylist() == [{"s": None, "m": None}, {"s": "x", "m": None},
                                                {"s": None, "m": None}]


@pytest.mark.parametrize(("fields", "match"), [
    (["nope"], r"fields: value has no field 'nope' \(its fields: s, m, n, w, other, keep\)"),
    (["keep.c"], r"value.keep has no field 'c' \(its fields: a, b\)"),
    (["w.value"], r"value.w is a google.protobuf.Int32Value, not a record"),
    (["other.x"], r"value.other is a scalar field, not a record"),
])  # fmt: skip
def test_unknown_fields_are_errors_naming_the_fields_there_are(fields: list[str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        decode_both([FRAME + fragment("other", 1)], REG, fields)


def test_a_repeated_field_is_not_a_record() -> None:
    text = 'syntax = "proto3"; package r; message I { int32 a = 1; } message R { repeated I xs = 1; }'
    with pytest.raises(ValueError, match=r"value.xs is a repeated field, not a record: it has no field 'a'"):
        values.arrow_type(values.compile_proto(text), fields=["xs.a"])


def test_dead_letters_with_protobuf_projection() -> None:
    good = FRAME + fragment("other", 3) + fragment("keep", {"a": 1, "b": "ok"})
    bad_utf8 = FRAME + fragment("other", 4) + fragment("s", "zz").replace(b"zz", b"\xff\xfe")  # in s, left out
    cut = FRAME + fragment("other", 5) + fragment("keep", {"a": 1, "b": "ok"})[:-1]  # in keep, left out
    raw = pa.table({"value": pa.array([good, bad_utf8, cut], pa.binary()), "offset": pa.array([0, 1, 2], pa.int64())})
    rows, dead = values.split(raw, REG, values=1, fields=["other"])
    assert rows.column("value").to_pylist() == [{"other": 3}, {"other": 4}]
    assert dead.column("offset").to_pylist() == [2] and "truncated" in dead.column("reason").to_pylist()[0]
    _, whole_dead = values.split(raw, REG, values=1)
    assert whole_dead.column("offset").to_pylist() == [1, 2]
