"""A registry's state held in memory: subject versions, ids per context, and the rules that change them.

The rules are those a Confluent Schema Registry applies while it replays its ``_schemas`` topic
(``KafkaStoreReaderThread``, ``KafkaStoreMessageHandler``, ``InMemoryCache``), and Karapace's
``schema_reader.py``, which writes and reads the same records:

- a SCHEMA record (key ``{"keytype": "SCHEMA", "subject", "version", "magic"}``, value
  ``{"subject", "version", "id", "schema", "schemaType" (absent = AVRO), "references",
  "deleted"}``) sets that subject version; a soft delete rewrites it with ``"deleted": true``;
- a SCHEMA key with no value (a tombstone) is a permanent delete of that subject version;
- a schema whose id is already taken in its context by a different text is ignored (the
  registry's ``validateUpdate``: "Found a schema with duplicate ID"): the first one seen wins;
- DELETE_SUBJECT (value ``{"subject", "version"}``) soft-deletes versions 1..version;
- CLEAR_SUBJECT (value ``{"subject"}``) permanently deletes the subject's soft-deleted versions
  (every subject of a context when it names only ``:.ctx:``);
- CONFIG, MODE, NOOP, CONTEXT and other key types do not change schemas.

Where kbatch differs, on purpose: a permanently deleted version leaves its subject's listing,
but its id stays resolvable, because data written with it is still in the backup.

>>> store = SchemaStore()
>>> store.put_schema("t-value", 1, {"subject": "t-value", "version": 1, "id": 7, "schema": '"string"'})
>>> store.put_schema("t-value", 2, {"subject": "t-value", "version": 2, "id": 9, "schema": '"bytes"'})
>>> store.delete_subject({"subject": "t-value", "version": 1})
>>> store.latest("t-value").id, store.versions("t-value"), store.versions("t-value", deleted=True)
(9, [2], [1, 2])
>>> store.tombstone("t-value", 1)
>>> store.by_id(7).text, store.versions("t-value", deleted=True)
('"string"', [2])
"""

from __future__ import annotations

import base64
import binascii
import uuid
from dataclasses import dataclass, replace

from ._errors import SchemaNotFoundError
from ._schema import (
    DEFAULT_CONTEXT,
    Schema,
    SchemaReference,
    guid_of,
    join_subject,
    schema_type_name,
    split_subject,
)

__all__ = ["SchemaStore", "VersionState"]

#: What became of a subject version: live, soft-deleted, or permanently deleted (kept by id).
VersionState = str


@dataclass
class _Version:
    schema: Schema  # subject, version, id, context filled in
    state: VersionState  # "live", "soft", "hard"
    offset: int


class SchemaStore:
    """Subject versions and ids per context, changed by the registry's rules (see the module).

    Attributes
    ----------
    notes : list of str
        Records that were ignored and why (a key or value that is not what the registry writes,
        a duplicate id with another text), as the registry logs them.
    keytypes : dict of str to int
        How many records of each key type a replay read.
    """

    def __init__(self) -> None:
        self._versions: dict[tuple[str, int], _Version] = {}
        self._ids: dict[tuple[str, int], Schema] = {}  # (context, id) -> the first schema seen
        self._id_versions: dict[tuple[str, int], set[tuple[str, int]]] = {}
        self._guids: dict[uuid.UUID, tuple[str, int]] = {}
        self.notes: list[str] = []
        self.keytypes: dict[str, int] = {}  # records replayed, by key type

    # ------------------------------------------------------------------ the rules

    def put_schema(self, subject: str, version: int, value: dict[str, object], offset: int = -1) -> None:
        """A SCHEMA record with a value (``validateUpdate`` then ``handleSchemaUpdate``)."""
        where = f"offset {offset}: " if offset >= 0 else ""
        try:
            text, schema_id = value["schema"], value["id"]
            listed = value.get("references") or []
            if not isinstance(listed, list):
                raise ValueError("'references' must be a list")
            refs = tuple(SchemaReference.from_json(r) for r in listed)
            schema_type = schema_type_name(value.get("schemaType"))
        except (KeyError, ValueError) as exc:
            self.notes.append(f"{where}schema {subject!r} version {version} ignored: {exc}")
            return
        if not isinstance(text, str) or not isinstance(schema_id, int) or isinstance(schema_id, bool):
            self.notes.append(f"{where}schema {subject!r} version {version} ignored: 'schema' must be a "
                              f"string and 'id' an integer")
            return
        context, _ = split_subject(subject)
        known = self._ids.get((context, schema_id))
        if known is not None and known.text != text:
            self.notes.append(f"{where}schema {subject!r} version {version} ignored: id {schema_id} is "
                              f"already another schema's in context {context!r} (the registry keeps the first)")
            return
        guid = _stored_guid(value.get("md5"))
        if guid is None and value.get("metadata") is None and value.get("ruleSet") is None:
            guid = guid_of(text, refs)
        schema = Schema(text, schema_type, schema_id, subject, version, refs, (), bool(value.get("deleted")),
                        context, guid)
        old = self._versions.get((subject, version))
        if old is not None and old.schema.id != schema_id:
            self._id_versions.get((context, old.schema.id or 0), set()).discard((subject, version))
        self._versions[(subject, version)] = _Version(schema, "soft" if schema.deleted else "live", offset)
        if known is None:
            self._ids[(context, schema_id)] = schema
        self._id_versions.setdefault((context, schema_id), set()).add((subject, version))
        if guid is not None:
            self._guids.setdefault(guid, (context, schema_id))

    def tombstone(self, subject: str, version: int) -> None:
        """A SCHEMA key without a value: the subject version is permanently deleted."""
        entry = self._versions.get((subject, version))
        if entry is not None:
            entry.state = "hard"

    def delete_subject(self, value: dict[str, object], offset: int = -1) -> None:
        """DELETE_SUBJECT: soft-delete versions 1..``version`` of the subject."""
        subject, last = value.get("subject"), value.get("version")
        if not isinstance(subject, str) or not isinstance(last, int):
            self.notes.append(f"offset {offset}: DELETE_SUBJECT ignored: value {value!r} lacks subject or version")
            return
        for (s, v), entry in self._versions.items():
            if s == subject and v <= last and entry.state == "live":
                entry.state = "soft"
                entry.schema = replace(entry.schema, deleted=True)

    def clear_subject(self, value: dict[str, object], offset: int = -1) -> None:
        """CLEAR_SUBJECT: permanently delete the soft-deleted versions of a subject (or of every
        subject in a context, for ``:.ctx:``)."""
        subject = value.get("subject")
        if not isinstance(subject, str):
            self.notes.append(f"offset {offset}: CLEAR_SUBJECT ignored: value {value!r} lacks a subject")
            return
        context, name = split_subject(subject)
        for (s, _), entry in self._versions.items():
            matches = s == subject or (not name and split_subject(s)[0] == context)
            if matches and entry.state == "soft":
                entry.state = "hard"

    # ------------------------------------------------------------------ lookups

    def __len__(self) -> int:
        return len(self._ids)

    def contexts(self) -> list[str]:
        """The contexts holding ids, the default first."""
        return sorted({c for c, _ in self._ids}, key=lambda c: (c != DEFAULT_CONTEXT, c))

    def by_id(self, schema_id: int, subject: str | None = None) -> Schema:
        """The schema of an id in the context of ``subject`` (the default context without one),
        described by a version of ``subject`` when it registered it, else by a live version;
        as the registry's ``getSchemaKeyUsingContexts``, an unqualified subject that does not
        have the id in the default context is looked for in the other contexts."""
        context, name = split_subject(subject)
        first = (context, schema_id)

        def registered_by(key: tuple[str, int], qualified: str) -> bool:
            return key in self._ids and any(s == qualified for s, _ in self._id_versions.get(key, ()))

        if first in self._ids and (not name or registered_by(first, join_subject(context, name))):
            return self._describe(first, self._ids[first], join_subject(context, name) if name else None)
        if context == DEFAULT_CONTEXT and name:
            for other in self.contexts():
                key = (other, schema_id)
                if other != DEFAULT_CONTEXT and registered_by(key, join_subject(other, name)):
                    return self._describe(key, self._ids[key], join_subject(other, name))
        if first in self._ids:
            return self._describe(first, self._ids[first], None)
        where = f" in context {context!r}" if context != DEFAULT_CONTEXT else ""
        raise SchemaNotFoundError(f"no schema with id {schema_id}{where}")

    def _describe(self, key: tuple[str, int], schema: Schema, subject: str | None) -> Schema:
        versions = sorted(self._id_versions.get(key, ()), key=lambda sv: (
            sv[0] != subject, self._versions[sv].state != "live", sv))
        if not versions:
            return schema
        entry = self._versions[versions[0]]
        return replace(schema, subject=entry.schema.subject, version=entry.schema.version,
                       deleted=entry.state != "live")

    def by_guid(self, guid: uuid.UUID) -> Schema:
        """The schema with this GUID (the first id registered with it)."""
        key = self._guids.get(guid)
        if key is None:
            raise SchemaNotFoundError(f"no schema with GUID {guid}")
        return self._describe(key, self._ids[key], None)

    def version(self, subject: str, version: int, *, deleted: bool = False) -> Schema:
        """A subject version (``-1``: the latest live one); ``deleted`` includes soft-deleted ones."""
        if version == -1:
            return self.latest(subject)
        entry = self._versions.get((subject, version))
        if entry is None or entry.state == "hard" or (entry.state == "soft" and not deleted):
            raise SchemaNotFoundError(f"subject {subject!r} has no version {version}"
                                      + ("" if deleted else " (live)"))
        return entry.schema

    def latest(self, subject: str) -> Schema:
        """The subject's highest live version."""
        live = self.versions(subject)
        if not live:
            raise SchemaNotFoundError(f"subject {subject!r} has no live version")
        return self._versions[(subject, live[-1])].schema

    def subjects(self, *, deleted: bool = False) -> list[str]:
        """Subjects with a live version (``deleted``: also those with only soft-deleted ones)."""
        ok = ("live", "soft") if deleted else ("live",)
        return sorted({s for (s, _), e in self._versions.items() if e.state in ok})

    def versions(self, subject: str, *, deleted: bool = False) -> list[int]:
        """A subject's live version numbers, ascending (``deleted``: also soft-deleted ones)."""
        ok = ("live", "soft") if deleted else ("live",)
        return sorted(v for (s, v), e in self._versions.items() if s == subject and e.state in ok)

    def listing(self) -> list[tuple[Schema, VersionState, int]]:
        """Every subject version ever seen, with its state and the offset of its last record, by
        subject and version."""
        return [(e.schema, e.state, e.offset) for _, e in sorted(self._versions.items())]

    def unversioned(self) -> list[Schema]:
        """Schemas known by id only (given without a subject), by context and id."""
        return [s for _, s in sorted(self._ids.items()) if not self._id_versions.get((s.context, s.id or 0))]

    def add(self, schema: Schema) -> None:
        """A schema given by id, by subject version, or both (from files, a dict, an export)."""
        has_version = schema.subject is not None and schema.version is not None
        if schema.id is None and not has_version:
            raise ValueError("a schema added to a registry needs an id or a subject and version")
        schema = replace(schema, guid=schema.guid or guid_of(schema.text, schema.references))
        if schema.id is not None:
            key = (schema.context, schema.id)
            known = self._ids.get(key)
            if known is not None and known.text != schema.text:
                raise ValueError(f"id {schema.id} is given twice with different schemas")
            if known is None:
                self._ids[key] = schema
            assert schema.guid is not None
            self._guids.setdefault(schema.guid, key)
        if has_version:
            sv = (schema.subject or "", schema.version or 0)
            self._versions[sv] = _Version(schema, "soft" if schema.deleted else "live", -1)
            if schema.id is not None:
                self._id_versions.setdefault((schema.context, schema.id), set()).add(sv)


def _stored_guid(md5: object) -> uuid.UUID | None:
    """The GUID a SCHEMA value stores (its ``md5``, base64), when it stores one."""
    if not isinstance(md5, str):
        return None
    try:
        raw = base64.b64decode(md5, validate=True)
    except (binascii.Error, ValueError):
        return None
    return uuid.UUID(bytes=raw) if len(raw) == 16 else None
