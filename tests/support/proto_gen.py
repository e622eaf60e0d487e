"""Protobuf test helpers: message classes generated at test time by grpc_tools from .proto text."""

from __future__ import annotations

import importlib
import random
import struct
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def varint(v: int, extra: int = 0) -> bytes:
    """``v`` (unsigned, < 2**64) as a Protobuf varint, ``extra`` bytes longer than it needs
    (over-long, as writers may; at most 10 bytes in all)."""
    out = bytearray()
    while True:
        out.append(v & 0x7F | 0x80)
        v >>= 7
        if not v:
            break
    out += b"\x80" * min(extra, 10 - len(out))
    out[-1] &= 0x7F
    return bytes(out)


def generate(tmp: Path, name: str, text: str) -> Any:
    """Write ``<name>.proto`` under ``tmp``, run grpc_tools' protoc on it and import the module."""
    from grpc_tools import protoc

    (tmp / f"{name}.proto").write_text(text)
    wkt = Path(protoc.__file__).resolve().parent / "_proto"
    code = protoc.main(["protoc", f"-I{tmp}", f"-I{wkt}", f"--python_out={tmp}", str(tmp / f"{name}.proto")])
    assert code == 0, f"protoc failed on {name}.proto"
    sys.path.insert(0, str(tmp))
    try:
        sys.modules.pop(f"{name}_pb2", None)
        return importlib.import_module(f"{name}_pb2")
    finally:
        sys.path.remove(str(tmp))


#: proto3 scalar types the random schemas use
SCALARS = ("int32", "int64", "uint32", "uint64", "sint32", "sint64", "fixed32", "fixed64", "sfixed32",
           "sfixed64", "bool", "string", "bytes", "double", "float")
MAP_KEYS = ("string", "int32", "int64", "uint32", "bool")


def random_proto(draw: Any, package: str) -> tuple[str, list[list[tuple[str, str, str]]]]:
    """A random proto3 file (hypothesis ``draw``): an enum ``E`` and 1-3 messages ``M0..``, each
    with fields ``(name, label, type)``: label ``""``, ``"repeated"`` or ``"map"`` (type then
    ``"key,value"``); type a scalar, ``E`` or an earlier message (no recursion). The last
    message is the root."""
    from hypothesis import strategies as st

    return _random_proto(lambda a, b: draw(st.integers(a, b)), lambda xs: draw(st.sampled_from(xs)), package)


def random_proto_rng(rng: random.Random, package: str) -> tuple[str, list[list[tuple[str, str, str]]]]:
    """:func:`random_proto` drawn from ``rng`` (for the fuzz harnesses)."""
    return _random_proto(rng.randint, rng.choice, package)


def _random_proto(integers: Callable[[int, int], int], sample: Callable[[Sequence[str]], str],
                  package: str) -> tuple[str, list[list[tuple[str, str, str]]]]:
    messages: list[list[tuple[str, str, str]]] = []
    for m in range(integers(1, 3)):
        kinds = [*SCALARS, "E", *(f"M{k}" for k in range(m))]
        fields = []
        for f in range(integers(1, 6)):
            label = sample(["", "", "repeated", "map"])
            if label == "map":
                key = sample(MAP_KEYS)
                value = sample([s for s in kinds if s not in ("float", "double")])
                fields.append((f"f{f}", label, f"{key},{value}"))
            else:
                fields.append((f"f{f}", label, sample(kinds)))
        messages.append(fields)
    lines = ['syntax = "proto3";', f"package {package};", "enum E { E0 = 0; E1 = 1; E2 = 2; }"]
    for m, fields in enumerate(messages):
        body = []
        for n, (name, label, t) in enumerate(fields, start=1):
            decl = f"map<{t.split(',')[0]}, {t.split(',')[1]}>" if label == "map" else \
                f"{label + ' ' if label else ''}{t}"
            body.append(f"  {decl} {name} = {n};")
        lines.append(f"message M{m} {{\n" + "\n".join(body) + "\n}")
    return "\n".join(lines) + "\n", messages


def message_classes(tmp: Path, text: str) -> dict[str, Any]:
    """``text`` compiled by grpc_tools' protoc into a descriptor set under ``tmp``, its messages'
    classes from a fresh descriptor pool (protobuf's message_factory), by short name."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from grpc_tools import protoc

    (tmp / "gen.proto").write_text(text)
    code = protoc.main(["protoc", f"-I{tmp}", f"--descriptor_set_out={tmp / 'gen.desc'}", str(tmp / "gen.proto")])
    assert code == 0, f"protoc failed on\n{text}"
    files = descriptor_pb2.FileDescriptorSet.FromString((tmp / "gen.desc").read_bytes())
    pool = descriptor_pool.DescriptorPool()
    for fdp in files.file:
        pool.Add(fdp)
    (fdp,) = files.file
    return {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.{m.name}"))
            for m in fdp.message_type}


# ---------------------------------------------------------------- random messages and their rows

Spec = list[list[tuple[str, str, str]]]
_INTS = {"int32": (-2**31, 2**31 - 1), "sint32": (-2**31, 2**31 - 1), "sfixed32": (-2**31, 2**31 - 1),
         "uint32": (0, 2**32 - 1), "fixed32": (0, 2**32 - 1), "int64": (-2**63, 2**63 - 1),
         "sint64": (-2**63, 2**63 - 1), "sfixed64": (-2**63, 2**63 - 1), "uint64": (0, 2**64 - 1),
         "fixed64": (0, 2**64 - 1)}


def _random_scalar(rng: random.Random, t: str) -> Any:
    if t in _INTS:
        lo, hi = _INTS[t]
        return rng.choice([0, 1, lo, hi, rng.randint(lo, hi), rng.randint(max(lo, -300), 300)])
    if t == "bool":
        return rng.random() < 0.5
    if t == "string":
        return "".join(rng.choice("aZ0 é€😀") for _ in range(rng.randint(0, 4)))
    if t == "bytes":
        return rng.randbytes(rng.randint(0, 4))
    if t in ("double", "float"):
        v = rng.choice([0.5, -1.5, 1e30, float("inf"), rng.uniform(-1e6, 1e6)])
        return struct.unpack("<f", struct.pack("<f", v))[0] if t == "float" else v
    return rng.randrange(3)  # E


def random_message(rng: random.Random, spec: Spec, classes: dict[str, Any], m: int) -> Any:
    """A random message ``M<m>`` of ``spec`` (:func:`random_proto`), built with ``classes``."""
    msg = classes[f"M{m}"]()
    for name, label, t in spec[m]:
        if label == "map":
            key, value = t.split(",")
            for k in {_random_scalar(rng, key) for _ in range(rng.randint(0, 3))}:
                if value.startswith("M"):
                    getattr(msg, name)[k].CopyFrom(random_message(rng, spec, classes, int(value[1:])))
                else:
                    getattr(msg, name)[k] = _random_scalar(rng, value)
        elif label == "repeated" and t.startswith("M"):
            for _ in range(rng.randint(0, 2)):
                getattr(msg, name).add().CopyFrom(random_message(rng, spec, classes, int(t[1:])))
        elif label == "repeated":
            getattr(msg, name).extend(_random_scalar(rng, t) for _ in range(rng.randint(0, 3)))
        elif t.startswith("M"):
            if rng.random() < 0.5:
                getattr(msg, name).CopyFrom(random_message(rng, spec, classes, int(t[1:])))
        elif rng.random() < 0.7:
            setattr(msg, name, _random_scalar(rng, t))
    return msg


def _norm(t: str, v: Any) -> Any:
    """A scalar as kbatch gives it: unsigned as the same signed bits (Spark), an enum by name (a
    number the enum lacks as protobuf-java names it, as Spark gives it)."""
    if t in ("uint32", "fixed32"):
        return v - 2**32 if v >= 2**31 else v
    if t in ("uint64", "fixed64"):
        return v - 2**64 if v >= 2**63 else v
    return (["E0", "E1", "E2"][v] if 0 <= v < 3 else f"UNKNOWN_ENUM_VALUE_E_{v}") if t == "E" else v


def upb_row(msg: Any, spec: Spec, m: int) -> dict[str, Any]:
    """A upb message ``M<m>`` as kbatch's row of it, normalised (absent -> null, lists empty,
    unsigned as the same signed bits, enums by name, maps as sorted pairs)."""
    from google.protobuf.json_format import MessageToDict

    d = MessageToDict(msg, preserving_proto_field_name=True)
    out: dict[str, Any] = {}
    for name, label, t in spec[m]:
        v = getattr(msg, name)
        if label == "map":
            key, value = t.split(",")
            out[name] = sorted(((_norm(key, k), upb_row(x, spec, int(value[1:])) if value.startswith("M")
                                 else _norm(value, x)) for k, x in v.items()), key=lambda kv: kv[0])
        elif label == "repeated":
            out[name] = [upb_row(x, spec, int(t[1:])) if t.startswith("M") else _norm(t, x) for x in v]
        elif name not in d:  # absent, or a proto3 zero: null (Spark without emit.default.values)
            out[name] = None
        else:
            out[name] = upb_row(v, spec, int(t[1:])) if t.startswith("M") else _norm(t, v)
    return out


def kbatch_row(row: dict[str, Any] | None, spec: Spec, m: int) -> dict[str, Any] | None:
    """kbatch's row (``to_pylist``) of ``M<m>`` normalised as :func:`upb_row` (maps sorted)."""
    if row is None:
        return None
    out: dict[str, Any] = {}
    for name, label, t in spec[m]:
        v = row[name]
        target = t.split(",")[-1]
        sub = (lambda x, m=int(target[1:]): kbatch_row(x, spec, m)) if target.startswith("M") else (lambda x: x)
        if label == "map":
            out[name] = sorted(((k, sub(x)) for k, x in v), key=lambda kv: kv[0])
        elif label == "repeated":
            out[name] = [sub(x) for x in v]
        else:
            out[name] = sub(v)
    return out
