"""``--upsert``: a run's records reduced to what log compaction would keep of them, per key.

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
"""

from __future__ import annotations

from typing import Any

__all__ = ["latest_per_key"]


def latest_per_key(table: Any) -> tuple[Any, list[Any]]:
    """``(rows to insert or replace, keys to delete)`` of ``table`` (a ``pyarrow.Table`` with
    ``key`` and ``value``), the last row of each key winning."""
    import pyarrow as pa
    import pyarrow.compute as pc

    table = table.filter(pc.is_valid(table.column("key")))
    order = pa.array(range(table.num_rows), pa.int64())
    last = (table.select(["key"]).append_column("kbatch_row", order)
            .group_by("key", use_threads=False).aggregate([("kbatch_row", "max")]))
    rows = pc.sort_indices(last.column("kbatch_row_max"))
    kept = table.take(pc.take(last.column("kbatch_row_max"), rows))
    tombstone = pc.is_null(kept.column("value"))
    return kept.filter(pc.invert(tombstone)), kept.filter(tombstone).column("key").to_pylist()
