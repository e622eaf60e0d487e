"""The registry's own ``_schemas`` topic, replayed from a ``log.dirs`` root, a backup or a URL.

The records, as Confluent's ``SchemaRegistrySerializer`` writes them (JSON keys and values, one
partition; Karapace writes the same)::

    key   {"keytype": "SCHEMA", "subject": S, "version": V, "magic": 1}
    value {"subject": S, "version": V, "id": ID, "schema": TEXT, "schemaType": "PROTOBUF",
           "references": [{"name", "subject", "version"}], "deleted": false, ...}
          (no value: a tombstone, the version permanently deleted)
    key   {"keytype": "DELETE_SUBJECT", "subject": S, "magic": 0}
    value {"subject": S, "version": V}              (soft-deletes versions 1..V)
    key   {"keytype": "CLEAR_SUBJECT", "subject": S, "magic": 0}
    value {"subject": S}                            (permanently deletes S's soft-deleted versions)
    key   {"keytype": "CONFIG" | "MODE" | "CONTEXT" | "NOOP", ...}   (no schema changes)

A record whose key or value is not such JSON is skipped and noted, as the registry's reader
thread logs it and goes on. What the records do is :mod:`kbatch.values._store`'s.
"""

from __future__ import annotations

import json
import os
import posixpath
from typing import Any

from kbatch.log import LogDir, open_log, open_logs

from ._errors import RegistryError
from ._store import SchemaStore

__all__ = ["DEFAULT_TOPIC", "find_schemas_log", "replay", "replay_log"]

#: The registry's default ``kafkastore.topic``.
DEFAULT_TOPIC = "_schemas"
_SCHEMA_KEYS = ("SCHEMA", "DELETE_SUBJECT", "CLEAR_SUBJECT")


def find_schemas_log(
    root: str | os.PathLike[str], *, topic: str = DEFAULT_TOPIC, recursive: bool = False,
    storage_options: dict[str, Any] | None = None,
) -> LogDir:
    """Partition 0 of ``topic`` under ``root`` (or ``root`` itself when it is that directory).

    Raises
    ------
    RegistryError
        No such partition under ``root``; the message names the topics that are there.
    """
    text = os.fspath(root)
    if posixpath.basename(text.rstrip("/")) == f"{topic}-0":
        return open_log(text, storage_options=storage_options)
    try:
        logs = open_logs(text, recursive=recursive, storage_options=storage_options)
    except FileNotFoundError as exc:
        if not recursive or not os.path.isdir(text):
            raise
        logs, found = [], str(exc)
    else:
        found = ", ".join(sorted({d.topic for d in logs})[:20]) or "no partition directory"
    for log in logs:
        if log.topic == topic and log.partition == 0:
            return log
    hint = "" if recursive else "; a backup of several brokers needs --recursive"
    raise RegistryError(f"no {topic} topic found under {text} (found: {found}){hint}")


def replay_log(log: LogDir, store: SchemaStore | None = None) -> SchemaStore:
    """Every record of the registry's log applied to ``store`` (a new one by default), in order."""
    store = SchemaStore() if store is None else store
    table = log.read()
    offsets = table.records["offset"].tolist()
    return replay(zip(offsets, table.keys(), table.values(), strict=True), store)


def replay(records: Any, store: SchemaStore | None = None) -> SchemaStore:
    """``(offset, key, value)`` records of a ``_schemas`` topic applied to ``store``, in order."""
    store = SchemaStore() if store is None else store
    for offset, key, value in records:
        _apply(store, offset, key, value)
    return store


def _apply(store: SchemaStore, offset: int, key: bytes | None, value: bytes | None) -> None:
    try:
        k = json.loads(key) if key is not None else None
    except (ValueError, UnicodeDecodeError):
        store.notes.append(f"offset {offset}: key is not JSON, record skipped")
        return
    if not isinstance(k, dict) or not isinstance(k.get("keytype"), str):
        store.notes.append(f"offset {offset}: key {k!r} has no keytype, record skipped")
        return
    keytype = k["keytype"]
    store.keytypes[keytype] = store.keytypes.get(keytype, 0) + 1
    if keytype not in _SCHEMA_KEYS:
        return  # CONFIG, MODE, NOOP, CONTEXT, ...: no schema changes
    v: Any = None
    if value is not None and value.strip():
        try:
            v = json.loads(value)
        except (ValueError, UnicodeDecodeError):
            store.notes.append(f"offset {offset}: {keytype} value is not JSON, record skipped")
            return
        if v is not None and not isinstance(v, dict):
            store.notes.append(f"offset {offset}: {keytype} value is not a JSON object, record skipped")
            return
    if keytype == "SCHEMA":
        subject, version, magic = k.get("subject"), k.get("version"), k.get("magic", 0)
        if not isinstance(subject, str) or not isinstance(version, int) or magic not in (0, 1):
            store.notes.append(f"offset {offset}: SCHEMA key {k!r} is not a subject, version and magic 0 or 1, "
                               f"record skipped")
            return
        if v is None:
            store.tombstone(subject, version)
        else:
            store.put_schema(subject, version, v, offset)
    elif v is None:
        return  # a tombstone of a DELETE_SUBJECT / CLEAR_SUBJECT key: compaction, nothing to do
    elif keytype == "DELETE_SUBJECT":
        store.delete_subject(v, offset)
    else:
        store.clear_subject(v, offset)
