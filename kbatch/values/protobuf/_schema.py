"""Protobuf schemas: registry ``.proto`` text (with its references), a ``.proto`` file or a
descriptor set, compiled to descriptors without a network and without a system ``protoc``.

The compiler is the ``protoc`` that grpcio-tools bundles as a library
(``grpc_tools.protoc.main``): the same parser, import resolution and checks as the registry's
own (Confluent's Java provider uses protobuf-java's), on a temporary folder holding the schema
and every reference under its import name (:attr:`Schema.dependencies`), with the well-known
types (``google/protobuf/*.proto``, shipped with grpcio-tools) and Confluent's
``confluent/meta.proto`` and ``confluent/type/decimal.proto`` (bundled in
``kbatch/values/protobuf/proto/``) on the include path: a registry stores none of those as references.
The result, a ``FileDescriptorSet`` with every import, is loaded into a private upb descriptor
pool, which answers presence, packing, map entries and oneofs for proto2, proto3 and editions
alike.

Message indexes (Confluent's ``MessageIndexes``) name a message of the schema's file:
``[i0, i1, ...]`` is the ``i0``-th top-level message, then its ``i1``-th nested message, ...
"""

from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .._errors import ProtobufSchemaError
from .._schema import Schema, lone_surrogate

__all__ = ["ProtoSchema", "compile_proto", "load_proto", "root_message"]

_BUNDLED = Path(__file__).resolve().parent / "proto"
_LOCK = threading.Lock()  # protoc writes its errors to fd 2, redirected while it runs
_MAIN = "kbatch_schema.proto"


def _require() -> tuple[Any, Any, Any]:
    try:
        from google.protobuf import descriptor_pb2, descriptor_pool, message_factory  # type: ignore[import-untyped,unused-ignore]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ProtobufSchemaError("Protobuf values need the protobuf package: pip install 'kbatch[protobuf]'") \
            from exc
    return descriptor_pb2, descriptor_pool, message_factory


@dataclass(eq=False)
class ProtoSchema:
    """A compiled Protobuf schema: its descriptors (upb) and the message that lays out the output.

    Attributes
    ----------
    file : str
        The schema's own file (the one message indexes point into).
    message : str
        The full name of the message decoded by default (the first of :attr:`file`, or named).
    pool : google.protobuf.descriptor_pool.DescriptorPool
        A private pool with the schema and every import.
    descriptor_set : bytes
        The serialized ``FileDescriptorSet`` (imports included).
    """

    #: the registry's name of the language (as :attr:`Schema.schema_type`)
    schema_type: ClassVar[str] = "PROTOBUF"
    file: str
    message: str
    pool: Any = field(repr=False)
    descriptor_set: bytes = field(repr=False)
    _classes: dict[str, Any] = field(default_factory=dict, repr=False)

    def descriptor(self, name: str | None = None) -> Any:
        """The upb ``Descriptor`` of message ``name`` (default :attr:`message`)."""
        try:
            return self.pool.FindMessageTypeByName(name or self.message)
        except KeyError:
            raise ProtobufSchemaError(f"no message {name or self.message!r} in the schema") from None

    def message_by_indexes(self, indexes: list[int]) -> str:
        """The full name of the message Confluent's message indexes name in :attr:`file`."""
        desc = self.pool.FindFileByName(self.file)
        types = list(desc.message_types_by_name.values())
        name = ""
        for depth, i in enumerate(indexes or [0]):
            if not 0 <= i < len(types):
                where = "top-level message(s)" if depth == 0 else f"nested message(s) in {name}"
                raise ProtobufSchemaError(f"message index {i} out of range: the schema has {len(types)} {where}")
            name = types[i].full_name
            types = list(types[i].nested_types)
        return name

    def message_class(self, name: str | None = None) -> Any:
        """The upb message class of ``name`` (for the merge slow path and tests)."""
        key = name or self.message
        cls = self._classes.get(key)
        if cls is None:
            _, _, message_factory = _require()
            cls = self._classes[key] = message_factory.GetMessageClass(self.descriptor(key))
        return cls

    def with_message(self, name: str) -> ProtoSchema:
        """The same schema decoding message ``name`` (full name, or unqualified in the package)."""
        full = name
        package = self.pool.FindFileByName(self.file).package
        try:
            self.pool.FindMessageTypeByName(full)
        except KeyError:
            full = f"{package}.{name}" if package else name
        self.descriptor(full)
        return ProtoSchema(self.file, full, self.pool, self.descriptor_set, self._classes)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its descriptor set (a pool does not pickle): how Spark ships a reader."""
        return (ProtoSchema.from_descriptor_set, (self.descriptor_set, self.message, self.file))

    @classmethod
    def from_descriptor_set(cls, data: bytes, message: str, file: str | None = None) -> ProtoSchema:
        """A ``FileDescriptorSet`` (``protoc --descriptor_set_out --include_imports``, what
        Spark's ``from_protobuf`` takes) with the message to decode named."""
        descriptor_pb2, descriptor_pool, _ = _require()
        fds = descriptor_pb2.FileDescriptorSet()
        try:
            fds.ParseFromString(data)
        except Exception as exc:  # noqa: BLE001 - upb's DecodeError
            raise ProtobufSchemaError(f"not a FileDescriptorSet: {exc}") from None
        pool = descriptor_pool.DescriptorPool()
        try:
            for fdp in fds.file:
                pool.Add(fdp)
        except Exception as exc:  # noqa: BLE001 - TypeError / KeyError from the pool on a bad set
            raise ProtobufSchemaError(f"descriptor set does not load: {exc}") from None
        if not fds.file:
            raise ProtobufSchemaError("empty descriptor set")
        if file is None:
            file = fds.file[-1].name
            for fdp in fds.file:
                pkg = fdp.package + "." if fdp.package else ""
                if any(message in (pkg + m.name, m.name) for m in fdp.message_type):
                    file = fdp.name
        return ProtoSchema(file, "", pool, bytes(data)).with_message(message)


def compile_proto(schema: Schema | str, message: str | None = None) -> ProtoSchema:
    """Compile registry ``.proto`` text (a :class:`Schema` with its dependencies, or text).

    Raises
    ------
    ProtobufSchemaError
        protoc's own message when the text (or a reference) does not compile.
    """
    if isinstance(schema, str):
        schema = Schema(schema, "PROTOBUF")
    descriptor_pb2, _, _ = _require()
    try:
        from grpc_tools import protoc  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ProtobufSchemaError("compiling .proto text needs grpcio-tools: pip install 'kbatch[protobuf]'") \
            from exc
    wkt = Path(protoc.__file__).resolve().parent / "_proto"
    for name, dep in ((None, schema), *schema.dependencies):
        if (at := lone_surrogate(dep.text)) >= 0:  # protoc reads UTF-8 files
            what = f"schema {schema.id}" if schema.id is not None else "the schema"
            raise ProtobufSchemaError(f"{what if name is None else f'{what}: reference {name!r}'} is not valid "
                                      f"Unicode: a lone surrogate at character {at}")
    # a schema may be a base64 FileDescriptorProto (what confluent-kafka-python's serializer
    # registers): protoc compiles a stub importing its text dependencies, the rest is added as is
    given = _serialized(schema.text, descriptor_pb2)
    ready = {name: fdp for name, dep in schema.dependencies
             if (fdp := _serialized(dep.text, descriptor_pb2)) is not None}
    text = schema.text
    if given is not None:
        text = 'syntax = "proto3";\n' + "".join(f'import "{d}";\n' for d in given.dependency if d not in ready)
    with tempfile.TemporaryDirectory(prefix="kbatch-proto-") as tmp:
        root = Path(tmp) / "src"
        root.mkdir()
        names = {name for name, _ in schema.dependencies}
        main = _MAIN if _MAIN not in names else f"kbatch_{os.getpid()}_{_MAIN}"
        for name, dep in schema.dependencies:
            if name in ready:
                continue
            target = (root / name).resolve()
            if root.resolve() not in target.parents:
                raise ProtobufSchemaError(f"reference name {name!r} is not a relative file name")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(dep.text, encoding="utf-8")
        (root / main).write_text(text, encoding="utf-8")
        out = Path(tmp) / "set.pb"
        log = Path(tmp) / "protoc.log"
        args = ["protoc", f"-I{root}", f"-I{_BUNDLED}", f"-I{wkt}", "--include_imports",
                f"--descriptor_set_out={out}", str(root / main)]
        with _LOCK:
            code = _run_protoc(protoc, args, log)
        if code != 0 or not out.exists():
            lines = log.read_text(errors="replace").replace(str(root) + os.sep, "").splitlines()
            said = "\n".join(x for x in lines if not x.startswith("WARNING: All log messages before")).strip()
            said = said.replace(main, f"schema {schema.id}" if schema.id is not None else "schema")
            raise ProtobufSchemaError(f"the .proto does not compile: {said or f'protoc exited with {code}'}")
        data = out.read_bytes()
    fds = descriptor_pb2.FileDescriptorSet.FromString(data)
    if given is not None:
        kept = [f for f in fds.file if f.name != main]
        del fds.file[:]
        fds.file.extend(kept)
        for name, fdp in ready.items():
            fdp.name = name
            fds.file.append(fdp)
        given.name = main
        fds.file.append(given)
        data = fds.SerializeToString()
    first = next(f for f in fds.file if f.name == main)
    if message is None:
        message = root_message(first)
    return ProtoSchema.from_descriptor_set(data, message, file=main)


def _serialized(text: str, descriptor_pb2: Any) -> Any:
    """``text`` as a base64 ``FileDescriptorProto`` (the registry's ``format=serialized``), or
    None when it is ``.proto`` source."""
    import base64

    if "{" in text or ";" in text:
        return None
    try:
        raw = base64.b64decode("".join(text.split()), validate=True)
        fdp = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except Exception:  # noqa: BLE001 - binascii.Error, upb's DecodeError
        return None
    return fdp if fdp.message_type or fdp.enum_type or fdp.name else None


def root_message(fdp: Any) -> str:
    """The message a schema file is about, by default: its first top-level message that no
    other message of the file refers to (``Order`` in a file of ``Item`` and ``Order``), else
    its first; the same for every batch, whatever the values name."""
    if not fdp.message_type:
        raise ProtobufSchemaError("the schema defines no message")
    prefix = "." + fdp.package + "." if fdp.package else "."
    used: set[str] = set()

    def walk(msg: Any, scope: str) -> None:
        for f in msg.field:
            if f.type_name and not f.type_name.startswith(scope + msg.name + "."):
                used.add(f.type_name)
        for nested in msg.nested_type:
            walk(nested, scope + msg.name + ".")

    for msg in fdp.message_type:
        walk(msg, prefix)
    for msg in fdp.message_type:
        if prefix + msg.name not in used:
            return str(prefix[1:] + msg.name)
    return str(prefix[1:] + fdp.message_type[0].name)


def _run_protoc(protoc: Any, args: list[str], log: Path) -> int:
    """``protoc.main(args)`` with its standard error (fd 2) written to ``log``."""
    saved = os.dup(2)
    try:
        with open(log, "wb") as f:
            os.dup2(f.fileno(), 2)
            try:
                return int(protoc.main(args))
            finally:
                os.dup2(saved, 2)
    finally:
        os.close(saved)


def load_proto(path: str | os.PathLike[str], message: str) -> ProtoSchema:
    """A ``.proto`` file (its imports found beside it, then the bundled ones) or a descriptor
    set file (``.desc``, ``.pb``, ``.binpb``: anything that is not ``.proto``), with the
    message to decode named."""
    p = Path(path)
    if p.suffix != ".proto":
        return ProtoSchema.from_descriptor_set(p.read_bytes(), message)
    deps = _local_imports(p)
    schema = Schema(p.read_text(encoding="utf-8"), "PROTOBUF", dependencies=tuple(deps))
    return compile_proto(schema).with_message(message)


def _local_imports(p: Path) -> list[tuple[str, Schema]]:
    """The files ``p`` imports that sit beside it (by import name), transitively."""
    out: dict[str, Schema] = {}
    todo = [p.read_text(encoding="utf-8")]
    while todo:
        text = todo.pop()
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith("import "):
                continue
            name = line.split('"')[1] if '"' in line else ""
            dep = p.parent / name
            if name and name not in out and dep.is_file():
                out[name] = Schema(dep.read_text(encoding="utf-8"), "PROTOBUF")
                todo.append(out[name].text)
    return list(out.items())
