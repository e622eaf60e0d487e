"""Kafka's JSON form of a message: what its generated ``*JsonConverter.write`` builds, as Jackson prints it.

kafka-dump-log prints internal-topic records this way, so ``kbatch dump`` writes the same text
from a :class:`kbatch.protocol.MessageSpec` and a decoded message (a dict keyed by the fields'
``key``). The rules (Kafka's ``JsonConverterGenerator`` and Jackson's ``ObjectNode.toString``):

- fields in definition order, named ``lowerCaseFirst(name)``; only those present in the version;
  a tagged field only when it differs from its default;
- ``int8``/``int16``/``uint16``/``int32``/``uint32``/``int64``: decimal numbers; ``bool``:
  ``true``/``false``; ``float64``: Java's ``Double.toString`` (``1.0E7``, ``0.001``, ``"NaN"``);
- ``string``: Jackson's escapes (``\\"``, ``\\\\``, ``\\b\\t\\n\\f\\r``, other controls ``\\u00XX``
  upper case, nothing else escaped); ``bytes``: standard base64 with padding; ``uuid``: Kafka's
  ``Uuid.toString`` (URL-safe base64 of the 16 bytes, no padding); null: ``null``;
- no spaces anywhere.

>>> from kbatch.protocol import parse_message
>>> spec = parse_message({"name": "R", "type": "data", "validVersions": "0", "flexibleVersions": "0+",
...     "fields": [{"name": "Name", "type": "string", "versions": "0+"},
...                {"name": "Weight", "type": "float64", "versions": "0+"},
...                {"name": "Note", "type": "string", "versions": "0+", "nullableVersions": "0+",
...                 "taggedVersions": "0+", "tag": 0, "default": "null"}]})
>>> write(spec.fields, {"name": 'a"b', "weight": 1e7, "note": None}, 0)
'{"name":"a\\\\"b","weight":1.0E7}'
"""

from __future__ import annotations

import base64
import math
import re
import uuid
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kbatch.protocol import MessageSpec

    from ._schema import FieldSpec

__all__ = ["KafkaJson", "java_double", "kafka_uuid", "message_json", "write"]


class KafkaJson(str):
    """Text that is already Kafka JSON: written as it is where a field's value would go."""


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\f": "\\f", "\n": "\\n", "\r": "\\r"}
_NEEDS_ESCAPE = re.compile(r'[\x00-\x1f"\\]')


def _string(text: str) -> str:
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _ESCAPES.get(m.group(0)) or f"\\u{ord(m.group(0)):04X}", text) + '"'


def java_double(d: float) -> str:
    """Java's ``Double.toString`` (shortest digits, as JDK 19+), as Jackson writes a DoubleNode.

    >>> [java_double(x) for x in (0.0, -0.0, 1.0, 1234567.5, 1e7, 0.001, 0.0001, -2.5e-10, float("nan"))]
    ['0.0', '-0.0', '1.0', '1234567.5', '1.0E7', '0.001', '1.0E-4', '-2.5E-10', '"NaN"']
    """
    if math.isnan(d):
        return '"NaN"'
    if math.isinf(d):
        return '"Infinity"' if d > 0 else '"-Infinity"'
    if d == 0:
        return "-0.0" if math.copysign(1.0, d) < 0 else "0.0"
    sign = "-" if d < 0 else ""
    t = Decimal(repr(abs(d))).normalize().as_tuple()  # the shortest digits that round-trip
    digits = "".join(map(str, t.digits))
    exp = int(t.exponent) + len(digits) - 1  # abs(d) ~ digits[0].digits[1:] * 10**exp
    if len(digits) == 1:
        # Java prints at least two digits, the two closest to the exact value (5e-324 is 4.9E-324)
        mantissa, _, e = f"{Decimal(abs(d)):.1e}".partition("e")
        digits, exp = mantissa.replace(".", "").rstrip("0") or "0", int(e)
    if 1e-3 <= abs(d) < 1e7:
        if exp >= 0:
            whole = digits[: exp + 1].ljust(exp + 1, "0")
            return f"{sign}{whole}.{digits[exp + 1:] or '0'}"
        return f"{sign}0.{'0' * (-exp - 1)}{digits}"
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{exp}"


def kafka_uuid(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding.

    >>> kafka_uuid(uuid.UUID(int=1))
    'AAAAAAAAAAAAAAAAAAAAAQ'
    """
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def _scalar(f: FieldSpec, kind: str, v: Any, version: int) -> str:
    if v is None:
        return "null"
    if isinstance(v, KafkaJson):
        return str(v)
    if kind == "struct":
        return write(f.fields or [], v, version)
    if kind == "bool":
        return "true" if v else "false"
    if kind == "float64":
        return java_double(float(v))
    if kind == "string":
        return _string(str(v))
    if kind == "bytes":
        return '"' + base64.b64encode(bytes(v)).decode("ascii") + '"'
    if kind == "records":
        return '""'  # Kafka's converters write records as an empty BinaryNode
    if kind == "uuid":
        return _string(kafka_uuid(v))
    return str(int(v))


def _value(f: FieldSpec, v: Any, version: int) -> str:
    if f.array and v is not None and not isinstance(v, KafkaJson):
        return "[" + ",".join(_scalar(f, f.kind, e, version) for e in v) + "]"
    return _scalar(f, f.kind, v, version)


def write(fields: Sequence[FieldSpec], obj: Mapping[str, Any], version: int) -> str:
    """The Kafka JSON text of a message (or struct) with these ``fields`` at ``version``."""
    parts = []
    for f in fields:
        if not f.present(version):
            continue
        text = _value(f, obj.get(f.key, f.default(version)), version)
        if f.is_tagged(version) and text == _value(f, f.default(version), version):
            continue
        parts.append(_string(f.name[:1].lower() + f.name[1:]) + ":" + text)
    return "{" + ",".join(parts) + "}"


def message_json(spec: MessageSpec, obj: Mapping[str, Any], version: int) -> KafkaJson:
    """:func:`write` for a whole message."""
    return KafkaJson(write(spec.fields, obj, version))
