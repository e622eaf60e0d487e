"""Differential tests: kbatch.protocol against kafka-python's protocol layer.

kafka-python 3.x bundles Kafka 4.x's own JSON definitions. For every request
and response among them, and every version, random messages encoded by both
codecs must be byte-identical, and each must decode the other's bytes to the
same values.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.api_header import ResponseClassRegistry
from kafka.protocol.api_message import ApiMessage, ApiMessageData
from support import protocol_strategies as strategies
from support.protocol_defs import KAFKA_PYTHON_DEFINITIONS, types

from kbatch.protocol import Message, Records, Schema
from kbatch.protocol._schema import ZERO_UUID, FieldSpec

SCHEMA = Schema.from_directory(KAFKA_PYTHON_DEFINITIONS)
MESSAGES = [m for m in SCHEMA if m.type in ("request", "response")]
CASES = [(m.name, v) for m in MESSAGES for v in m.versions]

_KP_CLASSES: dict[str, Any] = {}


def kp_class(name: str) -> Any:
    """A kafka-python message class built from the unpatched bundled JSON."""
    cls = _KP_CLASSES.get(name)
    if cls is None:
        saved = dict(ResponseClassRegistry._response_class_registry)
        try:
            cls = ApiMessageData(name, (ApiMessage,), {"__module__": __name__})
        finally:
            ResponseClassRegistry._response_class_registry.clear()
            ResponseClassRegistry._response_class_registry.update(saved)
        _KP_CLASSES[name] = cls
    return cls


def to_kp(kstruct: Any, fields: list[FieldSpec], d: dict[str, Any], version: int, data_class: Any) -> Any:
    """Build a kafka-python object from a kbatch message dict."""
    kwargs: dict[str, Any] = {}
    for f in fields:
        if not f.present(version) or f.key not in d:
            continue
        value = d[f.key]
        kfield = kstruct.fields[f.key]
        if f.is_tagged(version) and f.kind == "struct" and not f.array and value == f.default(version):
            continue
        if f.kind == "struct" and value is not None:
            sub_cls = kfield.data_class
            if f.array:
                value = [to_kp(kfield, f.fields or [], x, version, sub_cls) for x in value]
            else:
                value = to_kp(kfield, f.fields or [], value, version, sub_cls)
        elif f.kind == "uuid":
            value = [None if x == ZERO_UUID else x for x in value] if f.array else (
                None if value == ZERO_UUID else value)
        elif f.kind == "records" and value is not None:
            value = bytes(value)
        kwargs[f.key] = value
    if data_class is None:
        return kstruct(version=version, **kwargs)
    return data_class(version=version, **kwargs)


def norm(fields: list[FieldSpec], d: Any, version: int) -> Any:
    """A comparable form of a kbatch dict or a kafka-python object."""
    if d is None:
        return None
    get = d.get if isinstance(d, dict) else (lambda k, default=None: getattr(d, k, default))
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(version):
            continue
        value = get(f.key)
        if f.kind == "struct":
            if f.array:
                value = None if value is None else [norm(f.fields or [], x, version) for x in value]
            else:
                if f.is_tagged(version) and (value is None or (
                        isinstance(value, dict) and value == f.default(version))):
                    value = None
                value = norm(f.fields or [], value, version)
        elif f.kind == "uuid":
            def nu(x: Any) -> Any:
                return None if x is None or x == ZERO_UUID else uuid.UUID(str(x))
            value = None if value is None else [nu(x) for x in value] if f.array else nu(value)
        elif f.array and isinstance(value, tuple):
            value = list(value)
        elif f.kind == "records" or f.kind == "bytes":
            if isinstance(value, Records):
                value = bytes(value)
            elif isinstance(value, memoryview):
                value = value.tobytes()
        out[f.key] = value
    return out


@pytest.mark.parametrize(("name", "version"), CASES, ids=[f"{n}-v{v}" for n, v in CASES])
def test_same_bytes_as_kafka_python(name: str, version: int) -> None:
    msg = SCHEMA[name]
    pure = Message(msg.spec, kernel=False)
    cls = kp_class(name)
    fields = msg.spec.fields

    @settings(max_examples=4, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def run(data: st.DataObject) -> None:
        value = data.draw(strategies.struct(fields, version))
        ours = msg.encode(value, version)
        kobj = to_kp(cls._struct, fields, value, version, cls)
        theirs = kobj.encode(version=version)
        assert ours == theirs
        # each decodes the other's bytes (identical here) to the same values
        back = msg.decode(theirs, version)
        assert norm(fields, back, version) == norm(fields, value, version)
        # the C kernels and the generated Python agree, down to the types
        assert pure.encode(value, version) == ours
        assert types(pure.decode(ours, version)) == types(back)
        kback = cls.decode(ours, version=version)
        assert norm(fields, kback, version) == norm(fields, value, version)

    run()
