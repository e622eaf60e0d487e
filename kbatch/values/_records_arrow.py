"""``records_to_arrow``: a ``RecordTable`` as Arrow with its keys and/or values decoded in one
step (what ``RecordTable.to_arrow(values=..., keys=...)`` and ``LogDir.to_arrow(values=...)``
reach through :meth:`kbatch.values.Registry.records_to_arrow`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from ._decode import Errors, base_table, decode
from ._schema import Schema

__all__ = ["records_to_arrow"]


def records_to_arrow(
    table: Any,
    values: Any = None,
    keys: Any = None,
    *,
    reader_schema: Schema | int | str | None = None,
    key_reader_schema: Schema | int | str | None = None,
    errors: Errors = "raise",
    mapping: str = "spark",
    max_depth: int | None = None,
    threads: int = 1,
    fields: Sequence[str] | None = None,
    **to_arrow: Any,
) -> pa.Table:
    """A ``RecordTable`` as Arrow with its values and/or keys decoded: what
    ``RecordTable.to_arrow(values=registry, keys=registry)`` and ``LogDir.to_arrow(values=...)``
    call (a registry's :meth:`~kbatch.values.Registry.records_to_arrow`).

    ``values`` / ``keys``: the registry to decode each with (None: left as bytes);
    ``reader_schema`` / ``key_reader_schema``, ``errors``, ``mapping``, ``max_depth``,
    ``threads``: as :func:`decode`; ``fields``: the value fields to decode (:func:`decode`'s
    projection; the keys are decoded whole); ``to_arrow``: ``RecordTable.to_arrow``'s ``topic``,
    ``partition``, ``include_headers``, ``extra_columns``, ``binary``. The bytes of the decoded
    columns are never copied.
    """
    columns = tuple(name for name, reg in (("key", keys), ("value", values)) if reg is not None)
    out = base_table(table, columns, **to_arrow)
    for name, registry, reader in (("key", keys, key_reader_schema), ("value", values, reader_schema)):
        if registry is not None:
            out = decode(table, registry, name, reader, errors, mapping, max_depth=max_depth, threads=threads,
                         base=out, fields=fields if name == "value" else None)
    return out
