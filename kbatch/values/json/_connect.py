"""Kafka Connect's JSON with an embedded schema (``JsonConverter``, ``schemas.enable=true``): its schema
as a JSON Schema, so that the ``payload`` decodes like any JSON value.

Each value is ``{"schema": S, "payload": P}``; ``S`` is Connect's schema (``ConnectSchema`` as
``JsonConverter.asJsonSchema`` writes it)::

    schema  = {"type": T, "optional": bool, "name"?: str, "version"?: int, "field"?: str, ...}
    T       = "int8" | "int16" | "int32" | "int64" | "float" | "double" | "boolean" | "string"
            | "bytes" (base64 text) | "array" (+ "items": schema) | "map" (+ "keys", "values": schema)
            | "struct" (+ "fields": [schema with "field": name, ...])

:func:`connect_json_schema` reads the ``schema`` of the sampled values (several: a column added
later by the database is in a later record's schema; the fields of every sample kept, first
seen first) and gives ``{"type": "object", "properties": {"payload": ...}}``: the ``schema``
member is then not read at all (``pyarrow.json`` skips members a schema does not name). The
types: integers ``integer`` (int64), ``float``/``double`` ``number``, ``bytes`` ``string`` (its
base64 text, as Connect writes it: logical types such as ``Decimal`` stay that text), a
``map`` with string keys an object of ``additionalProperties`` (other keys, written by Connect
as ``[key, value]`` pairs, are refused), an optional schema nullable.

>>> import json
>>> v = {"schema": {"type": "struct", "optional": False, "fields": [
...     {"type": "int32", "optional": False, "field": "id"},
...     {"type": "string", "optional": True, "field": "name"}]}, "payload": {"id": 1, "name": "a"}}
>>> doc = connect_json_schema([json.dumps(v).encode()])
>>> doc["properties"]["payload"]["properties"]["name"]
{'oneOf': [{'type': 'null'}, {'type': 'string'}]}
>>> connect_json_schema([b'{"id": 1}']) is None
True
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .._errors import JsonSchemaError

__all__ = ["connect_json_schema"]

_SIMPLE = {"int8": "integer", "int16": "integer", "int32": "integer", "int64": "integer", "float": "number",
           "float32": "number", "double": "number", "float64": "number", "boolean": "boolean",
           "string": "string", "bytes": "string"}


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Two Connect schemas of one place as one: a struct's fields of both (``a``'s first)."""
    if a.get("type") != "struct" or b.get("type") != "struct":
        return a
    fields = {f["field"]: f for f in a.get("fields", [])}
    for f in b.get("fields", []):
        fields[f["field"]] = _merge(fields[f["field"]], f) if f["field"] in fields else f
    return {**a, "fields": list(fields.values()), "optional": a.get("optional", True) or b.get("optional", True)}


def _convert(schema: Any, pointer: str) -> dict[str, Any]:
    if not isinstance(schema, dict) or not isinstance(schema.get("type"), str):
        raise JsonSchemaError("a Kafka Connect schema is an object with a type", pointer=pointer)
    kind = schema["type"]
    if kind in _SIMPLE:
        out: dict[str, Any] = {"type": _SIMPLE[kind]}
    elif kind == "array":
        out = {"type": "array", "items": _convert(schema.get("items"), f"{pointer}/items")}
    elif kind == "map":
        if (schema.get("keys") or {}).get("type") != "string":
            raise JsonSchemaError("a map whose keys are not strings (Connect writes it as [key, value] pairs)",
                                  pointer=f"{pointer}/keys")
        out = {"type": "object", "additionalProperties": _convert(schema.get("values"), f"{pointer}/values")}
    elif kind == "struct":
        fields = schema.get("fields")
        if not isinstance(fields, list) or any(not isinstance(f, dict) or "field" not in f for f in fields):
            raise JsonSchemaError("a struct's fields are a list of schemas with a field name", pointer=pointer)
        out = {"type": "object", "properties": {f["field"]: _convert(f, f"{pointer}/fields/{i}")
                                                for i, f in enumerate(fields)}}
    else:
        raise JsonSchemaError(f"unknown Kafka Connect type {kind!r}", pointer=f"{pointer}/type")
    return {"oneOf": [{"type": "null"}, out]} if schema.get("optional", False) else out


def connect_json_schema(bodies: Iterable[bytes]) -> dict[str, Any] | None:
    """The JSON Schema of Kafka Connect JSON values with an embedded schema (``bodies``: some of
    them), whose ``payload`` is the value; None when the first that parses is not one
    (``{"schema": {...}, "payload": ...}``)."""
    merged: dict[str, Any] | None = None
    for body in bodies:
        try:
            doc = json.loads(body)
        except ValueError:
            continue
        if not (isinstance(doc, dict) and set(doc) == {"schema", "payload"} and isinstance(doc["schema"], dict)):
            if merged is None:
                return None
            continue
        merged = doc["schema"] if merged is None else _merge(merged, doc["schema"])
    if merged is None:
        return None
    payload = _convert(merged, "/schema")
    return {"type": "object", "properties": {"payload": payload}}
