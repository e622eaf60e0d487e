"""``--upsert`` and ``--cdc``: a run's records reduced to what the table keeps of them, per key.

:func:`latest_per_key` keeps, for each key, the record that came last (the latest offset: a
partition's records arrive in offset order, and a key lives in one partition); records with a
null key are dropped (compaction refuses them). The sinks then insert or replace the rows whose
value is set and delete the keys whose latest record is a tombstone (a null value).

>>> import pyarrow as pa
>>> t = pa.table({"key": [b"a", b"b", b"a", None, b"b"], "value": [b"1", b"1", b"2", b"x", None],
...               "offset": [0, 1, 2, 3, 4]})
>>> live, dead = latest_per_key(t)
>>> live.to_pydict(), dead
({'key': [b'a'], 'value': [b'2'], 'offset': [2]}, [b'b'])

A change stream (``--cdc``, :class:`Keyed` with an ``op`` column) says what each row does: ``u``
inserts or replaces the row of its key (the key: one or more columns), ``d`` deletes it, ``t``
(a truncate, no key) removes every row before it: the table's rows, and the run's rows that
precede it (in its partition by offset; in another partition, Debezium ordering nothing across
partitions, by a record timestamp not later than the truncate's). :func:`reduce_changes` gives
the rows to insert or replace, the keys to delete and whether the table is emptied first; the
columns named in :attr:`Keyed.hidden` (the op and the order) are not written.

>>> k = Keyed(keys=("id",), op="op", order=("p", "o", "ts"))
>>> t = pa.table({"id": [1, 2, 1, None, 3, 2], "name": ["a", "b", "a2", None, "c", None],
...               "op": ["u", "u", "u", "t", "u", "d"], "p": [0] * 6, "o": list(range(6)),
...               "ts": list(range(6))})
>>> c = reduce_changes(t, k)
>>> c.live.to_pydict(), c.dead.to_pydict(), c.truncate
({'id': [3], 'name': ['c']}, {'id': [2]}, True)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = ["DELETE", "TRUNCATE", "UPSERT", "Changes", "Keyed", "join_keys", "keyed_of", "latest_per_key",
           "reduce_changes"]

#: What a change row does (the :attr:`Keyed.op` column's values).
UPSERT, DELETE, TRUNCATE = "u", "d", "t"


@dataclass(frozen=True)
class Keyed:
    """How a sink applies a run's rows by key (``upsert=`` of the Iceberg and Delta sinks).

    The default is ``--upsert``'s: the key is the ``key`` column (the record's raw bytes), a null
    ``value`` is a tombstone. With ``op``, the rows are changes (``--cdc``): ``keys`` the
    primary key's columns, ``op`` the column saying ``u``, ``d`` or ``t``, ``order`` the
    (partition, offset, timestamp) columns that place a truncate; those are not written.
    """

    keys: tuple[str, ...] = ("key",)
    op: str | None = None
    order: tuple[str, str, str] | None = None
    #: the column naming each row's topic (its table), when the table does not hold it
    route: str | None = None

    @property
    def hidden(self) -> tuple[str, ...]:
        """The columns a run's rows carry that the table does not hold."""
        return tuple(c for c in (self.route, self.op, *(self.order or ())) if c)


def keyed_of(upsert: Any, topic: str) -> Keyed:
    """How ``topic``'s rows are applied, by a sink's ``upsert=``: True (``--upsert``), a
    :class:`Keyed`, or a mapping of topic to :class:`Keyed` (``--cdc``: each table its key)."""
    if isinstance(upsert, Keyed):
        return upsert
    if isinstance(upsert, Mapping):
        try:
            keyed: Keyed = upsert[topic]
        except KeyError:
            raise ValueError(f"no key was given for topic {topic!r}") from None
        return keyed
    return Keyed()


class Changes(NamedTuple):
    """A run's changes to one table: rows to insert or replace (the table's columns), keys to
    delete (a table of the key columns), and whether the table is emptied before them."""

    live: Any
    dead: Any
    truncate: bool


def _last_rows(table: Any, keys: list[str]) -> Any:
    """The rows of ``table`` that are the last of their key, in table order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    order = pa.array(range(table.num_rows), pa.int64())
    last = (table.select(keys).append_column("kbatch_row", order)
            .group_by(keys, use_threads=False).aggregate([("kbatch_row", "max")]))
    return table.take(pc.take(last.column("kbatch_row_max"), pc.sort_indices(last.column("kbatch_row_max"))))


def latest_per_key(table: Any) -> tuple[Any, list[Any]]:
    """``(rows to insert or replace, keys to delete)`` of ``table`` (a ``pyarrow.Table`` with
    ``key`` and ``value``), the last row of each key winning."""
    import pyarrow.compute as pc

    table = table.filter(pc.is_valid(table.column("key")))
    kept = _last_rows(table, ["key"])
    tombstone = pc.is_null(kept.column("value"))
    return kept.filter(pc.invert(tombstone)), kept.filter(tombstone).column("key").to_pylist()


def reduce_changes(table: Any, keyed: Keyed) -> Changes:
    """A run's rows (``table``, a ``pyarrow.Table`` in arrival order) as :class:`Changes` by ``keyed``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = list(keyed.keys)
    if keyed.op is None:
        live, dead = latest_per_key(table)
        return Changes(live, pa.table({"key": pa.array(dead, table.schema.field("key").type)}), False)
    op = table.column(keyed.op)
    cuts = table.filter(pc.equal(op, TRUNCATE))
    rows = table.filter(pc.not_equal(op, TRUNCATE))
    if cuts.num_rows:
        assert keyed.order is not None, "a truncate is placed by the order columns"
        part, offset, stamp = keyed.order
        gone = pa.array([False] * rows.num_rows, pa.bool_())
        for cut in cuts.select(list(keyed.order)).to_pylist():
            same = pc.equal(rows.column(part), cut[part])
            before = pc.if_else(same, pc.less(rows.column(offset), cut[offset]),
                                pc.less_equal(rows.column(stamp), cut[stamp]))
            gone = pc.or_(gone, pc.fill_null(before, False))
        rows = rows.filter(pc.invert(gone))
    kept = _last_rows(rows, keys)
    deleted = pc.equal(kept.column(keyed.op), DELETE)
    live = kept.filter(pc.invert(deleted)).drop_columns(list(keyed.hidden))
    return Changes(live, kept.filter(deleted).select(keys), bool(cuts.num_rows))


def join_keys(rows: Any, keys: Any, names: list[str]) -> Any:
    """A boolean mask of ``rows`` (a ``pyarrow.Table``): whether each row's ``names`` columns
    equal those of a row of ``keys`` (a table of those columns). Any column types around them:
    only the key columns and a row number go through the join."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not rows.num_rows or not keys.num_rows:
        return pa.array([False] * rows.num_rows, pa.bool_())
    if len(names) == 1:
        column = rows.column(names[0])
        return pc.fill_null(pc.is_in(column, value_set=keys.column(names[0]).cast(column.type)), False)
    left = pa.table({**{n: rows.column(n) for n in names}, "kbatch_row": pa.array(range(rows.num_rows), pa.int64())})
    right = pa.table({n: keys.column(n).cast(rows.schema.field(n).type) for n in names})
    hit = left.join(right, names, join_type="left semi", use_threads=False).column("kbatch_row")
    return pc.is_in(pa.array(range(rows.num_rows), pa.int64()), value_set=hit)
