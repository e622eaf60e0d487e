"""The views ``kbatch sql`` gives DuckDB: one per topic of a root, and Kafka's own state as tables.

Topic views
    One per topic, named after it exactly, over the topic's partitions: the columns of
    :func:`kbatch.polars.scan_kafka_log` (``key``, ``value``, ``topic``, ``partition``,
    ``offset``, ``timestamp``, ``timestampType``, ``headers``), registered by
    :func:`kbatch.duckdb.register`, so a query's filters and columns reach the scan where DuckDB
    hands them over. Internal topics (``__consumer_offsets``, ...) and the registry's
    ``_schemas`` have theirs too, their records raw. A name that is not a plain SQL identifier
    (letters, digits and ``_``, not starting with a digit) or that is a reserved word of
    DuckDB's is written in double quotes: ``"orders.eu"``, ``"orders-eu"``, ``"order"``.
    DuckDB's names ignore case: of two topics differing only in case, the first in sorted order
    gets the view and the other is left out, with a note.
Typed values
    With a registry, a topic with subject ``<topic>-value`` (``<topic>-key``) has its values
    (keys) decoded, as ``scan_kafka_log(values=...)`` decodes them: ``value`` the struct laid
    out by the subject's latest version, then ``value_schema_id`` (and ``value_error`` with
    ``errors="null"``). Topics with neither subject stay binary (said in one note), as do the
    internal topics and the registry's own. Given the value fields a query reads
    (:mod:`kbatch.cli._sql_fields`), a typed view decodes only those (``fields=``), the struct
    holding only them.
Kafka's state
    :mod:`kbatch.internal`'s tables, under the names of the Spark source's views
    (:data:`INTERNAL_VIEWS`): ``consumer_offsets`` and ``consumer_groups`` (from
    ``__consumer_offsets``), ``transactions`` (``__transaction_state``), ``cluster_metadata.<table>``
    (``__cluster_metadata``'s KRaft image: ``cluster_metadata.topics``, ``.partitions``,
    ``.brokers``, ... in the DuckDB schema ``cluster_metadata``), each where the root holds its
    topic, and ``producer_snapshots`` (the ``.snapshot`` files of every partition). Each is
    computed when a query first reads it (once per run), so the others cost nothing. A topic
    named like one of them keeps the name; the table is left out, with a note.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kbatch._progress import plural
from kbatch.errors import KBatchError
from kbatch.internal import (
    IMAGE_TABLES,
    cluster_metadata,
    consumer_groups,
    consumer_offsets,
    producer_snapshots,
    transactions,
)
from kbatch.log import LogDir, ScanStats

from ._sql_fields import view_fields

__all__ = ["INTERNAL_VIEWS", "View", "register_views", "sql_name"]

#: internal view -> (the topic it reads, None: every partition's ``.snapshot`` files; its
#: :mod:`kbatch.internal` function). The names of the Spark source's ``view`` option.
INTERNAL_VIEWS: dict[str, tuple[str | None, Callable[..., Any]]] = {
    "consumer_offsets": ("__consumer_offsets", consumer_offsets),
    "consumer_groups": ("__consumer_offsets", consumer_groups),
    "transactions": ("__transaction_state", transactions),
    "producer_snapshots": (None, producer_snapshots),
    **{f"cluster_metadata.{table}": ("__cluster_metadata", cluster_metadata) for table in IMAGE_TABLES},
}

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class View:
    """One view of ``kbatch sql``: its name as a query writes it, what it reads, and how its
    values are typed (empty: binary)."""

    name: str
    reads: str
    typed: str = ""


def sql_name(name: str, reserved: frozenset[str] = frozenset()) -> str:
    """``name`` as SQL writes it: as it is when a plain identifier that is not a ``reserved``
    word, else in double quotes.

    >>> sql_name("orders"), sql_name("orders.eu"), sql_name("orders-eu"), sql_name("order", frozenset({"order"}))
    ('orders', '"orders.eu"', '"orders-eu"', '"order"')
    """
    if _PLAIN.fullmatch(name) and name.lower() not in reserved:
        return name
    return '"' + name.replace('"', '""') + '"'


class _Table:
    """A :mod:`kbatch.internal` table as an Arrow stream (the PyCapsule interface) for DuckDB:
    computed when a query first reads it (``compute`` is cached), its schema known before."""

    def __init__(self, compute: Callable[[], Any], schema: Any) -> None:
        self.compute = compute
        self.schema = schema

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        import pyarrow as pa

        def batches() -> Iterator[Any]:
            table = self.compute()
            yield from (table if table.schema == self.schema else table.cast(self.schema)).to_batches()

        return pa.RecordBatchReader.from_batches(self.schema, batches()).__arrow_c_stream__(requested_schema)


def _struct_fields(registry: Any, topic: str) -> list[str]:
    """The fields of ``topic``'s value struct, as its scan lays it out."""
    from kbatch.values import arrow_type, reader_schema, topic_subject  # defers pyarrow

    return list(arrow_type(reader_schema(registry, subject=topic_subject(topic, "value"), format="auto")).names)


def _typing(registry: Any, subjects: set[str], topic: str) -> tuple[Any, Any, str]:
    """(values, keys) registries for ``topic``'s scan (None: binary) and what they decode."""
    said: list[str] = []
    chosen: list[Any] = []
    for column in ("value", "key"):
        subject = f"{topic}-{column}"
        if subject not in subjects:
            chosen.append(None)
            continue
        chosen.append(registry)
        latest = registry.latest(subject)
        said.append(f"{column}: {subject} v{latest.version} ({latest.schema_type})")
    return chosen[0], chosen[1], ", ".join(said)


def register_views(con: Any, logs: Sequence[LogDir], *, registry: Any = None, registry_topic: str = "_schemas",
                   errors: str = "raise", isolation_level: str = "read_uncommitted",
                   stats: ScanStats | None = None, notes: list[str],
                   fields: frozenset[str] | None = None) -> list[View]:
    """Register the views of ``logs`` (one root's partitions) in DuckDB connection ``con``.

    Parameters
    ----------
    registry : kbatch.values.Registry, optional
        Types the values and keys of the topics with subjects in it.
    registry_topic : str
        The registry's own topic (its records stay binary).
    errors : {"raise", "null"}
        What a value that does not decode does (typed topics only).
    isolation_level, stats
        As :func:`kbatch.polars.scan_kafka_log`'s; ``stats`` adds up every topic view's scans.
    notes : list of str
        Receives what was left binary or out, and why.
    fields : frozenset of str, optional
        The value fields the query reads (:func:`kbatch.cli._sql_fields.value_fields`): a typed
        view decodes only those of its struct (None: all).

    Returns
    -------
    list of View
        The topics' views by name, then Kafka's state.
    """
    from kbatch.duckdb import register  # defers duckdb and polars

    reserved = frozenset(r[0] for r in con.execute(
        "SELECT keyword_name FROM duckdb_keywords() WHERE keyword_category = 'reserved'").fetchall())
    by_topic: dict[str, list[LogDir]] = {}
    for log in logs:
        by_topic.setdefault(log.topic, []).append(log)
    subjects = set(registry.subjects()) if registry is not None else set()
    taken: dict[str, str] = {}
    views: list[View] = []
    untyped: list[str] = []
    for topic, parts in sorted(by_topic.items()):
        if topic.casefold() in taken:
            notes.append(f"topics {taken[topic.casefold()]} and {topic} differ only in case, which DuckDB's names "
                         f"do not tell apart: {topic} has no view")
            continue
        taken[topic.casefold()] = topic
        values = keys = None
        typed = ""
        if registry is not None and not topic.startswith("__") and topic != registry_topic:
            try:
                values, keys, typed = _typing(registry, subjects, topic)
            except (KBatchError, LookupError) as exc:  # the subject's latest schema cannot be had
                notes.append(f"topic {topic} stays binary: {exc}")
            if not typed and (values, keys) == (None, None):
                untyped.append(topic)
        scan: dict[str, Any] = {"topic": topic, "isolation_level": isolation_level, "stats": stats}
        try:
            mode: Literal["raise", "null"] = "null" if typed and errors == "null" else "raise"
            narrow = view_fields(fields, _struct_fields(registry, topic)) if values is not None else None
            if narrow is not None:
                typed += f" (fields {', '.join(narrow)})"
            register(con, topic, parts, values=values, keys=keys, errors=mode, fields=narrow, **scan)
        except (KBatchError, LookupError) as exc:  # its schema does not lay out a column
            if not typed:
                raise
            notes.append(f"topic {topic} stays binary: {exc}")
            register(con, topic, parts, **scan)
            typed = ""
        views.append(View(sql_name(topic, reserved), f"topic {topic}, {plural(len(parts), 'partition')}", typed))
    if untyped and registry is not None:
        notes.append(f"no subject <topic>-value or <topic>-key in the registry for {', '.join(untyped)}: "
                     f"{'its' if len(untyped) == 1 else 'their'} records stay binary")
    views += _internal_views(con, logs, by_topic, taken, notes)
    return views


def _member(compute: Callable[[], Any], table: str) -> Any:
    """Table ``table`` of the mapping ``compute()`` gives (the metadata image's tables)."""
    return compute()[table]


def _internal_views(con: Any, logs: Sequence[LogDir], by_topic: dict[str, list[LogDir]], taken: dict[str, str],
                    notes: list[str]) -> list[View]:
    """Register Kafka's state (:data:`INTERNAL_VIEWS` whose topic ``logs`` hold) as lazy tables."""
    computed: dict[str, Callable[[], Any]] = {}
    empty: dict[str, Any] = {}
    views: list[View] = []
    schemas: set[str] = set()
    for name, (topic, fn) in INTERNAL_VIEWS.items():
        if not logs or (topic is not None and topic not in by_topic):
            continue
        if name.casefold() in taken:
            notes.append(f"topic {taken[name.casefold()]} has the name of the table {name} of Kafka's state: "
                         f"the view is the topic's, the table is left out")
            continue
        source = list(logs) if topic is None else by_topic[topic]
        compute = computed.setdefault(fn.__name__, functools.cache(functools.partial(fn, source)))
        schema_of = empty.setdefault(fn.__name__, fn([]))  # the table over no partition: its columns
        if "." in name:  # cluster_metadata.<table>: a view in the schema, over the stream registered as "<name>"
            group, table = name.split(".", 1)
            con.register(name, _Table(functools.partial(_member, compute, table), schema_of[table].schema))
            if group not in schemas:
                con.execute(f"CREATE SCHEMA IF NOT EXISTS {group}")
                schemas.add(group)
            con.execute(f'CREATE OR REPLACE VIEW {group}.{table} AS SELECT * FROM temp.main."{name}"')
        else:
            con.register(name, _Table(compute, schema_of.schema))
        what = "every partition's .snapshot files" if topic is None else topic
        views.append(View(name, f"{what}: kbatch.internal.{fn.__name__}"))
    return views
