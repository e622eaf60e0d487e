"""Schemas kept in files: for backups whose ``_schemas`` topic was lost, and topics without a registry.

The layout :meth:`Registry.from_directory` reads (every part optional)::

    <dir>/<id>.avsc                 a schema by id (the file's extension gives its language:
    <dir>/<id>.proto                .avsc Avro, .proto Protobuf, .json JSON Schema)
    <dir>/<id>.json
    <dir>/<subject>/<version>.avsc  a subject's version (<subject> may be ":.ctx:name"); its id is
                                    the one of an <id> file with the same text, when there is one
    <dir>/*.jsonl                   registry answers, one JSON object per line, as
                                    GET /subjects/{s}/versions/{v} gives them: "subject",
                                    "version", "id", "schema", "schemaType" (absent = AVRO),
                                    "references", "deleted"; "subject"/"version" may be absent

Other files are ignored. A subject version that names references resolves them among the
subject versions found here.

>>> import tempfile, pathlib
>>> d = pathlib.Path(tempfile.mkdtemp())
>>> _ = (d / "7.avsc").write_text('"string"')
>>> (d / "orders-value").mkdir()
>>> _ = (d / "orders-value" / "1.avsc").write_text('"string"')
>>> store = load_directory(d)
>>> store.by_id(7).text, store.latest("orders-value").id
('"string"', 7)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ._errors import RegistryError
from ._schema import Schema, SchemaReference, schema_type_name, split_subject
from ._store import SchemaStore

__all__ = ["EXTENSIONS", "load_directory"]

#: File extension -> schema language.
EXTENSIONS = {".avsc": "AVRO", ".proto": "PROTOBUF", ".json": "JSON"}


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RegistryError(f"cannot read schema file: {exc}", url=str(path)) from None


def load_directory(path: str | os.PathLike[str]) -> SchemaStore:
    """The schemas of a directory laid out as the module says.

    Raises
    ------
    FileNotFoundError
        ``path`` is not a directory.
    RegistryError
        A file cannot be read, a JSON line is not a schema, or one id is given two texts.
    """
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"not a directory: {root}")
    store = SchemaStore()
    by_text: dict[tuple[str, str], int] = {}  # (context, text) -> id, to give subject versions their id
    pending: list[Schema] = []
    for entry in sorted(root.iterdir()):
        if entry.is_file() and entry.suffix in EXTENSIONS and entry.stem.isdigit():
            schema = Schema(_read(entry), EXTENSIONS[entry.suffix], int(entry.stem))
            _add(store, schema, entry)
            by_text.setdefault((schema.context, schema.text), int(entry.stem))
        elif entry.is_file() and entry.suffix == ".jsonl":
            for n, line in enumerate(_read(entry).splitlines(), 1):
                if line.strip():
                    schema = _from_answer(line, f"{entry}:{n}")
                    if schema.id is None:
                        pending.append(schema)
                    else:
                        _add(store, schema, entry)
                        by_text.setdefault((schema.context, schema.text), schema.id)
        elif entry.is_dir():
            context, _ = split_subject(entry.name)
            for file in sorted(entry.iterdir()):
                if file.is_file() and file.suffix in EXTENSIONS and file.stem.isdigit():
                    pending.append(Schema(_read(file), EXTENSIONS[file.suffix], None, entry.name, int(file.stem),
                                          context=context))
    for schema in pending:  # subject versions: the id of an id file with the same text, if any
        schema_id = by_text.get((schema.context, schema.text))
        _add(store, Schema(schema.text, schema.schema_type, schema_id, schema.subject, schema.version,
                           schema.references, (), schema.deleted, schema.context), root)
    return store


def _add(store: SchemaStore, schema: Schema, where: Path) -> None:
    try:
        store.add(schema)
    except ValueError as exc:
        raise RegistryError(str(exc), url=str(where)) from None


def _from_answer(line: str, where: str) -> Schema:
    """A schema from one registry answer (a JSON object)."""
    try:
        obj = json.loads(line)
        if not isinstance(obj, dict) or not isinstance(obj.get("schema"), str):
            raise ValueError("not an object with a 'schema' string")
        subject, version, schema_id = obj.get("subject"), obj.get("version"), obj.get("id")
        if subject is not None and not isinstance(subject, str):
            raise ValueError("'subject' must be a string")
        for name, number in (("version", version), ("id", schema_id)):
            if number is not None and (not isinstance(number, int) or isinstance(number, bool)):
                raise ValueError(f"{name!r} must be an integer")
        refs = tuple(SchemaReference.from_json(r) for r in obj.get("references") or ())
        return Schema(obj["schema"], schema_type_name(obj.get("schemaType")), schema_id, subject,
                      version if subject is not None else None, refs, (), bool(obj.get("deleted")),
                      split_subject(subject)[0])
    except ValueError as exc:
        raise RegistryError(f"not a schema registry answer: {exc}", url=where) from None
