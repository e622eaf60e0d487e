"""Polars lazy scans of Kafka logs: :func:`scan_kafka_log`, filters and projections pushed down.

A ``LazyFrame`` over one or many partition directories through Polars' IO plug-in API
(``polars.io.plugins.register_io_source``). Polars hands the scan the columns the query uses,
its predicate, a row limit and a batch size; the predicate's ANDed comparisons, ``is_between``
and ``is_in`` on ``topic``, ``partition``, ``offset`` and ``timestamp`` (a datetime) become
:meth:`kbatch.log.LogDir.scan_records` terms (segments and batches skipped, see
:mod:`kbatch.log._scan`), and the whole predicate is applied to the rows afterwards, so what Polars
cannot hand over (``OR``, a function of a column, a filter on ``value``) is still exact. Polars
is an optional dependency (``pip install kbatch[polars]``).

Typed values (``values=`` / ``keys=``: a :class:`kbatch.values.Registry`, or ``"auto"``, the
root's own ``_schemas`` topic): ``value`` is the struct ``kbatch convert --values auto`` writes,
laid out by the latest version of subject ``<topic>-value`` (so the frame's schema is known
before reading), followed by ``value_schema_id`` and, with ``errors="null"``, ``value_error``.
One frame decodes one topic: ``topic=`` picks it in a root of several. ``fields=`` narrows the
``value`` struct to the fields named (the decoder skips the others), and a predicate whose every
use of ``value`` is a field of it (``pl.col("value").struct.field("total") > 100``) is judged
on a decode of those fields alone: only the records it keeps are decoded whole
(:mod:`kbatch.values._scan`).

>>> import kbatch, tempfile, polars as pl
>>> from kbatch.log import LogWriter
>>> root = tempfile.mkdtemp()
>>> with LogWriter(root, "t", 0) as w:
...     _ = w.append(kbatch.encode([b"a", b"b", b"c"], timestamps=[1000, 2000, 3000]))
>>> lf = scan_kafka_log(root)
>>> lf.filter(pl.col("offset") >= 1).select("offset", "value").collect().rows()
[(1, b'b'), (2, b'c')]
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

from kbatch.arrow import kafka_schema
from kbatch.errors import LayoutError
from kbatch.log import LogDir, ScanStats, open_log, open_logs, scan_logs, value_scan

if TYPE_CHECKING:  # kbatch.values needs pyarrow: imported when values="auto" is used
    from kbatch.values import Registry

__all__ = ["ValueWhere", "predicate_terms", "scan_kafka_log", "value_where"]

_OPS: Final = {"Eq": "=", "Lt": "<", "LtEq": "<=", "Gt": ">", "GtEq": ">="}
_FLIP: Final = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_PUSHED: Final = ("topic", "partition", "offset", "timestamp")


def _literal(node: Any) -> Any:
    """The Python value of a constant expression node (a literal, ``pl.datetime(...)``), or raise."""
    import polars as pl

    if "Column" in json.dumps(node):
        raise ValueError("not a constant")
    expr = pl.Expr.deserialize(io.StringIO(json.dumps(node)), format="json")
    value = pl.select(expr).item()
    return value.to_list() if isinstance(value, pl.Series) else value


def _typed(column: str, value: Any) -> bool:
    """Whether ``value`` means the same to Polars and to a kbatch term on ``column``."""
    import datetime as dt

    if column == "timestamp":  # a bare int would be milliseconds to kbatch, microseconds to Polars
        return isinstance(value, dt.datetime)
    if column == "topic":
        return isinstance(value, str)
    return isinstance(value, int) and not isinstance(value, bool)


def _column(node: Any) -> str | None:
    """The column ``node`` is, unchanged: a column, or ``timestamp`` cast to its own unit (as DuckDB sends it)."""
    if not isinstance(node, dict):
        return None
    if "Column" in node:
        name = node["Column"]
        return name if name in _PUSHED else None
    f = node.get("Function")
    if isinstance(f, dict) and f.get("function") == {"TemporalExpr": {"CastTimeUnit": "Microseconds"}}:
        args = f.get("input", [])
        if len(args) == 1 and isinstance(args[0], dict) and args[0].get("Column") == "timestamp":
            return "timestamp"
    return None


def _terms(node: Any, out: list[tuple[str, str, Any]]) -> bool:
    """Append the terms of ``node`` (a serialized Polars expression); True when all of it became terms."""
    if not isinstance(node, dict):
        return False
    if "Literal" in node:  # a constant: Polars folds e.g. ``is_in([])`` into ``false``
        try:
            value = _literal(node)
        except Exception:  # noqa: BLE001 - left to Polars
            return False
        if value is True:
            return True
        if value is False or value is None:  # keeps no row: nothing to read (or decode)
            out.append(("offset", "in", []))
            return True
        return False
    if "BinaryExpr" in node:
        b = node["BinaryExpr"]
        if b["op"] in ("And", "LogicalAnd"):
            done = _terms(b["left"], out)
            return _terms(b["right"], out) and done
        op = _OPS.get(b["op"])
        if op is None:
            return False
        left, right = b["left"], b["right"]
        column = _column(left)
        if column is None:
            column, right, op = _column(right), left, _FLIP[op]
        if column is None:
            return False
        try:
            value = _literal(right)
        except Exception:  # noqa: BLE001 - anything Polars cannot evaluate alone stays with Polars
            return False
        if not _typed(column, value):
            return False
        out.append((column, op, value))
        return True
    if "Function" in node:
        f = node["Function"]
        fn = f.get("function", {}).get("Boolean", {})
        args = f.get("input", [])
        column = _column(args[0]) if args else None
        if column is None:
            return False
        try:
            values = [_literal(a) for a in args[1:]]
        except Exception:  # noqa: BLE001
            return False
        if isinstance(fn, dict) and "IsBetween" in fn and len(values) == 2:
            closed = fn["IsBetween"].get("closed", "Both")
            if not all(_typed(column, v) for v in values):
                return False
            out.append((column, ">=" if closed in ("Both", "Left") else ">", values[0]))
            out.append((column, "<=" if closed in ("Both", "Right") else "<", values[1]))
            return True
        if isinstance(fn, dict) and "IsIn" in fn and len(values) == 1 and isinstance(values[0], list):
            items = values[0]
            if not all(_typed(column, v) for v in items):  # a null in the list: left to Polars
                return False
            out.append((column, "in", items))
            return True
    return False


def predicate_terms(predicate: Any) -> tuple[list[tuple[str, str, Any]], bool]:
    """The :meth:`~kbatch.log.LogDir.scan_records` terms of a Polars predicate, and whether they are all of it.

    Only ANDed parts are taken: comparisons of ``topic``, ``partition``, ``offset`` with
    literals of their type, of ``timestamp`` with datetimes, ``is_between`` and ``is_in``; a
    constant ``false`` (or null), which keeps no row, is the term ``offset in []``.

    >>> import polars as pl
    >>> predicate_terms((pl.col("offset") > 5) & (pl.col("value") == b"x"))
    ([('offset', '>', 5)], False)
    >>> predicate_terms(pl.lit(False))
    ([('offset', 'in', [])], True)
    """
    if predicate is None:
        return [], True
    terms: list[tuple[str, str, Any]] = []
    whole = _terms(json.loads(predicate.meta.serialize(format="json")), terms)
    return terms, whole


class ValueWhere:
    """A Polars predicate on value fields, judged on a narrow decode (a
    :class:`kbatch.log._scan_values.ValueFilter`)."""

    def __init__(self, predicate: Any, fields: Sequence[str]) -> None:
        self.predicate = predicate
        self.fields = fields
        self.columns: Sequence[str] = sorted(set(predicate.meta.root_names()) - {"value"})

    def __call__(self, table: Any) -> Any:
        import numpy as np
        import polars as pl

        try:
            kept = pl.from_arrow(table).select(self.predicate.fill_null(False)).to_series()  # type: ignore[union-attr]
        except pl.exceptions.PolarsError:  # (a use of the fields it could not judge: keep every row)
            return np.ones(table.num_rows, dtype=np.bool_)
        return kept.to_numpy()


#: Decoded columns a predicate judged on a narrow decode must not read: the narrow decode's
#: errors and ids are not the whole decode's (a fault in a field it skips goes unseen).
_NOT_NARROW: Final = frozenset({"value_error", "value_schema_id", "key", "key_error", "key_schema_id"})


def value_where(predicate: Any, keys_decoded: bool = False) -> ValueWhere | None:
    """The filter on value fields of a Polars ``predicate``, to be judged on a decode of those
    fields alone, or None when it has none or reads ``value`` in another way (whole, in a
    function of the struct) or a decoded column whose narrow decode differs (``value_error``,
    ``value_schema_id``, decoded keys).

    >>> import polars as pl
    >>> value_where((pl.col("value").struct.field("total") > 5) & (pl.col("offset") > 9)).fields
    ['total']
    >>> value_where(pl.col("value").is_null()) is None
    True
    """
    if predicate is None:
        return None
    roots = predicate.meta.root_names()
    if "value" not in roots or any(c in roots for c in _NOT_NARROW if keys_decoded or not c.startswith("key")):
        return None
    fields: set[str] = set()
    uses = [0]

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            f = node.get("Function")
            if isinstance(f, dict) and f.get("input") == [{"Column": "value"}]:
                name = f.get("function", {}).get("StructExpr", {})
                if isinstance(name, dict) and isinstance(name.get("FieldByName"), str):
                    fields.add(name["FieldByName"])
                    uses[0] += 1
                    return
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(json.loads(predicate.meta.serialize(format="json")))
    if not fields or uses[0] != roots.count("value"):
        return None
    return ValueWhere(predicate, sorted(fields))


def _logs(source: Any) -> tuple[list[Any], Any]:
    """The logs of ``source`` and the ``log.dirs`` root it names (None: not a root)."""
    if isinstance(source, LogDir):
        return [source], None
    if isinstance(source, (str, os.PathLike)):
        try:
            return list(open_logs(source)), source
        except LayoutError:
            return [open_log(source)], None
    return list(source), None


def _registries(values: Registry | str | None, keys: Registry | str | None, root: Any,
                logs: list[Any]) -> tuple[Registry | None, Registry | None]:
    """``values`` and ``keys`` with ``"auto"`` the registry of the root's own ``_schemas`` topic
    (``root``, else the one root the logs are in), as ``kbatch convert --values auto`` finds it."""
    if "auto" not in (values, keys):
        return values, keys  # type: ignore[return-value]  # (any other text: refused by the scan)
    if root is None:
        roots = sorted({str(log.root) for log in logs})
        if len(roots) != 1:
            raise ValueError(f"values='auto' reads the _schemas topic of the logs' root; these logs are in "
                             f"{', '.join(roots) if roots else 'no root'}: pass a kbatch.values.Registry")
        root = roots[0]
    from kbatch.values import Registry  # defers pyarrow

    registry = Registry.from_log_dirs(root)
    return (registry if values == "auto" else values,  # type: ignore[return-value]
            registry if keys == "auto" else keys)


def _scanned(source: Any, topic: str | None, values: Registry | str | None, keys: Registry | str | None,
             errors: str, fields: Sequence[str] | None) -> tuple[list[Any], Registry | None, Registry | None, Any]:
    """The logs of ``source`` (of ``topic``), the registries decoding them, and the Arrow schema of their scan."""
    logs, root = _logs(source)
    if topic is not None:
        logs = [log for log in logs if log.topic == topic]
    values, keys = _registries(values, keys, root, logs)
    raw = kafka_schema(binary="binary_view")
    typed = value_scan([topic] if topic is not None else [log.topic for log in logs], raw, values, keys, errors,
                       fields)
    return logs, values, keys, raw if typed is None else typed.schema


def scan_batches(
    source: Any,
    *,
    isolation_level: str = "read_uncommitted",
    on_corruption: str = "raise",
    verify_crc: bool = True,
    stats: ScanStats | None = None,
    topic: str | None = None,
    values: Registry | Literal["auto"] | None = None,
    keys: Registry | Literal["auto"] | None = None,
    errors: Literal["raise", "null"] = "raise",
    fields: Sequence[str] | None = None,
) -> tuple[Any, Callable[[], Iterator[Any]]]:
    """Every row of :func:`scan_kafka_log`'s frame as Arrow, read in the caller's thread.

    The parameters are :func:`scan_kafka_log`'s. Returns the frame's schema as Polars gives it
    to Arrow (a ``pyarrow.Schema``) and a function whose every call reads the logs afresh, one
    ``pyarrow.RecordBatch`` at a time, each as Polars gives it to Arrow: the frame's columns and
    types, without Polars' engine (no thread of its own to outlive a reader that stops early)
    and without pushdown. What :func:`kbatch.duckdb.register` gives DuckDB before 2.0.
    """
    import polars as pl

    logs, values, keys, arrow = _scanned(source, topic, values, keys, errors, fields)
    schema = pl.from_arrow(arrow.empty_table()).to_arrow().schema

    def batches() -> Iterator[Any]:
        if not logs:
            return
        reader = scan_logs(logs, arrow.names, None, None, isolation_level=isolation_level,
                           on_corruption=on_corruption, verify_crc=verify_crc, binary="binary_view", stats=stats,
                           values=values, keys=keys, errors=errors, fields=fields)
        for batch in reader:
            yield from pl.from_arrow(batch).to_arrow().to_batches()

    return schema, batches


def scan_kafka_log(
    source: Any,
    *,
    isolation_level: str = "read_uncommitted",
    on_corruption: str = "raise",
    verify_crc: bool = True,
    stats: ScanStats | None = None,
    topic: str | None = None,
    values: Registry | Literal["auto"] | None = None,
    keys: Registry | Literal["auto"] | None = None,
    errors: Literal["raise", "null"] = "raise",
    index: bool = True,
    index_dir: str | os.PathLike[str] | None = None,
    fields: Sequence[str] | None = None,
) -> Any:
    """A ``polars.LazyFrame`` over Kafka logs, with projection, filter and limit pushed down.

    Parameters
    ----------
    source : str, PathLike, LogDir or sequence of LogDir
        A ``log.dirs`` root or backup (every partition under it, as
        :func:`~kbatch.log.open_logs`), a partition directory, or logs already open.
    isolation_level, on_corruption, verify_crc
        As :meth:`kbatch.log.LogDir.read`.
    stats : ScanStats, optional
        Accumulates what every collect of the frame read and skipped.
    topic : str, optional
        Only this topic's partitions of ``source``.
    values, keys : kbatch.values.Registry or "auto", optional
        Decode the values (keys), as :meth:`kbatch.log.LogDir.scan_records` does: the struct of
        the latest version of subject ``<topic>-value`` (``<topic>-key``), then
        ``value_schema_id``. ``"auto"``: the registry of the root's own ``_schemas`` topic
        (``source``, or the root the logs are in), as ``kbatch convert --values auto`` finds
        it. The frame must be of one topic (``topic=``): each topic has its own reader schema.
        Only the rows the pushed-down filter keeps are decoded, and only when the query uses
        a decoded column.
    errors : {"raise", "null"}
        ``"raise"``: the first record read that does not decode raises
        :class:`~kbatch.errors.ValueDecodeError` (its offset, partition, field path); ``"null"``:
        its value is null and the ``value_error`` (``key_error``) column says why.
    index, index_dir
        The time index of a timestamp filter, as :meth:`kbatch.log.LogDir.scan_records`
        (``index=False``: neither used nor kept).
    fields : sequence of str, optional
        With ``values``: only these fields of the values (top-level names or dotted paths into
        nested records); the decoder skips the others and ``value`` holds only these. A
        predicate reading only fields of ``value`` (and raw columns) is in any case judged on
        a decode of its fields first: the records it rules out are not decoded further (nor
        checked further: a fault in one of their other fields is not reported).

    Returns
    -------
    polars.LazyFrame
        Columns ``key``, ``value``, ``topic``, ``partition``, ``offset``, ``timestamp``
        (``Datetime("us", "UTC")``), ``timestampType``, ``headers`` (with typed values:
        ``key``, ``key_schema_id``, ``key_error``, ``value``, ``value_schema_id``,
        ``value_error``, then the others). Exactly the eager read's rows filtered by the query
        (decoded by :func:`kbatch.values.decode`).
    """
    import polars as pl
    from polars.io.plugins import register_io_source

    logs, values, keys, arrow = _scanned(source, topic, values, keys, errors, fields)
    schema = pl.from_arrow(arrow.empty_table()).schema  # type: ignore[union-attr]

    def source_fn(with_columns: list[str] | None, predicate: Any, n_rows: int | None,
                  batch_size: int | None) -> Iterator[Any]:
        terms, whole = predicate_terms(predicate)
        wanted: Sequence[str] = list(schema) if with_columns is None else with_columns
        needed = list(wanted)
        if predicate is not None:
            needed += [c for c in predicate.meta.root_names() if c not in needed]
        if not logs:
            return
        # a filter on value fields is judged on a decode of those alone (whole: no limit to count)
        where = value_where(predicate, keys is not None) if values is not None and not whole else None
        reader = scan_logs(logs, needed, terms, n_rows if whole else None, isolation_level=isolation_level,
                           on_corruption=on_corruption, verify_crc=verify_crc,
                           batch_rows=batch_size or 65_536, binary="binary_view", stats=stats,
                           values=values, keys=keys, errors=errors, index=index, index_dir=index_dir,
                           fields=fields, where=where)
        remaining = n_rows
        for batch in reader:
            df = pl.from_arrow(batch)
            assert isinstance(df, pl.DataFrame)
            if predicate is not None:  # always: the terms pushed down are a subset
                df = df.filter(predicate)
            df = df.select(wanted)
            if remaining is not None:
                df = df.head(remaining)
                remaining -= df.height
            if df.height:
                yield df
            if remaining == 0:
                return

    import inspect

    named = {"explain_name": "kbatch kafka-log"}  # a label in explain(), where this Polars has it
    named = {k: v for k, v in named.items() if k in inspect.signature(register_io_source).parameters}
    return register_io_source(source_fn, schema=schema, **named)  # type: ignore[arg-type]
