"""Protobuf values of random ``.proto`` files: hypothesis draws a proto3 file (scalars, an enum,
nested, repeated and map fields), grpc_tools' protoc compiles it at test time, protobuf's
message_factory builds random messages, and kbatch's decoding equals upb's
``MessageToDict(preserving_proto_field_name=True)`` normalised (absent -> null, lists empty,
unsigned as the same signed bits, enums by name, maps as sorted pairs)."""

from __future__ import annotations

import itertools
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("grpc_tools")
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.proto_gen import kbatch_row, message_classes, random_proto, upb_row

from kbatch import values
from kbatch.values import ProtoOptions, Registry, Schema

_RUNS = itertools.count()
_INTS = {"int32": (-2**31, 2**31 - 1), "sint32": (-2**31, 2**31 - 1), "sfixed32": (-2**31, 2**31 - 1),
         "uint32": (0, 2**32 - 1), "fixed32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
         "sint64": (-2**63, 2**63 - 1), "sfixed64": (-2**63, 2**63 - 1), "uint64": (0, 2**64 - 1),
         "fixed64": (0, 2**64 - 1)}
_OTHER = {"bool": st.booleans(), "string": st.text(max_size=4), "bytes": st.binary(max_size=4),
          "double": st.floats(allow_nan=False).map(lambda x: x + 0.0),  # no -0.0: a zero, so absent
          "float": st.floats(width=32, allow_nan=False).map(lambda x: x + 0.0), "E": st.sampled_from([0, 1, 2])}

Spec = list[list[tuple[str, str, str]]]


def _scalar(t: str) -> st.SearchStrategy[Any]:
    return st.integers(*_INTS[t]) if t in _INTS else _OTHER[t]


def _build(data: Any, spec: Spec, classes: dict[str, Any], m: int) -> Any:
    """A random message ``M<m>`` of ``spec``."""
    msg = classes[f"M{m}"]()
    for name, label, t in spec[m]:
        if label == "map":
            key, value = t.split(",")
            for k in data.draw(st.lists(_scalar(key), max_size=3, unique=True)):
                if value.startswith("M"):
                    getattr(msg, name)[k].CopyFrom(_build(data, spec, classes, int(value[1:])))
                else:
                    getattr(msg, name)[k] = data.draw(_scalar(value))
        elif label == "repeated" and t.startswith("M"):
            for _ in range(data.draw(st.integers(0, 2))):
                getattr(msg, name).add().CopyFrom(_build(data, spec, classes, int(t[1:])))
        elif label == "repeated":
            getattr(msg, name).extend(data.draw(st.lists(_scalar(t), max_size=3)))
        elif t.startswith("M"):
            if data.draw(st.booleans()):
                getattr(msg, name).CopyFrom(_build(data, spec, classes, int(t[1:])))
        elif data.draw(st.booleans()):
            setattr(msg, name, data.draw(_scalar(t)))
    return msg


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_random_proto_files_decode_like_upb(tmp_path, data) -> None:
    text, spec = data.draw(st.composite(lambda draw: random_proto(draw, "gen"))())
    tmp = tmp_path / f"run{next(_RUNS)}"
    tmp.mkdir()
    classes = message_classes(tmp, text)
    root = len(spec) - 1
    msgs = [_build(data, spec, classes, root) for _ in range(3)]
    indexes = bytes([2, 2 * root]) if root else b"\x00"  # zigzag count 1, then the root's index
    framed = [b"\x00" + (3).to_bytes(4, "big") + indexes + m.SerializeToString() for m in msgs]
    out = values.decode(pa.table({"value": pa.array(framed, pa.binary())}),
                        Registry({3: Schema(text, "PROTOBUF", id=3)}), protobuf=ProtoOptions(message=f"gen.M{root}"))
    rows = out.column("value").to_pylist()
    for msg, row in zip(msgs, rows, strict=True):
        assert kbatch_row(row, spec, root) == upb_row(msg, spec, root), text
