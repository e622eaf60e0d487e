"""Protobuf test helpers: message classes generated at test time by grpc_tools from .proto text."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any


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

    messages: list[list[tuple[str, str, str]]] = []
    for m in range(draw(st.integers(1, 3))):
        kinds = [*SCALARS, "E", *(f"M{k}" for k in range(m))]
        fields = []
        for f in range(draw(st.integers(1, 6))):
            label = draw(st.sampled_from(["", "", "repeated", "map"]))
            if label == "map":
                key = draw(st.sampled_from(MAP_KEYS))
                value = draw(st.sampled_from([s for s in kinds if s not in ("float", "double")]))
                fields.append((f"f{f}", label, f"{key},{value}"))
            else:
                fields.append((f"f{f}", label, draw(st.sampled_from(kinds))))
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
