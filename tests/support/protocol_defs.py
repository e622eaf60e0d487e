"""Kafka protocol definitions for the protocol tests: kafka-python's, kbatch's own, and how to compare them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kafka.protocol.schemas as _kafka_schemas

KAFKA_PYTHON_DEFINITIONS = Path(os.path.dirname(_kafka_schemas.__file__)) / "resources"
OWN_APIS = ["ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "InitProducerId",
            "AddPartitionsToTxn", "EndTxn", "FindCoordinator"]


def semantic(fields: list[Any]) -> list[dict[str, Any]]:
    """The parts of a field list that decide the wire format and defaults."""
    out = []
    for f in fields:
        out.append({
            "name": f.name, "type": f.type, "versions": str(f.versions), "nullable": str(f.nullable),
            "tag": f.tag, "tagged": str(f.tagged) if f.tag is not None else None,
            "flexible": None if f.flexible is None else str(f.flexible),
            "default": repr(f.default()), "ignorable": f.ignorable, "map_key": f.map_key,
            "entity_type": f.raw.get("entityType"),
            "fields": semantic(f.fields) if f.fields else None,
        })
    return out


def types(value: Any) -> Any:
    """The type of every value in a decoded message, nested like it."""
    if isinstance(value, dict):
        return {k: types(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return (type(value), [types(v) for v in value])
    return type(value)
