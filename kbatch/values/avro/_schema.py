"""Avro schemas (JSON, Avro 1.12) parsed into a tree of :class:`AvroType` nodes.

Every type of the specification: the primitives (null, boolean, int, long, float, double, bytes,
string), the complex types (record, enum, array, map, fixed, union) and the logical types
(decimal on bytes and fixed, uuid on string and fixed, date, time-millis/micros,
timestamp-millis/micros/nanos, local-timestamp-millis/micros/nanos, duration). Named types get
their full names by the spec's namespace rules, may be referred to by name (also before their
definition ends: recursive types), and carry their aliases. A logical type that is not valid for
its underlying type is ignored, as the spec says, and the underlying type is used.

References to other subjects' named types come in as :attr:`Schema.dependencies`: each is
parsed first into the same table of names, then the schema itself.

>>> t = parse_avro('{"type": "record", "name": "r", "namespace": "a.b", "fields": ['
...                '{"name": "x", "type": {"type": "long", "logicalType": "timestamp-millis"}},'
...                '{"name": "y", "type": ["null", {"type": "enum", "name": "E", "symbols": ["A"]}]}]}')
>>> t.name, [f.name for f in t.fields], t.fields[0].type.logical, t.fields[1].type.branches[1].name
('a.b.r', ['x', 'y'], 'timestamp-millis', 'a.b.E')
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from .._errors import AvroSchemaError

__all__ = ["NO_DEFAULT", "PRIMITIVES", "AvroField", "AvroType", "parse_avro", "parse_avro_schema"]

#: The largest fixed size (Java's ``Schema.createFixed`` takes an int): every size and count
#: the compiler derives from one fits the kernel's int32 operands.
MAX_FIXED_SIZE = 2**31 - 1
PRIMITIVES = ("null", "boolean", "int", "long", "float", "double", "bytes", "string")
NAMED = ("record", "error", "enum", "fixed")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: The logical types kept, by the underlying type they are valid on.
_LOGICAL = {
    "int": ("date", "time-millis"),
    "long": ("time-micros", "timestamp-millis", "timestamp-micros", "timestamp-nanos",
             "local-timestamp-millis", "local-timestamp-micros", "local-timestamp-nanos"),
    "string": ("uuid",),
    "bytes": ("decimal",),
    "fixed": ("decimal", "uuid", "duration"),
}


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


#: A field without a default.
NO_DEFAULT: Any = _NoDefault()


@dataclass(eq=False)
class AvroField:
    """A record field: its name, type, default (:data:`NO_DEFAULT` when none) and aliases."""

    name: str
    type: AvroType
    default: Any = NO_DEFAULT
    aliases: tuple[str, ...] = ()


@dataclass(eq=False)
class AvroType:
    """One node of a parsed Avro schema.

    Attributes
    ----------
    kind : str
        A primitive name, or ``record``, ``enum``, ``array``, ``map``, ``fixed``, ``union``.
    logical : str or None
        The (valid) logical type.
    name : str or None
        The full name of a named type.
    aliases : tuple of str
        A named type's aliases, as full names.
    fields, symbols, default_symbol, items, values, size, branches, precision, scale
        What the kind has (record fields; enum symbols and default; array items; map values;
        fixed size; union branches; decimal precision and scale).
    """

    kind: str
    logical: str | None = None
    name: str | None = None
    aliases: tuple[str, ...] = ()
    fields: list[AvroField] = field(default_factory=list)
    symbols: tuple[str, ...] = ()
    default_symbol: str | None = None
    items: AvroType | None = None
    values: AvroType | None = None
    size: int = 0
    branches: tuple[AvroType, ...] = ()
    precision: int = 0
    scale: int = 0

    @property
    def short_name(self) -> str | None:
        """The name without its namespace."""
        return None if self.name is None else self.name.rsplit(".", 1)[-1]

    def branch_key(self) -> str:
        """What a union may hold once: the kind, or the full name of a named type."""
        return self.name if self.name is not None else self.kind

    def __repr__(self) -> str:
        return f"<AvroType {self.name or self.kind}{' ' + self.logical if self.logical else ''}>"


def parse_avro(text: str | Any, names: dict[str, AvroType] | None = None) -> AvroType:
    """Parse Avro schema JSON (text, or already-loaded JSON) into an :class:`AvroType`.

    ``names`` is the table of named types already known (from referenced schemas); the types
    defined here are added to it.
    """
    obj = json.loads(text) if isinstance(text, str) else text
    return _Parser({} if names is None else names).parse(obj, None)


def parse_avro_schema(schema: Any) -> AvroType:
    """A registry :class:`~kbatch.values.Schema` (AVRO) parsed, its dependencies first."""
    if schema.schema_type != "AVRO":
        raise AvroSchemaError(f"schema {schema.id} is {schema.schema_type}, not AVRO")
    names: dict[str, AvroType] = {}
    for ref_name, dependency in schema.dependencies:
        try:
            parse_avro(dependency.text, names)
        except (ValueError, TypeError) as exc:
            raise AvroSchemaError(f"referenced schema {ref_name!r}: {exc}") from None
    try:
        return parse_avro(schema.text, names)
    except AvroSchemaError:
        raise
    except (ValueError, TypeError) as exc:
        raise AvroSchemaError(f"schema {schema.id}: {exc}") from None


class _Parser:
    def __init__(self, names: dict[str, AvroType]) -> None:
        self.names = names

    def full_name(self, name: object, namespace: str | None, where: object) -> str:
        if not isinstance(name, str) or not name:
            raise AvroSchemaError(f"a named type needs a name: {where!r}")
        full = name if "." in name else f"{namespace}.{name}" if namespace else name
        for part in full.split("."):
            if not _NAME.match(part):
                raise AvroSchemaError(f"invalid name {name!r}")
        return full

    def lookup(self, name: str, namespace: str | None) -> AvroType:
        if "." not in name and namespace and f"{namespace}.{name}" in self.names:
            return self.names[f"{namespace}.{name}"]
        if name in self.names:
            return self.names[name]
        raise AvroSchemaError(f"unknown type {name!r}")

    def define(self, node: AvroType) -> None:
        assert node.name is not None
        if node.name in self.names:
            raise AvroSchemaError(f"type {node.name!r} is defined twice")
        self.names[node.name] = node

    def parse(self, obj: Any, namespace: str | None) -> AvroType:
        if isinstance(obj, str):
            if obj in PRIMITIVES:
                return AvroType(obj)
            return self.lookup(obj, namespace)
        if isinstance(obj, list):
            return self.union(obj, namespace)
        if not isinstance(obj, dict):
            raise AvroSchemaError(f"not an Avro schema: {obj!r}")
        kind = obj.get("type")
        if isinstance(kind, (dict, list)):
            return self.parse(kind, namespace)  # {"type": {...}}: the inner schema
        if not isinstance(kind, str):
            raise AvroSchemaError(f"schema without a type: {obj!r}")
        if kind in PRIMITIVES:
            node = AvroType(kind)
        elif kind in NAMED:
            return self.named(obj, kind, namespace)
        elif kind == "array":
            if "items" not in obj:
                raise AvroSchemaError("an array needs items")
            node = AvroType("array", items=self.parse(obj["items"], namespace))
        elif kind == "map":
            if "values" not in obj:
                raise AvroSchemaError("a map needs values")
            node = AvroType("map", values=self.parse(obj["values"], namespace))
        else:
            return self.lookup(kind, namespace)
        self.logical(node, obj)
        return node

    def union(self, obj: list[Any], namespace: str | None) -> AvroType:
        branches = tuple(self.parse(b, namespace) for b in obj)
        seen = set()
        for b in branches:
            if b.kind == "union":
                raise AvroSchemaError("a union may not directly contain a union")
            key = b.branch_key()
            if key in seen:
                raise AvroSchemaError(f"a union holds {key!r} twice")
            seen.add(key)
        if not branches:
            raise AvroSchemaError("an empty union")
        return AvroType("union", branches=branches)

    def named(self, obj: dict[str, Any], kind: str, namespace: str | None) -> AvroType:
        ns = obj.get("namespace", namespace)
        if ns is not None and not isinstance(ns, str):
            raise AvroSchemaError(f"namespace must be a string: {ns!r}")
        full = self.full_name(obj.get("name"), ns or None, obj)
        inner_ns = full.rsplit(".", 1)[0] if "." in full else None
        aliases = tuple(self.full_name(a, inner_ns, obj) for a in obj.get("aliases", ()) or ())
        node = AvroType("record" if kind == "error" else kind, name=full, aliases=aliases)
        if kind == "fixed":
            size = obj.get("size")
            if not isinstance(size, int) or isinstance(size, bool) or not 0 <= size <= MAX_FIXED_SIZE:
                raise AvroSchemaError(f"fixed {full!r} needs a size from 0 to {MAX_FIXED_SIZE} "
                                      f"(Java's int), got {size!r}")
            node.size = size
            self.define(node)
            self.logical(node, obj)
            return node
        if kind == "enum":
            symbols = obj.get("symbols")
            if not isinstance(symbols, list) or not all(isinstance(s, str) and _NAME.match(s) for s in symbols):
                raise AvroSchemaError(f"enum {full!r} needs a list of symbol names")
            if len(set(symbols)) != len(symbols):
                raise AvroSchemaError(f"enum {full!r} repeats a symbol")
            node.symbols = tuple(symbols)
            default = obj.get("default")
            if default is not None and default not in symbols:
                raise AvroSchemaError(f"enum {full!r}: default {default!r} is not a symbol")
            node.default_symbol = default
            self.define(node)
            return node
        fields = obj.get("fields")
        if not isinstance(fields, list):
            raise AvroSchemaError(f"record {full!r} needs a list of fields")
        self.define(node)  # before its fields: a field may refer to the record (recursion)
        seen = set()
        for f in fields:
            if not isinstance(f, dict) or "type" not in f:
                raise AvroSchemaError(f"record {full!r}: a field needs a name and a type: {f!r}")
            name = f.get("name")
            if not isinstance(name, str) or not _NAME.match(name):
                raise AvroSchemaError(f"record {full!r}: invalid field name {name!r}")
            if name in seen:
                raise AvroSchemaError(f"record {full!r}: field {name!r} twice")
            seen.add(name)
            ftype = self.parse(f["type"], inner_ns)
            default = f.get("default", NO_DEFAULT)
            node.fields.append(AvroField(name, ftype, default, tuple(f.get("aliases", ()) or ())))
        return node

    def logical(self, node: AvroType, obj: dict[str, Any]) -> None:
        logical = obj.get("logicalType")
        if not isinstance(logical, str) or logical not in _LOGICAL.get(node.kind, ()):
            return
        if logical == "decimal":
            precision, scale = obj.get("precision"), obj.get("scale", 0)
            if not isinstance(precision, int) or not isinstance(scale, int) or precision <= 0 \
                    or not 0 <= scale <= precision:
                return
            if node.kind == "fixed" and precision > _max_precision(node.size):
                return
            node.precision, node.scale = precision, scale
        elif (logical == "uuid" and node.kind == "fixed" and node.size != 16) or \
                (logical == "duration" and node.size != 12):
            return
        node.logical = logical


def _max_precision(size: int) -> int:
    """The most decimal digits a ``size``-byte two's complement number holds: the spec's (and
    Java's ``LogicalTypes.Decimal.maxPrecision``) ``floor(log10(2^(8n-1) - 1))``, computed as
    fastavro does, ``floor(log10(2) * (8n - 1))`` (the same for every size: ``2^k`` is never a
    power of ten), without the ``8n``-bit integer (``size`` is at most :data:`MAX_FIXED_SIZE`)."""
    if size <= 0:
        return 0
    return math.floor(math.log10(2) * (8 * size - 1))
