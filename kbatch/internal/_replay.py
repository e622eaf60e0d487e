"""Replaying a coordinator topic (general path): the latest record per key, as the coordinator loads it."""

from __future__ import annotations

import logging
from typing import Any, NamedTuple

from ._iterate import Entry, iter_decoded
from ._records import OnUnknown
from ._sources import partitions, tables

__all__ = ["Located", "latest", "located"]

logger = logging.getLogger("kbatch.internal")


class Located(NamedTuple):
    """A decoded record with the partition of the internal topic it was read from."""

    partition: int
    entry: Entry


def _freeze(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple((k, _freeze(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value


def located(source: Any, topic: str, family: str, on_unknown: OnUnknown) -> list[Located]:
    """Every non-control record of ``topic`` in ``source`` (read_committed), decoded, in log order."""
    out = []
    unknown = 0
    for part in partitions(source, topic):
        for table in tables(part, "read_committed"):
            for e in iter_decoded(table, family, on_unknown=on_unknown):
                if e.record.unknown:
                    unknown += 1
                elif not e.control:
                    out.append(Located(part.partition, e))
    if unknown:
        logger.warning("%s: %d records of an unknown type or version left out (on_unknown='raw')", topic, unknown)
    return out


def latest(records: list[Located]) -> list[Located]:
    """The last record per (key type, key); a key whose last record is a tombstone is gone."""
    last: dict[Any, Located] = {}
    for rec in records:
        r = rec.entry.record
        k = (r.key_type if r.record_type > 1 or r.family != "group" else "OffsetCommitKey", _freeze(r.key))
        last.pop(k, None)  # re-insert: dict order = order of the last write
        if r.value is not None:
            last[k] = rec
    return list(last.values())
