"""The value fields a ``kbatch sql`` query reads, so that the topic views decode only those.

DuckDB parses the query (``json_serialize_sql``, its own parser: no SQL is parsed here) and
:func:`value_fields` walks the tree for column references. A reference that continues past
``value`` (``value.customer``, ``orders.value.total``, ``value.address.city``) reads the field
after it (a top-level field, kept whole); one that stops at ``value`` (``value``,
``value['customer']``, ``struct_extract(value, ...)``, ``to_json(value)``), a ``*`` of any kind,
a statement DuckDB cannot serialize (anything but ``SELECT``), or no parse at all reads the
value whole (None: every field decoded). The fields found are a superset of what the query
reads of any one view (a join of two typed topics gives each the fields of both, less those its
schema lacks), which is all a projection needs. DuckDB's names ignore case, so do these.

>>> import duckdb
>>> con = duckdb.connect()
>>> sorted(value_fields(con, "SELECT value.customer, count(*) FROM orders WHERE o.value.total > 5 GROUP BY 1"))
['customer', 'total']
>>> value_fields(con, "SELECT value FROM orders") is None, value_fields(con, "SELECT * FROM orders") is None
(True, True)
>>> value_fields(con, 'SELECT "offset" FROM orders')
frozenset()
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

__all__ = ["value_fields", "view_fields"]


def value_fields(con: Any, query: str) -> frozenset[str] | None:
    """The top-level fields of ``value`` that ``query`` reads (as written), or None when it may
    read the value whole (or DuckDB cannot say)."""
    import duckdb

    try:
        row = con.execute("SELECT json_serialize_sql(?::VARCHAR)", [query]).fetchone()
    except duckdb.Error:
        return None
    tree = json.loads(row[0]) if row and row[0] else {"error": True}
    if tree.get("error"):
        return None
    fields: set[str] = set()
    stack: list[Any] = [tree.get("statements", [])]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        kind = node.get("class")
        if kind == "STAR":
            return None
        if kind == "COLUMN_REF":
            names = [str(n) for n in node.get("column_names", [])]
            lowered = [n.lower() for n in names]
            if "value" in lowered:
                at = lowered.index("value")
                if at == len(names) - 1:
                    return None
                fields.add(names[at + 1])
            continue
        stack.extend(node.values())
    return frozenset(fields)


def view_fields(read: Collection[str] | None, struct_fields: Collection[str]) -> list[str] | None:
    """The fields of a view's value struct (``struct_fields``, in its order) to decode for a query
    that reads ``read`` (:func:`value_fields`); None: all of them (the query reads the value
    whole, or none of its fields, or all).

    >>> view_fields({"Total", "city"}, ["customer", "total", "status"])
    ['total']
    >>> view_fields(None, ["a", "b"]) is None, view_fields(set(), ["a", "b"]) is None
    (True, True)
    """
    if read is None:
        return None
    wanted = {f.lower() for f in read}
    kept = [f for f in struct_fields if f.lower() in wanted]
    return kept if kept and len(kept) < len(struct_fields) else None
