"""A JSON Schema inferred from a sample of plain JSON values (``--values json`` without a registry).

:func:`infer_json_schema` parses the first :data:`SAMPLE_RECORDS` values with ``pyarrow.json``'s
type inference and writes what it found as a JSON Schema (:func:`arrow_to_json_schema`), the
form ``--save-value-schema`` saves and ``--value-schema`` reads back. The rules are Spark's
``from_json`` / ``spark.read.json`` inference:

- a field is a struct field, nullable (no field is ``required``); fields in the order first met;
- integers -> ``integer`` (int64); a field with integers and fractions -> ``number`` (float64);
  ``true``/``false`` -> ``boolean``; arrays -> ``array`` of their items' type;
- strings stay strings (Spark's ``inferTimestamp`` is off by default: a field that looks like a
  time in the sample may hold anything later);
- a field that is null in every sampled value, or only ever an empty object, is a string (Spark
  types such a field ``string`` too); a later non-string value there is a per-record error;
- a value that does not parse (or is not UTF-8) is left out of the sample, and so is one whose
  field is of another kind than in the values before it (a number, then text): the kind met first
  wins, and the other values are errors of their records when decoded. Give the schema
  (``--value-schema``) when the sample cannot tell.

>>> import numpy as np
>>> data = b'{"id": 1, "tags": ["a"], "at": "2024-01-01T00:00:00Z"}{"id": 2, "price": 2.5, "x": null}'
>>> s = infer_json_schema(data, np.array([0, 55]), np.array([55, 35]))
>>> s["properties"]["id"], s["properties"]["price"], s["properties"]["at"], s["properties"]["x"]["type"]
({'type': ['integer', 'null']}, {'type': ['number', 'null']}, {'type': ['string', 'null']}, ['string', 'null'])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.json as pj

from .._errors import JsonSchemaError
from ._read import read_json
from ._schema import arrow_to_json_schema

__all__ = ["SAMPLE_RECORDS", "infer_json_schema"]

#: How many first values a plain JSON schema is inferred from.
SAMPLE_RECORDS = 1000


def infer_json_schema(data: Any, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], *,
                      column: str = "value") -> dict[str, Any]:
    """A JSON Schema (a dict) for the JSON objects ``data[starts[i]:starts[i] + lengths[i]]``.

    Raises
    ------
    JsonSchemaError
        No value parses as a JSON object.
    """
    view = memoryview(data).cast("B")
    bodies = [bytes(view[int(s):int(s) + int(n)]).replace(b"\n", b" ") for s, n in zip(starts, lengths, strict=True)]
    bodies = [b for b in bodies if b.strip()]
    if not bodies:
        raise JsonSchemaError(f"no {column} to infer a schema from: give one (--value-schema)")
    sampled = len(bodies)
    bodies = [b for b in bodies if _utf8(b)]  # pyarrow would name a field by bytes that are no text
    if not bodies:
        raise JsonSchemaError(f"none of the first {sampled} {column}s is UTF-8 text")
    try:
        t = _infer(b"\n".join(bodies) + b"\n")
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        parts = []
        for b in bodies:  # one by one: the values that do not parse are left out
            try:
                parts.append(pa.schema(list(_infer(b + b"\n"))))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
        if not parts:
            raise JsonSchemaError(f"none of the first {len(bodies)} {column}s is a JSON object") from None
        merged = parts[0]
        for part in parts[1:]:  # a value whose field is of another kind than before is left out
            try:
                merged = pa.unify_schemas([merged, part], promote_options="permissive")
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                continue
        t = pa.struct(list(merged))
    schema = arrow_to_json_schema(_spark_types(t))
    schema.pop("required", None)
    return {"$schema": "http://json-schema.org/draft-07/schema#", **schema}


def _utf8(body: bytes) -> bool:
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _infer(text: bytes) -> pa.StructType:
    table = read_json(text, pj.ReadOptions(use_threads=False))
    return pa.struct(list(table.schema))


def _spark_types(t: pa.DataType) -> pa.DataType:
    """The inferred Arrow type with Spark's choices: strings never times, null and empty
    structs as strings, every field nullable."""
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            return pa.string()
        return pa.struct([pa.field(f.name, _spark_types(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_spark_types(t.value_type))
    if pa.types.is_null(t) or pa.types.is_timestamp(t) or pa.types.is_date(t):
        return pa.string()
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_floating(t):
        return pa.float64()
    return t
