"""The exceptions of typed values: a registry that cannot answer (here), and a value that does not
decode (:class:`kbatch.errors.ValueDecodeError`, with the rest of kbatch's data errors; re-exported)."""

from __future__ import annotations

from typing import Any

from kbatch.errors import KBatchError, ValueDecodeError

__all__ = [
    "AvroSchemaError", "JsonSchemaError", "ProgramError", "ProtobufSchemaError", "RegistryError",
    "SchemaNotFoundError", "ValueDecodeError", "field_path",
]


class RegistryError(KBatchError, ValueError):
    """A schema registry that cannot answer: a REST call that failed after its retries, a
    ``_schemas`` topic that is not there, a schema file that cannot be read.

    Attributes
    ----------
    reason : str
        What is wrong.
    url : str
        The request (or the root, the file) concerned; ``""`` when none.
    status : int
        The HTTP status of the last answer; ``-1`` when there was none (connection refused,
        timed out) or no HTTP was involved.
    """

    def __init__(self, reason: str, *, url: str = "", status: int = -1) -> None:
        KBatchError.__init__(self, reason)
        self.url = url
        self.status = status
        where = []
        if status >= 0:
            where.append(f"HTTP {status}")
        if url:
            where.append(url)
        self.args = (reason + (f" ({', '.join(where)})" if where else ""),)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_registry, (type(self), self.reason, self.url, self.status))


def _rebuild_registry(cls: type[RegistryError], reason: str, url: str, status: int) -> RegistryError:
    return cls(reason, url=url, status=status)


class SchemaNotFoundError(RegistryError):
    """The registry has no schema for this id, GUID, subject or version.

    Attributes
    ----------
    url : str
        The REST request that answered 404, or ``""`` for a local registry.
    status : int
        404 from a REST registry, ``-1`` for a local one.
    """


class AvroSchemaError(KBatchError, ValueError):
    """An Avro schema that cannot be parsed or compiled: invalid JSON or names, an unknown type,
    a recursive type (not supported), a reader schema that lays out no column for a type.

    A writer schema that cannot be *resolved* against the reader is not this error: its records
    each get a :class:`ValueDecodeError`, and the rest of the table decodes.
    """


class ProtobufSchemaError(KBatchError, ValueError):
    """A Protobuf schema that cannot be compiled or laid out: ``.proto`` text protoc refuses
    (its message quoted), a missing import, an unknown message name, message indexes out of
    range, a recursive message without ``recursive_depth``, or the protobuf / grpcio-tools
    packages missing."""


class JsonSchemaError(KBatchError, ValueError):
    """A JSON Schema that has no Arrow type (several types in one place, ``not``, a recursive
    ``$ref``, a schema allowing any value, ...), that is not JSON, or from which no schema could
    be inferred; :attr:`pointer` is the JSON pointer of the construct (``""``: the root).

    Like :class:`AvroSchemaError`, a problem with a schema, never with one record.
    """

    def __init__(self, reason: str, *, pointer: str = "") -> None:
        KBatchError.__init__(self, reason)
        self.pointer = pointer
        self.args = (f"{reason} - at #{pointer}",)

    def __str__(self) -> str:
        return str(self.args[0])

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_json, (self.reason, self.pointer))


class ProgramError(KBatchError, ValueError):
    """A compiled value program that the verifier refuses: an operand out of range, a jump or a
    call into no live code, a path that writes a column twice or not at all. Always a bug of
    kbatch's compilers, never of the data or the schemas: no kernel runs a program that fails
    verification. The reason names the instruction (its index and field path) and the operand."""


def _rebuild_json(reason: str, pointer: str) -> JsonSchemaError:
    return JsonSchemaError(reason, pointer=pointer)


for _cls in (AvroSchemaError, JsonSchemaError, ProgramError, ProtobufSchemaError, RegistryError, SchemaNotFoundError):
    _cls.__module__ = "kbatch.values"  # where users import them from (tracebacks name them so)


def field_path(path: str, indices: list[int], column: str = "value") -> str:
    """A compiled field path (``value.items[].price``) with the item indexes of the failing
    record filled in (``value.items[2].price``), under ``column``'s name."""
    parts = path.split("[]")
    path = "".join(p + (f"[{indices[k]}]" if k < len(indices) else "[]") for k, p in enumerate(parts[:-1])) + parts[-1]
    return column + path[len("value"):] if column != "value" and path.startswith("value") else path
