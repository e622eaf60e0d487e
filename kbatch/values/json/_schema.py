"""JSON Schema (draft 4 to 2020-12, as a schema registry accepts them) compiled to an Arrow type.

The registry's ``schemaType: JSON`` subjects, ``--value-schema FILE`` and an inferred schema all
go through :func:`json_schema_type`; the decoder (:mod:`kbatch.values.json._decode`) parses the
values with the type it gives. The mapping:

=====================================================  ===========================================
JSON Schema                                            Arrow
=====================================================  ===========================================
``object`` with ``properties``                         struct, fields in ``properties`` order; a
                                                       field is non-nullable only when ``required``
                                                       and its type does not allow null
``object`` with ``additionalProperties: {schema}``     map<string, T> (no ``properties``)
``array`` with ``items: {schema}``                     list<T>
``integer``, ``number``, ``boolean``, ``null``         int64, float64, bool, null
``string`` (also ``enum`` / ``const`` of strings)      string
``string`` + ``format: date-time`` / ``date``          timestamp[us, UTC] / date32
``string`` + ``format: uuid``                          string
``["null", T]``, ``oneOf``/``anyOf`` of null and T     T, nullable
``$ref`` (``#/$defs/..``, ``#/definitions/..``, any    the referred schema (a reference to another
JSON pointer, another subject's schema by its          subject is among :attr:`Schema.dependencies`)
reference name)
=====================================================  ===========================================

Annotations and validation keywords (``title``, ``description``, ``minimum``, ``pattern``,
``maxLength``, ...) do not change the type. Anything else (several non-null types in one
place, ``not``, ``if``, tuple ``items``, a recursive ``$ref``, a schema that allows any value)
is refused with :class:`JsonSchemaError` naming the JSON pointer of the construct.

>>> t = json_schema_type('{"type": "object", "required": ["id"], "properties": {'
...                      '"id": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}},'
...                      '"at": {"type": "string", "format": "date-time"},'
...                      '"extra": {"type": "object", "additionalProperties": {"type": "number"}}}}')
>>> [str(f) for f in t]  # doctest: +NORMALIZE_WHITESPACE
['pyarrow.Field<id: int64 not null>', 'pyarrow.Field<tags: list<item: string not null>>',
 'pyarrow.Field<at: timestamp[us, tz=UTC]>', 'pyarrow.Field<extra: map<string, double>>']
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from .._errors import JsonSchemaError
from .._schema import Schema, lone_surrogate

__all__ = ["arrow_to_json_schema", "json_schema_type", "parse_json_schema_text"]

_SIMPLE = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_(), "null": pa.null()}
_FORMATS = {"date-time": pa.timestamp("us", tz="UTC"), "date": pa.date32()}
#: Keywords that combine or constrain schemas in ways an Arrow type cannot say.
_REFUSED = ("not", "if", "then", "else", "prefixItems", "patternProperties", "dependentSchemas",
            "unevaluatedProperties", "contains")


def parse_json_schema_text(text: str, where: str = "schema") -> Any:
    """``text`` as JSON (a JSON Schema document), or :class:`JsonSchemaError`."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise JsonSchemaError(f"{where} is not JSON: {exc}", pointer="") from None


def json_schema_type(schema: Schema | str | dict[str, Any] | bool) -> pa.DataType:
    """The Arrow type of the values a JSON Schema describes.

    Parameters
    ----------
    schema : Schema, str or dict
        A registry :class:`Schema` (its :attr:`~Schema.dependencies` resolve ``$ref`` to other
        subjects), JSON Schema text, or the parsed document.

    Returns
    -------
    pyarrow.DataType
        A struct type: the values must be JSON objects (what ``pyarrow.json`` reads).

    Raises
    ------
    JsonSchemaError
        A construct with no Arrow type, with its JSON pointer.
    """
    documents: dict[str, Any] = {}
    if isinstance(schema, Schema):
        for name, dep in schema.dependencies:
            documents[name] = parse_json_schema_text(dep.text, f"referenced schema {name!r}")
        root = parse_json_schema_text(schema.text)
    elif isinstance(schema, str):
        root = parse_json_schema_text(schema)
    else:
        root = schema
    compiler = _Compiler(root, documents)
    t, _ = compiler.type_of(root, "", ("", root))
    if not pa.types.is_struct(t):
        raise JsonSchemaError(f"the values must be JSON objects (the root schema gives {t}): an object schema "
                              "with properties, or additionalProperties, is needed", pointer="")
    return t


class _Compiler:
    def __init__(self, root: Any, documents: dict[str, Any]) -> None:
        self.root = root
        self.documents = documents
        self.active: list[str] = []  # $refs being expanded: a cycle is a recursive type

    def type_of(self, node: Any, pointer: str, doc: tuple[str, Any]) -> tuple[pa.DataType, bool]:
        """(Arrow type, nullable) of the schema ``node`` at ``pointer`` in document ``doc``."""
        if node is True or node == {}:
            raise JsonSchemaError("a schema that allows any value has no Arrow type: give it a type",
                                  pointer=pointer)
        if not isinstance(node, dict):
            raise JsonSchemaError(f"a schema must be an object, got {node!r}", pointer=pointer)
        for key in _REFUSED:
            if key in node:
                raise JsonSchemaError(f"{key!r} is not supported", pointer=f"{pointer}/{key}")
        if "$ref" in node:
            return self.ref(node["$ref"], f"{pointer}/$ref", doc)
        for key in ("oneOf", "anyOf", "allOf"):
            if key in node:
                return self.combined(node, key, pointer, doc)
        types = node.get("type")
        if types is None:
            if "properties" in node or "additionalProperties" in node:
                types = "object"
            elif "items" in node:
                types = "array"
            elif "enum" in node or "const" in node:
                values = node.get("enum", [node.get("const")])
                if values and all(isinstance(v, str) for v in values):
                    types = "string"
                else:
                    raise JsonSchemaError("only an enum or const of strings has a type", pointer=pointer)
            else:
                raise JsonSchemaError("a schema without a type (nor properties, items, enum) has no Arrow type",
                                      pointer=pointer)
        listed = [types] if isinstance(types, str) else list(types)
        nullable = "null" in listed
        rest = [t for t in listed if t != "null"]
        if not rest:
            return pa.null(), True
        if len(rest) > 1:
            raise JsonSchemaError(f"several types {rest} in one place: only one type (and null) is supported",
                                  pointer=f"{pointer}/type")
        return self.one(node, rest[0], pointer, doc), nullable

    def one(self, node: dict[str, Any], kind: str, pointer: str, doc: tuple[str, Any]) -> pa.DataType:
        if kind in _SIMPLE:
            return _SIMPLE[kind]
        if kind == "string":
            return _FORMATS.get(node.get("format", ""), pa.string())
        if kind == "array":
            items = node.get("items")
            if items is None:
                raise JsonSchemaError("an array needs an items schema", pointer=pointer)
            if isinstance(items, list):
                raise JsonSchemaError("tuple items (a list of schemas) are not supported", pointer=f"{pointer}/items")
            t, nullable = self.type_of(items, f"{pointer}/items", doc)
            return pa.list_(pa.field("item", t, nullable=nullable))
        if kind == "object":
            props = node.get("properties")
            extra = node.get("additionalProperties")
            if not props and isinstance(extra, dict) and extra:
                t, nullable = self.type_of(extra, f"{pointer}/additionalProperties", doc)
                return pa.map_(pa.string(), pa.field("value", t, nullable=nullable))
            if not props:
                raise JsonSchemaError("an object needs properties (a struct) or an additionalProperties schema "
                                      "(a map)", pointer=pointer)
            if not isinstance(props, dict):
                raise JsonSchemaError("properties must be an object", pointer=f"{pointer}/properties")
            required = set(node.get("required") or ())
            fields = []
            for name, sub in props.items():
                if lone_surrogate(name) >= 0:  # no UTF-8 JSON value has such a key, no Arrow field such a name
                    shown = _escape(name.encode("utf-8", "backslashreplace").decode())
                    raise JsonSchemaError("a property name that is not valid Unicode (a lone surrogate)",
                                          pointer=f"{pointer}/properties/{shown}")
                t, nullable = self.type_of(sub, f"{pointer}/properties/{_escape(name)}", doc)
                fields.append(pa.field(name, t, nullable=nullable or name not in required or t == pa.null()))
            return pa.struct(fields)
        raise JsonSchemaError(f"unknown type {kind!r}", pointer=f"{pointer}/type")

    def combined(self, node: dict[str, Any], key: str, pointer: str, doc: tuple[str, Any]) -> tuple[pa.DataType, bool]:
        options = node[key]
        if not isinstance(options, list) or not options:
            raise JsonSchemaError(f"{key} must be a non-empty list", pointer=f"{pointer}/{key}")
        typed = []
        nullable = False
        for k, option in enumerate(options):
            if isinstance(option, dict) and option.get("type") == "null" and len(option) == 1:
                nullable = True
                continue
            typed.append((k, option))
        if len(typed) != 1:
            raise JsonSchemaError(f"{key} of {len(typed)} non-null schemas: only null and one schema are supported",
                                  pointer=f"{pointer}/{key}")
        k, option = typed[0]
        t, inner = self.type_of(option, f"{pointer}/{key}/{k}", doc)
        return t, nullable or inner

    def ref(self, ref: object, pointer: str, doc: tuple[str, Any]) -> tuple[pa.DataType, bool]:
        if not isinstance(ref, str):
            raise JsonSchemaError("$ref must be a string", pointer=pointer)
        name, _, fragment = ref.partition("#")
        if name:
            if name not in self.documents:
                raise JsonSchemaError(f"$ref {ref!r}: no such schema among the references", pointer=pointer)
            target_doc = (name, self.documents[name])
        else:
            target_doc = doc
        key = f"{target_doc[0]}#{fragment}"
        if key in self.active:
            raise JsonSchemaError(f"$ref {ref!r} is recursive: an Arrow type is finite", pointer=pointer)
        target = _resolve(target_doc[1], fragment, pointer, ref)
        self.active.append(key)
        try:
            return self.type_of(target, f"{pointer}:{fragment or '/'}" if name else fragment, target_doc)
        finally:
            self.active.pop()


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _resolve(document: Any, fragment: str, pointer: str, ref: str) -> Any:
    """The node at JSON pointer ``fragment`` in ``document`` (RFC 6901)."""
    node = document
    if not fragment:
        return node
    if not fragment.startswith("/"):
        raise JsonSchemaError(f"$ref {ref!r}: only JSON pointers (#/...) are supported, not anchors",
                              pointer=pointer)
    for part in fragment[1:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise JsonSchemaError(f"$ref {ref!r}: nothing at {fragment}", pointer=pointer)
    return node


def arrow_to_json_schema(t: pa.DataType, nullable: bool = False) -> dict[str, Any]:
    """A JSON Schema for values of Arrow type ``t`` (what ``--save-value-schema`` writes for an
    inferred schema): :func:`json_schema_type` of it gives ``t`` back, nullability aside.

    >>> s = arrow_to_json_schema(pa.struct([pa.field("a", pa.int64(), nullable=False), ("b", pa.list_(pa.string()))]))
    >>> s["properties"]["b"], s["required"]
    ({'type': ['array', 'null'], 'items': {'type': ['string', 'null']}}, ['a'])
    >>> json_schema_type(s)
    StructType(struct<a: int64 not null, b: list<item: string>>)
    """
    out: dict[str, Any]
    if pa.types.is_struct(t):
        out = {"type": "object", "properties": {f.name: arrow_to_json_schema(f.type, f.nullable) for f in t}}
        required = [f.name for f in t if not f.nullable]
        if required:
            out["required"] = required
    elif pa.types.is_map(t):
        out = {"type": "object", "additionalProperties": arrow_to_json_schema(t.item_type, t.item_field.nullable)}
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        out = {"type": "array", "items": arrow_to_json_schema(t.value_type, t.value_field.nullable)}
    elif pa.types.is_integer(t):
        out = {"type": "integer"}
    elif pa.types.is_floating(t):
        out = {"type": "number"}
    elif pa.types.is_boolean(t):
        out = {"type": "boolean"}
    elif pa.types.is_null(t):
        return {"type": "null"}
    elif pa.types.is_timestamp(t):
        out = {"type": "string", "format": "date-time"}
    elif pa.types.is_date(t):
        out = {"type": "string", "format": "date"}
    else:
        out = {"type": "string"}
    if nullable:
        out["type"] = [out["type"], "null"]
    return out
