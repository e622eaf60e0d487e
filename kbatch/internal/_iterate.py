"""Every record of a RecordTable of an internal topic, decoded one by one (the general, slow path)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

from kbatch.codec import RecordTable

from ._records import DecodedRecord, OnUnknown, Registry, decode_key_value

__all__ = ["Entry", "iter_decoded"]


class Entry(NamedTuple):
    """One decoded record with its place in the log."""

    offset: int
    timestamp: int
    control: bool
    record: DecodedRecord


def iter_decoded(
    table: RecordTable,
    family: str,
    *,
    on_unknown: OnUnknown = "raise",
    registry: Registry | None = None,
) -> Iterator[Entry]:
    """Decode every record of ``table`` (one Python object per record).

    Records of control batches are decoded as control records.

    >>> import kbatch
    >>> key = bytes.fromhex("0002 0001 67")                     # GroupMetadataKey of group "g"
    >>> t = kbatch.decode(kbatch.encode([None], keys=[key]))    # its tombstone
    >>> [(e.offset, e.record.key_type, e.record.key, e.record.value) for e in iter_decoded(t, "group")]
    [(0, 'GroupMetadataKey', {'group': 'g'}, None)]
    """
    recs = table.records
    control = table.batches["is_control"][recs["batch"]] if len(recs) else []
    data = memoryview(table.data).cast("B") if len(recs) else memoryview(b"")
    for i in range(len(recs)):
        row = recs[i]
        ks, kl = int(row["key_start"]), int(row["key_length"])
        vs, vl = int(row["value_start"]), int(row["value_length"])
        key = None if kl < 0 else data[ks:ks + kl]
        value = None if vl < 0 else data[vs:vs + vl]
        off = int(row["offset"])
        ctl = bool(control[i])
        yield Entry(off, int(row["timestamp"]), ctl,
                    decode_key_value(family, key, value, control=ctl, offset=off, on_unknown=on_unknown,
                                     registry=registry))
