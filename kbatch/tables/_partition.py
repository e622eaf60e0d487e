"""``--partition-by``: how a table's files are partitioned, in Iceberg's transform syntax.

Each item is a column (identity, e.g. ``partition``) or a transform of one: ``year(timestamp)``,
``month(timestamp)``, ``day(timestamp)``, ``hour(timestamp)``, ``bucket(16, key)``,
``truncate(4, key)``. Iceberg takes them as partition transforms (hidden partitioning: no
column added); Delta, which partitions by columns only, takes columns and derives one column
per time transform (``timestamp_day``, a date; ``timestamp_hour``, an hour since the epoch).
``none`` partitions nothing. The default, :data:`DEFAULT`, suits time queries: one
partition per day of the record timestamps.

>>> [(t.name, t.column, t.width) for t in parse(["day(timestamp)", "bucket(16, key)", "partition"])]
[('day', 'timestamp', None), ('bucket', 'key', 16), ('identity', 'partition', None)]
>>> parse(["none"])
[]
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

__all__ = ["DEFAULT", "TRANSFORMS", "Transform", "parse"]

#: The default partitioning: by day of the record timestamp.
DEFAULT: Final = ("day(timestamp)",)
TRANSFORMS: Final = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
_ITEM = re.compile(r"^\s*(?:(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?(\w+)\s*\)|(\w+))\s*$")


@dataclass(frozen=True)
class Transform:
    """One partition field: ``name`` (see :data:`TRANSFORMS`) of ``column``, ``width`` for bucket/truncate."""

    name: str
    column: str
    width: int | None = None

    @property
    def field_name(self) -> str:
        """The partition field's (Iceberg) or derived column's (Delta) name."""
        return self.column if self.name == "identity" else f"{self.column}_{self.name}"


def parse(items: Sequence[str], columns: Sequence[str] | None = None) -> list[Transform]:
    """Parse ``--partition-by`` items; ``ValueError`` with the item and what is accepted."""
    out: list[Transform] = []
    for item in items:
        if item.strip() == "none":
            continue
        m = _ITEM.match(item)
        if not m:
            raise ValueError(f"--partition-by {item!r}: expected a column or a transform such as day(timestamp), "
                             "hour(timestamp), bucket(16, key), truncate(4, key)")
        name, width, column, bare = m.groups()
        t = Transform("identity", bare) if bare else Transform(name, column, int(width) if width else None)
        if t.name not in TRANSFORMS:
            raise ValueError(f"--partition-by {item!r}: unknown transform {t.name}; one of {', '.join(TRANSFORMS[1:])}")
        if (t.name in ("bucket", "truncate")) != (t.width is not None):
            raise ValueError(f"--partition-by {item!r}: {t.name} takes " +
                             ("a width: bucket(16, key)" if t.width is None else "one column: day(timestamp)"))
        if columns is not None and t.column not in columns:
            raise ValueError(f"--partition-by {item!r}: no column {t.column!r}; columns: {', '.join(columns)}")
        out.append(t)
    return out
