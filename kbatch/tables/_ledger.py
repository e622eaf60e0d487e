"""The offsets ledger: per source partition, the offsets ``[start, end)`` a table holds.

Every table format stores the same :class:`Ledger` with each commit (Iceberg in the snapshot
summary, Delta in the commit info, a Parquet folder in a ledger file), as JSON::

    {"ledger": 1, "ranges": [{"topic": "orders", "partition": 0, "start": 0, "end": 300}, ...]}

with ``root`` and ``clusterId`` on each range when the run read several roots (``--recursive``,
``--replicas all``), where one partition may come from several logs, and ``missing`` on a range
with offsets the table does not hold: ``[[start, end], ...]`` inside it, left unread as damaged
(``--no-fail-on-data-loss``). A range's ``end`` is the next offset to convert: a run with
``--mode append`` starts each partition there, after reading its missing offsets again
(:func:`resume`), so a record is committed once, run after run.

>>> led = Ledger([OffsetRange("orders", 0, 0, 300)])
>>> led = led.advanced([OffsetRange("orders", 0, 300, 310), OffsetRange("users", 0, 0, 5)])
>>> [(r.topic, r.partition, r.start, r.end) for r in led]
[('orders', 0, 0, 310), ('users', 0, 0, 5)]
>>> Ledger.from_json(led.to_json()) == led
True
>>> hole = OffsetRange("t", 0, 0, 100, missing=((40, 50),))
>>> Ledger([hole]).advanced([OffsetRange("t", 0, 40, 120)]).get("t", 0).missing  # read again: filled
()
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["LEDGER_KEY", "Gap", "Ledger", "OffsetRange", "minus", "resume"]

#: The key of the ledger's JSON in a commit's properties (Iceberg snapshot summary, Delta commit info).
LEDGER_KEY = "kbatch.ledger"

#: The version of the JSON layout written.
_VERSION = 1

Key = tuple[str, int, "str | None"]
Span = tuple[int, int]


def minus(lo: int, hi: int, holes: Iterable[Span]) -> list[Span]:
    """The offsets ``[lo, hi)`` without ``holes``, as sorted disjoint non-empty ranges.

    >>> minus(0, 100, [(40, 50), (90, 120)])
    [(0, 40), (50, 90)]
    """
    out = []
    for a, b in sorted(holes):
        if a > lo:
            out.append((lo, min(a, hi)))
        lo = max(lo, b)
        if lo >= hi:
            break
    if lo < hi:
        out.append((lo, hi))
    return [(a, b) for a, b in out if b > a]


@dataclass(frozen=True)
class OffsetRange:
    """The offsets ``[start, end)`` of one source partition (of one root, when ``root`` is set),
    but for ``missing``: ranges ``[a, b)`` inside it that were not read (damaged bytes skipped)."""

    topic: str
    partition: int
    start: int
    end: int
    root: str | None = None
    cluster_id: str | None = None
    missing: tuple[Span, ...] = ()

    @property
    def key(self) -> Key:
        return (self.topic, self.partition, self.root)

    @property
    def span(self) -> int:
        return max(self.end - self.start, 0)

    def label(self) -> str:
        """``topic-partition`` (with the root when there is one)."""
        return f"{self.topic}-{self.partition}" + (f" in {self.root}" if self.root else "")

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"topic": self.topic, "partition": self.partition, "start": self.start, "end": self.end}
        if self.root is not None:
            d["root"] = self.root
            d["clusterId"] = self.cluster_id
        if self.missing:
            d["missing"] = [list(m) for m in self.missing]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OffsetRange:
        missing = tuple((int(a), int(b)) for a, b in d.get("missing", ()))
        return cls(str(d["topic"]), int(d["partition"]), int(d["start"]), int(d["end"]),
                   d.get("root"), d.get("clusterId"), missing)

    def held(self) -> list[Span]:
        """The offset ranges the table holds: ``[start, end)`` without :attr:`missing`."""
        return minus(self.start, self.end, self.missing)

    def passed(self, offset: int) -> bool:
        """Whether runs converted ``offset`` already: below :attr:`end` and not :attr:`missing`."""
        return offset < self.end and not any(a <= offset < b for a, b in self.missing)

    def read(self, start: int, end: int, unread: Sequence[Span] = ()) -> OffsetRange:
        """This range (of a partition) when a run read ``[start, end)`` but for ``unread``:
        ``end`` clipped to the first offset unread at the end, the rest of ``unread`` missing."""
        holes = sorted((max(a, start), min(b, end)) for a, b in unread if min(b, end) > max(a, start))
        while holes and holes[-1][1] >= end:
            end = holes.pop()[0]
        return replace(self, start=start, end=max(start, end), missing=tuple(h for h in holes if h[0] < end))


class Ledger:
    """The offset ranges a table holds, one per source partition (immutable).

    Parameters
    ----------
    ranges : iterable of OffsetRange
        At most one per :attr:`OffsetRange.key`.
    """

    def __init__(self, ranges: Iterable[OffsetRange] = ()) -> None:
        self._ranges: dict[Key, OffsetRange] = {}
        for r in ranges:
            if r.key in self._ranges:
                raise ValueError(f"ledger: {r.label()} given twice")
            self._ranges[r.key] = r

    def __iter__(self) -> Iterator[OffsetRange]:
        return iter(sorted(self._ranges.values(), key=lambda r: (r.topic, r.partition, r.root or "")))

    def __len__(self) -> int:
        return len(self._ranges)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ledger) and self._ranges == other._ranges

    def __repr__(self) -> str:
        return f"Ledger({list(self)!r})"

    def get(self, topic: str, partition: int, root: str | None = None) -> OffsetRange | None:
        """The range held for a partition (of ``root``), or None."""
        return self._ranges.get((topic, partition, root))

    def topics(self) -> list[str]:
        return sorted({r.topic for r in self._ranges.values()})

    def for_topic(self, topic: str) -> Ledger:
        """The ranges of one topic (what one table per topic stores)."""
        return Ledger(r for r in self._ranges.values() if r.topic == topic)

    def merged(self, other: Ledger) -> Ledger:
        """This ledger with ``other``'s ranges in place of its own for the same partitions."""
        return Ledger({**self._ranges, **other._ranges}.values())

    @classmethod
    def union(cls, ledgers: Iterable[Ledger]) -> Ledger:
        """The ranges of several ledgers (one per table), later ones winning for a partition."""
        out = cls()
        for ledger in ledgers:
            out = out.merged(ledger)
        return out

    def advanced(self, converted: Iterable[OffsetRange]) -> Ledger:
        """This ledger after a commit of ``converted``: each partition's ``end`` moves to the
        converted range's ``end``, its ``start`` stays where the table's first range began; the
        offsets it held missing that the run read are held now, those the run missed missing."""
        out = dict(self._ranges)
        for r in converted:
            old = out.get(r.key)
            if old is None:
                out[r.key] = r
                continue
            missing = [m for m in old.missing if not (r.start <= m[0] and m[1] <= r.end)]
            out[r.key] = OffsetRange(r.topic, r.partition, old.start, max(old.end, r.end), r.root, r.cluster_id,
                                     tuple(sorted({*missing, *r.missing})))
        return Ledger(out.values())

    def to_json(self) -> str:
        return json.dumps({"ledger": _VERSION, "ranges": [r.as_dict() for r in self]}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Ledger:
        """Parse :meth:`to_json`'s text; raise ``ValueError`` naming what is wrong."""
        try:
            d = json.loads(text)
            if d.get("ledger") != _VERSION:
                raise ValueError(f"version {d.get('ledger')!r}, expected {_VERSION}")
            return cls(OffsetRange.from_dict(r) for r in d["ranges"])
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a kbatch offsets ledger: {exc}") from None


@dataclass(frozen=True)
class Gap:
    """Offsets ``[start, end)`` of a partition gone from the log before any run converted them."""

    topic: str
    partition: int
    start: int
    end: int
    root: str | None = None

    def line(self) -> str:
        where = f" in {self.root}" if self.root else ""
        return (f"{self.topic}-{self.partition}{where}: offsets {self.start}..{self.end - 1} were deleted "
                f"(the log starts at {self.end}) before they were converted")


def resume(
    ledger: Ledger,
    planned: Mapping[Key, tuple[int, int]],
    log_starts: Mapping[Key, int],
) -> tuple[dict[Key, tuple[int, int]], list[Gap]]:
    """The ranges an append converts: each partition from where ``ledger`` ends.

    Parameters
    ----------
    ledger : Ledger
        What the table holds.
    planned : mapping
        ``(topic, partition, root) -> (start, end)``: the offsets the run would read without
        a ledger (its ``end`` is kept).
    log_starts : mapping
        The same keys -> the log start offset of that partition now.

    Returns
    -------
    ranges, gaps
        The ranges to convert (``start == end``: nothing new), from the first offset the ledger
        holds missing if any (a reader leaves out what it holds: :func:`minus` of
        :meth:`OffsetRange.held`), and the partitions whose log start moved past the ledger's
        ``end`` (they resume at the log start).

    >>> led = Ledger([OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 10)])
    >>> resume(led, {("t", 0, None): (0, 12), ("t", 1, None): (15, 20)}, {("t", 0, None): 0, ("t", 1, None): 15})
    ({('t', 0, None): (10, 12), ('t', 1, None): (15, 20)}, [Gap(topic='t', partition=1, start=10, end=15, root=None)])
    """
    out: dict[Key, tuple[int, int]] = {}
    gaps: list[Gap] = []
    for key, (start, end) in planned.items():
        held = ledger.get(*key)
        if held is not None:
            start = held.end
            first = log_starts.get(key, start)
            if first > start:
                gaps.append(Gap(key[0], key[1], start, first, key[2]))
                start = first
            holes = [max(a, first) for a, b in held.missing if b > first]
            if holes:  # read again from the first offset missing (what is held is not read: minus)
                start = min(holes[0], start)
        out[key] = (start, max(start, end))
    return out, gaps
