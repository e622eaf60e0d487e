"""A schema registry's ``_schemas`` topic written as the registry writes it, for tests.

Keys and values are Confluent's ``SchemaRegistrySerializer`` JSON; :func:`write_topic` puts
them in a ``<root>/_schemas-0`` partition directory with ``kbatch.LogWriter``, one batch per
record (as the registry's producer sends them), offsets from 0.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import kbatch

Record = tuple[bytes, bytes | None]


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def schema(subject: str, version: int, schema_id: int, text: str, *, schema_type: str | None = None,
           references: list[dict] | None = None, deleted: bool = False, **extra: object) -> Record:
    """A SCHEMA record (``schemaType`` left out for Avro, as the registry does)."""
    value: dict[str, object] = {"subject": subject, "version": version, "id": schema_id}
    if schema_type is not None:
        value["schemaType"] = schema_type
    if references:
        value["references"] = references
    value.update(extra)
    value["schema"] = text
    value["deleted"] = deleted
    return _json({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}), _json(value)


def tombstone(subject: str, version: int) -> Record:
    """A permanent delete of a subject version: the SCHEMA key with no value."""
    return _json({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}), None


def delete_subject(subject: str, version: int) -> Record:
    """DELETE_SUBJECT: versions 1..version soft-deleted."""
    return (_json({"keytype": "DELETE_SUBJECT", "subject": subject, "magic": 0}),
            _json({"subject": subject, "version": version}))


def clear_subject(subject: str) -> Record:
    """CLEAR_SUBJECT: the subject's soft-deleted versions permanently deleted."""
    return _json({"keytype": "CLEAR_SUBJECT", "subject": subject, "magic": 0}), _json({"subject": subject})


def config(subject: str | None, level: str) -> Record:
    return (_json({"keytype": "CONFIG", "subject": subject, "magic": 0}),
            _json({"compatibilityLevel": level, "subject": subject}))


def mode(subject: str | None, value: str) -> Record:
    return _json({"keytype": "MODE", "subject": subject, "magic": 0}), _json({"mode": value})


def noop() -> Record:
    return _json({"magic": 0, "keytype": "NOOP"}), None


def context(ctx: str) -> Record:
    return (_json({"keytype": "CONTEXT", "tenant": "default", "context": ctx, "magic": 0}),
            _json({"tenant": "default", "context": ctx}))


def write_topic(root: str | Path, records: list[Record], topic: str = "_schemas") -> Path:
    """The records as partition 0 of ``topic`` under ``root``, written anew (a partition there is
    replaced: a LogWriter would continue it); returns the partition directory."""
    shutil.rmtree(Path(root) / f"{topic}-0", ignore_errors=True)
    with kbatch.LogWriter(root, topic, 0) as w:
        for offset, (key, value) in enumerate(records):
            w.append(kbatch.encode([value], [key], base_offset=offset, timestamps=[1_700_000_000_000 + offset]))
        return Path(w.path)
