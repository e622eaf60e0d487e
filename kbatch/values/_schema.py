"""`Schema`, the value a registry hands to a format compiler, and the registry's subject names.

A schema registry (Confluent's, Karapace, Redpanda's, Apicurio in Confluent mode) keeps, per
*subject* (usually ``<topic>-value`` / ``<topic>-key``), numbered *versions*; each version points
at a schema that has a global *id* (the id a producer writes in front of each value) and may
name *references*: named types defined in other subjects' schemas. Ids are unique within a
*context*; a subject is qualified with its context as ``:.ctx:name`` (Confluent's
``QualifiedSubject``), and a plain name is in the default context ``.``. A schema's *GUID* is
the MD5 of its text and references (Confluent's ``Schema.getGuid``), the handle of the newer
``0x01`` wire framing.

>>> s = Schema('"string"', id=1, subject="t-value", version=2)
>>> s.schema_type, s.context
('AVRO', '.')
>>> split_subject(":.eu:orders-value")
('.eu', 'orders-value')
>>> qualify_reference("common", parent=":.eu:orders-value")
':.eu:common'
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field

__all__ = [
    "DEFAULT_CONTEXT",
    "SCHEMA_TYPES",
    "Schema",
    "SchemaReference",
    "guid_of",
    "qualify_reference",
    "schema_type_name",
    "split_subject",
]

#: The schema languages a registry stores; ``schemaType`` absent means AVRO.
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSON")
#: The context of a subject that names none.
DEFAULT_CONTEXT = "."
_CONTEXT_PREFIX = ":."


def schema_type_name(value: object) -> str:
    """A registry's ``schemaType`` (None or absent = AVRO) checked and upper-cased.

    >>> schema_type_name(None), schema_type_name("protobuf")
    ('AVRO', 'PROTOBUF')
    """
    if value is None:
        return "AVRO"
    name = str(value).upper()
    if name not in SCHEMA_TYPES:
        raise ValueError(f"unknown schema type {value!r}, expected one of {', '.join(SCHEMA_TYPES)}")
    return name


def split_subject(subject: str | None) -> tuple[str, str]:
    """``(context, name)`` of a subject as Confluent's ``QualifiedSubject`` splits it.

    ``:.ctx:name`` -> ``(".ctx", "name")``; ``:.ctx`` or ``:.ctx:`` -> ``(".ctx", "")``; a name
    without the prefix (or None) is in the default context ``"."``.

    >>> split_subject("orders-value"), split_subject(":.eu:"), split_subject(None)
    (('.', 'orders-value'), ('.eu', ''), ('.', ''))
    """
    text = subject or ""
    if text.startswith(_CONTEXT_PREFIX):
        end = text.find(":", len(_CONTEXT_PREFIX))
        if end < 0:
            return text[1:], ""
        return text[1:end], text[end + 1 :]
    return DEFAULT_CONTEXT, text


def join_subject(context: str, name: str) -> str:
    """The qualified subject of ``name`` in ``context`` (the plain name in the default context).

    >>> join_subject(".", "a"), join_subject(".eu", "a"), join_subject(".eu", "")
    ('a', ':.eu:a', ':.eu:')
    """
    return name if context == DEFAULT_CONTEXT else f":{context}:{name}"


def qualify_reference(subject: str, parent: str | None) -> str:
    """A reference's subject, qualified with its parent's context when it names none
    (Confluent's ``QualifiedSubject.qualifySubjectWithParent``).

    >>> qualify_reference("common", None), qualify_reference(":.x:common", ":.eu:orders")
    ('common', ':.x:common')
    """
    context, name = split_subject(subject)
    if context != DEFAULT_CONTEXT:
        return subject
    parent_context, _ = split_subject(parent)
    return join_subject(parent_context, name)


@dataclass(frozen=True)
class SchemaReference:
    """A named type a schema takes from another subject's schema.

    Attributes
    ----------
    name : str
        The name the referring schema uses (an Avro full name, a ``.proto`` import path, a
        JSON Schema ``$ref`` URL).
    subject : str
        The subject holding the referenced schema (qualified with the referrer's context when
        it names none).
    version : int
        Its version there; ``-1`` means the latest.
    """

    name: str
    subject: str
    version: int

    @classmethod
    def from_json(cls, obj: object) -> SchemaReference:
        """A reference from the registry's JSON (``{"name", "subject", "version"}``)."""
        if not isinstance(obj, dict):
            raise ValueError(f"a schema reference must be an object, got {obj!r}")
        try:
            name, subject, version = obj["name"], obj["subject"], obj["version"]
        except KeyError as exc:
            raise ValueError(f"schema reference {obj!r} lacks {exc.args[0]!r}") from None
        if not isinstance(name, str) or not isinstance(subject, str) or not isinstance(version, int):
            raise ValueError(f"schema reference {obj!r}: name and subject must be strings, version an integer")
        return cls(name, subject, version)

    def to_json(self) -> dict[str, object]:
        """The registry's JSON form."""
        return {"name": self.name, "subject": self.subject, "version": self.version}


@dataclass(frozen=True)
class Schema:
    """One registered schema: what a format compiler takes.

    Attributes
    ----------
    text : str
        The schema as the registry stores it (Avro JSON, ``.proto`` source, JSON Schema).
    schema_type : {"AVRO", "PROTOBUF", "JSON"}
        Its language.
    id : int or None
        Its id in its context (None for a schema given without one).
    subject, version : str or None, int or None
        A subject version that registered it, when known (an id may be registered under
        several; this is one of them, preferring live versions).
    references : tuple of SchemaReference
        The named types it takes from other subjects, as declared.
    dependencies : tuple of (str, Schema)
        Every schema those references reach, transitively, as ``(reference name, schema)``
        with each dependency before the schemas that use it (the order Confluent's
        ``resolveReferences`` builds): a compiler defines their named types first, then
        compiles :attr:`text`. Empty when there are no references.
    deleted : bool
        Whether that subject version is soft-deleted (its id still decodes old data).
    context : str
        The context its id belongs to (``"."`` by default).
    guid : uuid.UUID or None
        Its GUID, when known.
    """

    text: str
    schema_type: str = "AVRO"
    id: int | None = None
    subject: str | None = None
    version: int | None = None
    references: tuple[SchemaReference, ...] = ()
    dependencies: tuple[tuple[str, Schema], ...] = field(default=(), repr=False)
    deleted: bool = False
    context: str = DEFAULT_CONTEXT
    guid: uuid.UUID | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.text, str):
            raise TypeError(f"schema text must be a str, got {type(self.text).__name__}")
        object.__setattr__(self, "schema_type", schema_type_name(self.schema_type))


def guid_of(text: str, references: tuple[SchemaReference, ...] = ()) -> uuid.UUID:
    """A schema's GUID as Confluent computes it when it has no metadata or rule set: the MD5 of
    the text (UTF-8) and of each reference's name, subject and version (big-endian int32),
    read as a UUID.

    >>> str(guid_of('"string"'))
    '095d71cf-1255-6b9d-5e33-0ad575b3df5d'
    """
    md5 = hashlib.md5(text.encode("utf-8"), usedforsecurity=False)
    for ref in references:
        md5.update(ref.name.encode("utf-8"))
        md5.update(ref.subject.encode("utf-8"))
        md5.update((ref.version & 0xFFFFFFFF).to_bytes(4, "big"))
    return uuid.UUID(bytes=md5.digest())
