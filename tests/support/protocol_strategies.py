"""Hypothesis strategies for random messages of any definition and version."""

from __future__ import annotations

import uuid
from typing import Any

from hypothesis import strategies as st

from kbatch.protocol._schema import INT_RANGES, ZERO_UUID, FieldSpec

_text = st.text(max_size=12)
_small_binary = st.binary(max_size=24)


def _is_default_struct(value: Any, f: FieldSpec, version: int) -> bool:
    return value is None or value == f.default(version)


def element(f: FieldSpec, version: int, *, nullable: bool, depth: int, big: bool = False) -> st.SearchStrategy[Any]:
    kind = f.kind
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        s: st.SearchStrategy[Any] = st.one_of(st.integers(lo, hi), st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]))
    elif kind == "bool":
        s = st.booleans()
    elif kind == "float64":
        s = st.floats(allow_nan=False)
    elif kind == "string":
        s = _text
    elif kind == "bytes":
        s = _small_binary
    elif kind == "records":
        s = st.binary(max_size=64)
    elif kind == "uuid":
        s = st.one_of(st.uuids(), st.just(ZERO_UUID))
    elif kind == "struct":
        s = struct(f.fields or [], version, depth + 1, big=big)
    else:  # pragma: no cover
        raise AssertionError(kind)
    if nullable:
        s = st.one_of(st.none(), s)
    return s


def field_value(f: FieldSpec, version: int, depth: int, big: bool = False) -> st.SearchStrategy[Any]:
    nullable = version in f.nullable
    if f.array:
        max_size = (6 if depth < 2 else 3) if big else (3 if depth < 2 else 2)
        s: st.SearchStrategy[Any] = st.lists(element(f, version, nullable=False, depth=depth, big=big),
                                             max_size=max_size)
        if nullable:
            s = st.one_of(st.none(), s)
        return s
    return element(f, version, nullable=nullable, depth=depth, big=big)


@st.composite
def _struct(draw: st.DrawFn, fields: list[FieldSpec], version: int, depth: int, big: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if not f.present(version):
            continue
        if f.is_tagged(version):
            # a tagged field is either left at its default (and so absent on the
            # wire) or set to a value that is not the default
            is_struct = f.kind == "struct" and not f.array
            if draw(st.booleans()):
                # an absent tagged struct decodes as None
                out[f.key] = None if is_struct else f.default(version)
                continue
            value = draw(field_value(f, version, depth, big))
            if is_struct and _is_default_struct(value, f, version):
                value = None
            out[f.key] = value
        else:
            out[f.key] = draw(field_value(f, version, depth, big))
    return out


def struct(fields: list[FieldSpec], version: int, depth: int = 0, *,
           big: bool = False) -> st.SearchStrategy[dict[str, Any]]:
    """Random messages; ``big`` allows arrays long enough for the C kernel."""
    return _struct(fields, version, depth, big)


def unknown_tags() -> st.SearchStrategy[dict[int, bytes]]:
    return st.dictionaries(st.integers(1000, 5000), st.binary(max_size=8), min_size=1, max_size=3)


__all__ = ["field_value", "struct", "unknown_tags", "uuid"]
