"""Filters a scan pushes down: a list of ``(column, op, value)`` terms, all ANDed.

Provides :func:`normalize` (check a filter, give it one canonical form), :func:`bounds` (the
offset and timestamp interval a filter allows, what segment and batch selection use),
:func:`constant_holds` (a term on a column constant over a whole log: ``topic``, ``partition``)
and :func:`row_mask` (the exact filter over decoded rows). Used by :mod:`kbatch.log._scan`, the
Polars plug-in (:mod:`kbatch.polars`) and the Spark source (:mod:`kbatch.spark._pushdown`).

The form, chosen so that each engine's filters translate into it term by term::

    filter  = [term, ...]                 every term must hold (AND); [] or None: all rows
    term    = (column, op, value)
    column  = "topic" | "partition" | "offset" | "timestamp"
    op      = "=" | "<" | "<=" | ">" | ">="   value: one scalar
            | "between"                       value: (low, high), both included
            | "in"                            value: a collection of scalars

``timestamp`` values are integers in **milliseconds** since the epoch (Kafka's unit) or
``datetime`` objects (naive ones are UTC); inside they are microseconds, the unit of the
Arrow ``timestamp`` column, so a bound finer than a millisecond keeps its meaning. A null
never satisfies a term (SQL's rule): a log whose partition is unknown matches no
``partition`` term.

>>> terms = normalize([("offset", ">=", 10), ("timestamp", "between", (1000, 2000))])
>>> b = bounds(terms)
>>> b["offset"], b["timestamp"]
((10, None), (1000000, 2000000))
>>> bounds(normalize([("offset", "in", [5, 3]), ("offset", "<", 4)]))["offset"]
(3, 3)
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from kbatch.errors import KBatchError

#: The columns a filter can name.
COLUMNS: Final = ("topic", "partition", "offset", "timestamp")
#: The operators a term can use.
OPS: Final = ("=", "<", "<=", ">", ">=", "between", "in")
_INT_COLUMNS: Final = ("partition", "offset", "timestamp")
_EPOCH: Final = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)

Term = tuple[str, str, Any]


class FilterError(KBatchError, ValueError):
    """A filter that is not a list of ``(column, op, value)`` terms kbatch can push down."""


def _micros(value: Any) -> int:
    """A timestamp bound in microseconds: an int is milliseconds, a datetime is itself."""
    if isinstance(value, _dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=_dt.timezone.utc)
        delta = value - _EPOCH
        return int((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds)
    if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
        raise FilterError(f"a timestamp bound must be an int (milliseconds) or a datetime, got {value!r}")
    return int(value) * 1000


def _scalar(column: str, value: Any) -> Any:
    if column == "timestamp":
        return _micros(value)
    if column == "topic":
        if not isinstance(value, str):
            raise FilterError(f"a topic must be a str, got {value!r}")
        return value
    if isinstance(value, (bool, float)) or not isinstance(value, (int, np.integer)):
        raise FilterError(f"a {column} must be an int, got {value!r}")
    return int(value)


def normalize(filter: Iterable[Sequence[Any]] | None) -> list[Term]:
    """The terms of ``filter`` checked, values converted (timestamps to microseconds).

    Raises
    ------
    FilterError
        A term that is not ``(column, op, value)`` with a known column and operator and a
        value of the column's type; says which term.
    """
    out: list[Term] = []
    for i, term in enumerate(filter or ()):
        if not isinstance(term, (tuple, list)) or len(term) != 3:
            raise FilterError(f"filter term {i} must be (column, op, value), got {term!r}")
        column, op, value = term
        if column not in COLUMNS:
            raise FilterError(f"filter term {i}: column must be one of {list(COLUMNS)}, got {column!r}")
        op = "=" if op == "==" else op
        if op not in OPS:
            raise FilterError(f"filter term {i}: op must be one of {list(OPS)}, got {op!r}")
        try:
            if op == "between":
                low, high = value
                value = (_scalar(column, low), _scalar(column, high))
            elif op == "in":
                if isinstance(value, (str, bytes)):
                    raise FilterError(f"'in' takes a collection of values, got {value!r}")
                value = frozenset(_scalar(column, v) for v in value)
            else:
                value = _scalar(column, value)
        except (TypeError, ValueError) as exc:
            raise FilterError(f"filter term {i} {term!r}: {exc}") from exc
        out.append((column, op, value))
    return out


def bounds(terms: Sequence[Term]) -> dict[str, tuple[int | None, int | None]]:
    """``{column: (low, high)}``, both included (None: unbounded), for the integer columns.

    An empty interval (``low > high``) means no row can match.
    """
    out: dict[str, tuple[int | None, int | None]] = {}
    for column in _INT_COLUMNS:
        lo: int | None = None
        hi: int | None = None

        def tighten(a: int | None, b: int | None) -> None:
            nonlocal lo, hi
            if a is not None:
                lo = a if lo is None else max(lo, a)
            if b is not None:
                hi = b if hi is None else min(hi, b)

        for col, op, value in terms:
            if col != column:
                continue
            if op == "=":
                tighten(value, value)
            elif op == "<":
                tighten(None, value - 1)
            elif op == "<=":
                tighten(None, value)
            elif op == ">":
                tighten(value + 1, None)
            elif op == ">=":
                tighten(value, None)
            elif op == "between":
                tighten(value[0], value[1])
            elif op == "in":
                if value:
                    tighten(min(value), max(value))
                else:
                    tighten(1, 0)
        out[column] = (lo, hi)
    return out


def empty(b: tuple[int | None, int | None]) -> bool:
    """Whether an interval of :func:`bounds` holds nothing."""
    return b[0] is not None and b[1] is not None and b[0] > b[1]


def _holds(op: str, left: Any, value: Any) -> bool:
    if op == "=":
        return bool(left == value)
    if op == "<":
        return bool(left < value)
    if op == "<=":
        return bool(left <= value)
    if op == ">":
        return bool(left > value)
    if op == ">=":
        return bool(left >= value)
    if op == "between":
        return bool(value[0] <= left <= value[1])
    return left in value


def constant_holds(terms: Sequence[Term], column: str, value: Any) -> bool:
    """Whether every term on ``column`` holds for ``value`` (None, a null, holds none)."""
    mine = [t for t in terms if t[0] == column]
    if not mine:
        return True
    return value is not None and all(_holds(op, value, v) for _, op, v in mine)


def _mask(op: str, left: npt.NDArray[np.int64], value: Any) -> npt.NDArray[np.bool_]:
    if op == "=":
        out = left == value
    elif op == "<":
        out = left < value
    elif op == "<=":
        out = left <= value
    elif op == ">":
        out = left > value
    elif op == ">=":
        out = left >= value
    elif op == "between":
        out = (left >= value[0]) & (left <= value[1])
    else:
        out = np.isin(left, np.fromiter(value, dtype=np.int64, count=len(value)))
    return np.asarray(out, dtype=np.bool_)


def row_mask(terms: Sequence[Term], offsets: npt.NDArray[Any], timestamps: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
    """The rows (record offsets, timestamps in milliseconds) every ``offset``/``timestamp`` term keeps."""
    keep = np.ones(len(offsets), dtype=bool)
    micros: npt.NDArray[np.int64] | None = None
    for column, op, value in terms:
        if column == "offset":
            keep &= _mask(op, offsets.astype(np.int64, copy=False), value)
        elif column == "timestamp":
            if micros is None:
                micros = timestamps.astype(np.int64) * 1000
            keep &= _mask(op, micros, value)
    return keep
