"""Kafka's JSON message definitions, parsed into a small typed model.

The format is the one of Apache Kafka's ``clients/src/main/resources/common/message``
directory: JSON with ``//`` comments; a message has ``apiKey``, ``type``,
``name``, ``validVersions``, ``flexibleVersions``, ``fields`` and optional
``commonStructs``; a field has ``name``, ``type``, ``versions`` and optionally
``nullableVersions``, ``tag`` + ``taggedVersions``, ``flexibleVersions``,
``default``, ``ignorable``, ``mapKey`` and, for struct types, ``fields``.
"""

from __future__ import annotations

import json
import re
import sys
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = ["FieldSpec", "MessageSpec", "VersionRange", "parse_message", "strip_comments"]

MAX_VERSION = 0x7FFF

FIXED_FORMATS: dict[str, tuple[str, int]] = {
    "bool": ("?", 1),
    "int8": ("b", 1),
    "int16": ("h", 2),
    "uint16": ("H", 2),
    "int32": ("i", 4),
    "uint32": ("I", 4),
    "int64": ("q", 8),
    "float64": ("d", 8),
}
PRIMITIVES = frozenset(FIXED_FORMATS) | {"string", "bytes", "records", "uuid"}
INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "uint16": (0, (1 << 16) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "uint32": (0, (1 << 32) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
}
ZERO_UUID = uuid.UUID(int=0)

_SNAKE = re.compile(r"(?<!^)(?=[A-Z])")


def snake(name: str) -> str:
    """Python key for a Kafka field name (``ThrottleTimeMs`` -> ``throttle_time_ms``).

    The rule is kafka-python's, so keys match its attribute names.

    >>> snake("HighWatermark")
    'high_watermark'
    """
    # interned, as the keys of dict literals are: lookups then match by identity
    return sys.intern(_SNAKE.sub("_", name).lower())


@dataclass(frozen=True)
class VersionRange:
    """An inclusive range of versions; empty when ``lo > hi``."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str | None, *, default: VersionRange | None = None) -> VersionRange:
        """Parse ``"3+"``, ``"1-4"``, ``"5"``, ``"none"`` (or a missing value)."""
        if text is None:
            return default if default is not None else NONE
        text = str(text).strip()
        if text in ("", "none"):
            return NONE
        if text.endswith("+"):
            return cls(int(text[:-1]), MAX_VERSION)
        if "-" in text:
            lo, hi = text.split("-", 1)
            return cls(int(lo), int(hi))
        return cls(int(text), int(text))

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.lo <= version <= self.hi

    @property
    def empty(self) -> bool:
        """True when the range holds no version."""
        return self.lo > self.hi

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi == MAX_VERSION:
            return f"{self.lo}+"
        return f"{self.lo}" if self.lo == self.hi else f"{self.lo}-{self.hi}"


NONE = VersionRange(0, -1)


@dataclass
class FieldSpec:
    """One field of a message or struct.

    ``kind`` is the element type: a primitive name or ``"struct"``;
    ``array`` tells whether the field is an array of ``kind``.
    """

    name: str
    key: str
    type: str
    kind: str
    array: bool
    versions: VersionRange
    nullable: VersionRange
    tag: int | None
    tagged: VersionRange
    flexible: VersionRange | None
    default_text: str | None
    ignorable: bool
    map_key: bool
    struct_name: str | None
    fields: list[FieldSpec] | None
    raw: dict[str, Any] = field(repr=False)

    def present(self, version: int) -> bool:
        """Whether the field exists (tagged or not) in ``version``."""
        return version in self.versions

    def is_tagged(self, version: int) -> bool:
        """Whether the field is a tagged field in ``version``."""
        return self.tag is not None and version in self.tagged and version in self.versions

    def default(self, version: int | None = None) -> Any:
        """The value a reader assumes when the field is absent."""
        text = self.default_text
        if self.array:
            if text == "null":
                return None
            return []
        kind = self.kind
        if kind == "struct":
            if text == "null":
                return None
            return {
                f.key: f.default(version)
                for f in self.fields or ()
                if version is None or f.present(version)
            }
        if kind == "bool":
            return text is not None and text.strip().lower() == "true"
        if kind in INT_RANGES:
            if not text:
                return 0
            t = text.strip()
            neg = t.startswith("-")
            body = t[1:] if neg else t
            if body.lower().startswith("0x"):
                value = int(body, 16)
            elif len(body) > 1 and body.startswith("0") and body.isdigit():
                value = int(body, 8)
            else:
                value = int(body)
            return -value if neg else value
        if kind == "float64":
            return float(text) if text else 0.0
        if kind == "string":
            if text == "null":
                return None
            return text or ""
        if kind == "bytes":
            return None if text == "null" else b""
        if kind == "records":
            return None
        if kind == "uuid":
            return uuid.UUID(text) if text else ZERO_UUID
        raise ValueError(f"unknown field type {self.type!r}")


@dataclass
class MessageSpec:
    """A parsed message definition (request, response, header or data)."""

    name: str
    type: str
    api_key: int | None
    valid: VersionRange
    flexible: VersionRange
    fields: list[FieldSpec]
    raw: dict[str, Any] = field(repr=False)


_COMMENT = re.compile(r'"(?:\\.|[^"\\])*"|//[^\n]*', re.DOTALL)


def strip_comments(text: str) -> str:
    """Remove ``//`` comments from Kafka's JSON (not inside strings).

    >>> strip_comments('{"a": "x//y"} // note')
    '{"a": "x//y"} '
    """
    return _COMMENT.sub(lambda m: m.group(0) if m.group(0).startswith('"') else "", text)


def _parse_field(raw: dict[str, Any], common: dict[str, list[dict[str, Any]]],
                 msg_flexible: VersionRange) -> FieldSpec:
    name = raw["name"]
    type_ = raw["type"]
    array = type_.startswith("[]")
    elem = type_[2:] if array else type_
    sub_raw = raw.get("fields")
    struct_name: str | None = None
    if elem in PRIMITIVES:
        if sub_raw:
            raise ValueError(f"field {name}: primitive type {type_} cannot have fields")
        kind = elem
    else:
        if not elem or not elem[0].isupper():
            raise ValueError(f"field {name}: unknown type {type_!r}")
        kind = "struct"
        struct_name = elem
        if sub_raw is None:
            if elem not in common:
                raise ValueError(f"field {name}: struct {elem} has no fields and is not a common struct")
            sub_raw = common[elem]
    tag = raw.get("tag")
    tagged = VersionRange.parse(raw.get("taggedVersions"))
    # as Kafka's generator: a tagged field without "versions" exists in its taggedVersions
    if "versions" not in raw and tagged.empty:
        raise ValueError(f"field {name}: missing versions")
    versions = VersionRange.parse(raw.get("versions"), default=tagged)
    if tag is not None:
        if tagged.empty:
            raise ValueError(f"field {name}: tag without taggedVersions")
        if tagged.lo < msg_flexible.lo or msg_flexible.empty:
            raise ValueError(f"field {name}: tagged versions {tagged} outside flexible versions")
    default = raw.get("default")
    spec = FieldSpec(
        name=name,
        key=snake(name),
        type=type_,
        kind=kind,
        array=array,
        versions=versions,
        nullable=VersionRange.parse(raw.get("nullableVersions")),
        tag=None if tag is None else int(tag),
        tagged=tagged,
        flexible=VersionRange.parse(raw["flexibleVersions"]) if "flexibleVersions" in raw else None,
        default_text=None if default is None else str(default).lower() if isinstance(default, bool) else str(default),
        ignorable=bool(raw.get("ignorable", False)),
        map_key=bool(raw.get("mapKey", False)),
        struct_name=struct_name,
        fields=([_parse_field(f, common, msg_flexible) for f in sub_raw]
                if kind == "struct" and sub_raw is not None else None),
        raw=raw,
    )
    spec.default()  # validate the default now, not at first use
    return spec


def parse_message(text_or_obj: str | dict[str, Any]) -> MessageSpec:
    """Parse one definition (JSON text with comments, or an already-loaded dict).

    Examples
    --------
    >>> spec = parse_message('''{ // a comment
    ...   "apiKey": 99, "type": "request", "name": "PingRequest",
    ...   "validVersions": "0-1", "flexibleVersions": "1+",
    ...   "fields": [{"name": "Payload", "type": "string", "versions": "0+"}]}''')
    >>> spec.name, str(spec.valid), spec.fields[0].key
    ('PingRequest', '0-1', 'payload')
    """
    raw = json.loads(strip_comments(text_or_obj)) if isinstance(text_or_obj, str) else text_or_obj
    common = {s["name"]: s["fields"] for s in raw.get("commonStructs", [])}
    flexible = VersionRange.parse(raw.get("flexibleVersions"))
    fields = [_parse_field(f, common, flexible) for f in raw.get("fields", [])]
    _check_tags(fields, raw["name"])
    return MessageSpec(
        name=raw["name"],
        type=raw["type"],
        api_key=raw.get("apiKey"),
        valid=VersionRange.parse(raw.get("validVersions")),
        flexible=flexible,
        fields=fields,
        raw=raw,
    )


def _check_tags(fields: list[FieldSpec], where: str) -> None:
    seen: dict[int, str] = {}
    for f in fields:
        if f.tag is not None:
            if f.tag in seen:
                raise ValueError(f"{where}: tag {f.tag} used by {seen[f.tag]} and {f.name}")
            seen[f.tag] = f.name
        if f.fields:
            _check_tags(f.fields, f"{where}.{f.name}")
