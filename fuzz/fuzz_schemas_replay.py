"""Fuzz the replay of a schema registry's ``_schemas`` topic (``kbatch.values._topic``,
``_store``) and the registry built on it: records as the Confluent registry writes them, with
random fields, random JSON and garbage.

Input: read with atheris' ``FuzzedDataProvider``, records until the input ends (written as a
``_schemas-0`` partition on tmpfs and read by ``Registry.from_log_dirs``, as ``kbatch schemas``
reads it), each a kind byte:

    0-3   SCHEMA (``tests/support/schemas_topic.schema``): a subject from a small pool (with
          contexts), a version, an id, a schema text from a pool (Avro, JSON Schema, Protobuf,
          with and without references) or random text, a schemaType, references, ``deleted``,
          an ``md5``
    4     a SCHEMA tombstone          5  DELETE_SUBJECT       6  CLEAR_SUBJECT
    7     CONFIG, MODE, NOOP or CONTEXT
    8     a key and a value of random JSON (nested arrays and objects, any scalar)
    9     a key and a value of random bytes (either may be null)

Then every lookup: ``subjects``, ``versions`` and ``latest`` of every subject (live and
deleted), ``schema(id)`` of every id a SCHEMA record named, under its subject and in the
default context (references resolved), and of an id none named, ``schema_by_guid`` of every
GUID met, ``listing()``. Oracle: only kbatch's errors escape (``RegistryError``,
``SchemaNotFoundError``), no crash.

Run ``python fuzz/fuzz_schemas_replay.py CORPUS_DIR [libFuzzer flags]``, or ``bash fuzz/run.sh``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["kbatch"]):
    from kbatch.values import Registry

import oracle

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support import schemas_topic as st

SUBJECTS = ["t-value", "t-key", "u", ":.eu:t-value", ":.eu:", ":.eu:u", "", "a/b", "t-value "]
AVRO = '{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}'
TEXTS = [
    AVRO, '"string"', '{"type": "record", "name": "S", "fields": [{"name": "r", "type": "R"}]}',
    '{"type": "object", "properties": {"a": {"type": "integer"}}}',
    'syntax = "proto3"; message M { int32 a = 1; }',
    'syntax = "proto3"; import "r.proto"; message N { M m = 1; }', "", "{", "\ud800", "null",
]  # fmt: skip
TYPES = [None, "AVRO", "JSON", "PROTOBUF", "avro", "XML", 7]
_TMP = tempfile.TemporaryDirectory(prefix="kbatch-fuzz-schemas-", dir="/dev/shm" if Path("/dev/shm").is_dir() else None)


def _json(fdp: Any, depth: int = 0) -> Any:
    kind = fdp.ConsumeIntInRange(0, 7)
    if kind == 0 and depth < 40:
        return [_json(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))]
    if kind == 1 and depth < 40:
        return {fdp.ConsumeUnicode(4): _json(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 3))}
    if kind == 2:
        return fdp.ConsumeUnicode(8)
    if kind == 3:
        return fdp.ConsumeIntInRange(-(2**63), 2**64)
    if kind == 4:
        return fdp.ConsumeRegularFloat()
    if kind == 5:
        return fdp.ConsumeBool()
    if kind == 6:
        return None
    return fdp.PickValueInList(SUBJECTS)


def _references(fdp: Any) -> list[Any]:
    refs: list[Any] = []
    for _ in range(fdp.ConsumeIntInRange(0, 2)):
        if fdp.ConsumeBool():
            refs.append({"name": fdp.PickValueInList(["R", "r.proto", "x"]), "subject": fdp.PickValueInList(SUBJECTS),
                         "version": fdp.ConsumeIntInRange(-2, 4)})
        else:
            refs.append(_json(fdp))
    return refs


def records(fdp: Any, named: set[tuple[str, int]]) -> list[tuple[bytes, bytes | None]]:
    """The input's records (see the module); the (subject, id) of each SCHEMA record added to ``named``."""
    out: list[tuple[bytes, bytes | None]] = []
    while fdp.remaining_bytes() and len(out) < 64:
        kind = fdp.ConsumeIntInRange(0, 9)
        subject = fdp.PickValueInList(SUBJECTS)
        version = fdp.ConsumeIntInRange(-1, 5)
        if kind <= 3:
            text = fdp.PickValueInList(TEXTS) if fdp.ConsumeBool() else fdp.ConsumeUnicode(32)
            extra: dict[str, Any] = {}
            if fdp.ConsumeBool():
                extra["md5"] = fdp.PickValueInList(["AAAAAAAAAAAAAAAAAAAAAA==", "x", "", "AAAA"])
            schema_id = fdp.ConsumeIntInRange(-1, 9)
            named.add((subject, schema_id))
            out.append(st.schema(subject, version, schema_id, text,
                                 schema_type=fdp.PickValueInList(TYPES), references=_references(fdp),
                                 deleted=fdp.ConsumeBool(), **extra))
        elif kind == 4:
            out.append(st.tombstone(subject, version))
        elif kind == 5:
            out.append(st.delete_subject(subject, version))
        elif kind == 6:
            out.append(st.clear_subject(subject))
        elif kind == 7:
            out.append(fdp.PickValueInList([st.config(subject, "BACKWARD"), st.mode(subject, "READONLY"), st.noop(),
                                            st.context(".eu")]))
        elif kind == 8:
            out.append((json.dumps(_json(fdp)).encode(), json.dumps(_json(fdp)).encode()))
        else:
            key = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 64))
            value = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 2048)) if fdp.ConsumeBool() else None
            out.append((key, value))
    return out


def _lookup(call: Any, *args: Any, **kw: Any) -> Any:
    try:
        return call(*args, **kw)
    except Exception as exc:  # noqa: BLE001 (check_error re-raises anything but a kbatch error)
        oracle.check_error(exc, positioned=False)
        return None


def TestOneInput(raw: bytes) -> None:
    named: set[tuple[str, int]] = set()
    recs = records(atheris.FuzzedDataProvider(raw), named)
    root = Path(_TMP.name) / "root"
    shutil.rmtree(root, ignore_errors=True)
    st.write_topic(root, recs)
    registry = _lookup(Registry.from_log_dirs, root)
    if registry is None:
        return
    for deleted in (False, True):
        for subject in registry.subjects(deleted=deleted):
            registry.versions(subject, deleted=deleted)
            _lookup(registry.latest, subject)
            for v in registry.versions(subject, deleted=True):
                _lookup(registry.version, subject, v, deleted=True)
    guids = set()
    for subject, schema_id in {*named, ("", 10)} | {("", i) for _, i in named}:  # and an id none has
        schema = _lookup(registry.schema, schema_id, subject=subject or None)
        if schema is not None and schema.guid is not None:
            guids.add(schema.guid)
    for guid in guids:
        _lookup(registry.schema_by_guid, guid)
    registry.listing()


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
