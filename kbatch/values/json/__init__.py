"""JSON values: JSON Schema compiled to an Arrow type, plain JSON's schema inferred, and the values
parsed in bulk by ``pyarrow.json``.

An internal face (not part of :mod:`kbatch.values`' public surface): what the rest of
``kbatch.values`` takes from JSON, each name listed in ``__all__``.

- ``_schema.py``: :func:`json_schema_type` (JSON Schema -> Arrow) and :func:`arrow_to_json_schema`.
- ``_infer.py``: :func:`infer_json_schema` over the first :data:`SAMPLE_RECORDS` values.
- ``_connect.py``: :func:`connect_json_schema`, Kafka Connect's JSON with an embedded schema.
- ``_decode.py``: :func:`parse_json_values`, the bodies joined and parsed at once.
- ``_read.py``: ``pyarrow.json``'s reader behind the guard both JSON paths need.
- ``_required.py``: required properties of optional objects, checked where the object is present.
"""

from __future__ import annotations

from ._connect import connect_json_schema
from ._decode import parse_json_values
from ._infer import SAMPLE_RECORDS, infer_json_schema
from ._schema import arrow_to_json_schema, json_schema_type

__all__ = ["SAMPLE_RECORDS", "arrow_to_json_schema", "connect_json_schema",
           "infer_json_schema", "json_schema_type", "parse_json_values"]
