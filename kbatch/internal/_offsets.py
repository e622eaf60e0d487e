"""Committed offsets from ``__consumer_offsets``, as the group coordinator loads them.

The coordinator replays its partition in offset order: an offset commit record
(types 0 and 1) sets the offset of (group, topic, partition), a tombstone
removes it; offsets it expires or deletes with their group are tombstones in
the log too. Transactional commits count once committed: the partitions are
read ``read_committed`` (aborted and still-open transactions left out). A
``RecordTable`` given directly is used as it is.

The hot path is one C pass per chunk of log (:mod:`._offsetkernel`): every
offset commit parsed in place, its key body hashed; the last record per hash
wins (a C hash table whose probes compare the key bodies byte for byte; across
chunks, the survivors are grouped by hash and checked exactly), and only the
survivors' strings are copied out. Records the C loop
leaves (other record types, tagged fields, malformed bytes) go through
:func:`decode_key_value`, which decodes them or raises naming the offset.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import numpy.typing as npt

from kbatch.codec import RecordTable

from . import _offsetkernel
from ._errors import InternalRecordError
from ._records import OnUnknown, decode_key_value
from ._sources import partitions, tables

__all__ = ["OFFSET_COLUMNS", "consumer_offsets"]

TOPIC = "__consumer_offsets"
logger = logging.getLogger("kbatch.internal")

#: column names of :func:`consumer_offsets` (``history=True`` adds ``timestamp``, ``tombstone``, ``value_version``)
OFFSET_COLUMNS = ["group", "topic", "partition", "offset", "leader_epoch", "metadata", "commit_timestamp",
                  "expire_timestamp", "coordinator_partition", "record_offset"]


class _Chunk:
    """The offset commits of one RecordTable, parsed (numeric columns) with string positions."""

    def __init__(self, table: RecordTable, coordinator_partition: int, on_unknown: OnUnknown) -> None:
        recs = table.records
        n = len(recs)
        self.data = np.frombuffer(table.data, dtype=np.uint8) if n else np.zeros(0, np.uint8)
        ks = np.ascontiguousarray(recs["key_start"])
        kl = np.ascontiguousarray(recs["key_length"])
        self.status = np.empty(n, np.int8)
        self.khash = np.empty(n, np.uint64)
        self.gs = np.empty(n, np.int64)
        self.gl = np.empty(n, np.int32)
        self.ts = np.empty(n, np.int64)
        self.tl = np.empty(n, np.int32)
        self.partition = np.empty(n, np.int32)
        self.version = np.empty(n, np.int16)
        self.offset = np.empty(n, np.int64)
        self.leader_epoch = np.empty(n, np.int32)
        self.ms = np.empty(n, np.int64)
        self.ml = np.empty(n, np.int32)
        self.commit = np.empty(n, np.int64)
        self.expire = np.empty(n, np.int64)
        _offsetkernel.scan(self.data, ks, kl, recs["value_start"], recs["value_length"], self.status, self.khash,
                           self.gs, self.gl, self.ts, self.tl, self.partition, self.version, self.offset,
                           self.leader_epoch, self.ms, self.ml, self.commit, self.expire)
        self.ks, self.kl = ks, kl
        self.vs = recs["value_start"]
        self.record_offset = np.ascontiguousarray(recs["offset"])
        self.timestamp = np.ascontiguousarray(recs["timestamp"])
        self.coordinator_partition = coordinator_partition
        # metadata strings decoded by the general path (row -> str)
        self.slow_meta: dict[int, str] = {}
        self.unknown = 0
        view = memoryview(table.data).cast("B") if n else memoryview(b"")
        for i in np.flatnonzero(self.status >= 2).tolist():
            st = int(self.status[i])
            r = recs[i]
            key = None if r["key_length"] < 0 else view[r["key_start"]:r["key_start"] + r["key_length"]]
            value = None if r["value_length"] < 0 else view[r["value_start"]:r["value_start"] + r["value_length"]]
            dec = decode_key_value("group", key, value, offset=int(r["offset"]), on_unknown=on_unknown)
            self.unknown += dec.unknown
            if st == 3 and not dec.unknown:  # an offset commit the C loop left to the general decoder
                assert dec.value is not None
                v = dec.value
                self.version[i] = dec.value_version or 0
                self.offset[i] = v["offset"]
                self.leader_epoch[i] = v.get("leader_epoch", -1)
                self.commit[i] = v["commit_timestamp"]
                self.expire[i] = v.get("expire_timestamp", -1)
                self.slow_meta[i] = v["metadata"]
                self.status[i] = 0
            elif st == 3:  # unknown value version, kept raw: not an offset the table can hold
                self.status[i] = 2

    def strings(self, rows: npt.NDArray[np.int64]) -> tuple[Any, Any, Any]:
        """group, topic and metadata of ``rows`` as Arrow string arrays."""
        import pyarrow as pa

        out = []
        for starts, lengths in ((self.gs, self.gl), (self.ts, self.tl), (self.ms, self.ml)):
            s = starts[rows]
            ln = lengths[rows]
            offsets = np.zeros(len(rows) + 1, np.int32)
            np.cumsum(ln, out=offsets[1:])
            total = int(offsets[-1])
            if total:
                idx = np.repeat(s - offsets[:-1], ln) + np.arange(total, dtype=np.int64)
                data = self.data[idx]
            else:
                data = np.zeros(0, np.uint8)
            arr = pa.StringArray.from_buffers(len(rows), pa.py_buffer(offsets), pa.py_buffer(data))
            out.append(arr)
        # UTF-8 checked before any string reaches Python: a bad one raises InternalRecordError
        # naming its record, it is not replaced (and to_pylist below would raise UnicodeDecodeError)
        for a, name, (starts, lengths) in zip(out, ("group", "topic", "metadata"),
                                              ((self.gs, self.gl), (self.ts, self.tl), (self.ms, self.ml)),
                                              strict=True):
            try:
                a.validate(full=True)
            except pa.ArrowInvalid:
                self._bad_utf8(rows, name, starts, lengths)
        if self.slow_meta:  # the general decoder's strings (checked there) replace the C loop's
            pos = {int(r): j for j, r in enumerate(rows)}
            fix = [(pos[i], m) for i, m in self.slow_meta.items() if i in pos]
            if fix:
                meta = out[2].to_pylist()
                for j, m in fix:
                    meta[j] = m
                out[2] = pa.array(meta, pa.string())
        return out[0], out[1], out[2]

    def _bad_utf8(self, rows: npt.NDArray[np.int64], name: str, starts: npt.NDArray[np.int64],
                  lengths: npt.NDArray[np.int32]) -> None:
        for i in rows.tolist():
            s, n = int(starts[i]), int(lengths[i])
            try:
                bytes(self.data[s:s + n]).decode("utf-8")
            except UnicodeDecodeError as exc:
                part = "value" if name == "metadata" else "key"
                base = int(self.vs[i]) if part == "value" else int(self.ks[i])
                raise InternalRecordError(f"the {name} is not valid UTF-8 ({exc.reason})",
                                          int(self.record_offset[i]), part, s - base, name) from None
        raise AssertionError("Arrow found invalid UTF-8 that Python did not")

    def table(self, rows: npt.NDArray[np.int64], history: bool) -> Any:
        import pyarrow as pa

        group, topic, meta = self.strings(rows)
        tomb = self.status[rows] == 1
        expire = self.expire[rows]
        cols = {
            "group": group,
            "topic": topic,
            "partition": pa.array(self.partition[rows]),
            "offset": pa.array(self.offset[rows], mask=tomb),
            "leader_epoch": pa.array(self.leader_epoch[rows], mask=tomb),
            "metadata": pa.array(meta, mask=pa.array(tomb)) if history else meta,
            "commit_timestamp": pa.array(self.commit[rows], pa.timestamp("ms", tz="UTC"), mask=tomb),
            "expire_timestamp": pa.array(expire, pa.timestamp("ms", tz="UTC"), mask=tomb | (expire < 0)),
            "coordinator_partition": pa.array(np.full(len(rows), self.coordinator_partition, np.int32)),
            "record_offset": pa.array(self.record_offset[rows]),
        }
        if history:
            cols["timestamp"] = pa.array(self.timestamp[rows], pa.timestamp("ms", tz="UTC"))
            cols["tombstone"] = pa.array(tomb)
            cols["value_version"] = pa.array(self.version[rows], mask=tomb)
        cols["_hash"] = pa.array(self.khash[rows])
        return pa.table(cols)


def _last_per_hash(khash: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """For each row, the index of the last row with the same hash; and those last rows, in order."""
    n = len(khash)
    rev = khash[::-1]
    _, first_in_rev, inverse = np.unique(rev, return_index=True, return_inverse=True)
    last = (n - 1 - first_in_rev).astype(np.int64)
    rep = last[inverse][::-1].copy()
    return rep, np.sort(last)


def consumer_offsets(source: Any, *, history: bool = False, on_unknown: OnUnknown = "raise") -> Any:
    """The committed offsets of every consumer group, as the group coordinator holds them.

    Parameters
    ----------
    source : path, LogDir or RecordTable
        A ``log.dirs`` root (every ``__consumer_offsets-<n>`` in it), one
        partition directory, or a RecordTable of one partition. A root with
        other topics but no ``__consumer_offsets`` partition (the broker holds
        no replica of it), or a folder that is not a ``log.dirs`` root, raises
        :class:`kbatch.LayoutError` saying what it holds.
    history : bool, default False
        Every offset commit record (tombstones included, ``timestamp``,
        ``tombstone`` and ``value_version`` added) instead of the latest state.
    on_unknown : {"raise", "raw"}
        An unknown record type or version raises :class:`InternalRecordError`
        naming the offset, or is left out of the table (``"raw"``).

    Returns
    -------
    pyarrow.Table
        One row per (group, topic, partition) with a committed offset:
        ``group``, ``topic`` (strings), ``partition`` (int32), ``offset``
        (int64), ``leader_epoch`` (int32, -1 unknown), ``metadata`` (string),
        ``commit_timestamp``, ``expire_timestamp`` (timestamp[ms]; the
        latter null unless a version-1 record set it),
        ``coordinator_partition`` and ``record_offset`` (where the record
        is). Sorted by group, topic, partition.

    Examples
    --------
    >>> import kbatch, tempfile
    >>> def key(partition):
    ...     return bytes.fromhex("0001 0001 67 0001 74") + partition.to_bytes(4, "big")
    >>> def value(off):
    ...     return bytes.fromhex("0003") + off.to_bytes(8, "big") + bytes.fromhex("ffffffff 0000 0000000000000001")
    >>> root = tempfile.mkdtemp()
    >>> with kbatch.LogWriter(root, "__consumer_offsets", 0) as w:
    ...     _ = w.append(kbatch.encode([value(5), value(9), value(7), None], keys=[key(0), key(0), key(1), key(1)]))
    >>> consumer_offsets(root).select(["group", "topic", "partition", "offset"]).to_pylist()
    [{'group': 'g', 'topic': 't', 'partition': 0, 'offset': 9}]
    >>> consumer_offsets(root, history=True).select(["partition", "offset", "tombstone"]).to_pylist()[2:]
    [{'partition': 1, 'offset': 7, 'tombstone': False}, {'partition': 1, 'offset': None, 'tombstone': True}]
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = []
    unknown = 0
    for part in partitions(source, TOPIC):
        for table in tables(part, "read_committed"):
            if not len(table):
                continue
            chunk = _Chunk(table, part.partition, on_unknown)
            unknown += chunk.unknown
            live = np.flatnonzero(chunk.status <= 1).astype(np.int64)
            if not len(live):
                continue
            if history:
                parts.append(chunk.table(live, True))
                continue
            survivor = np.empty(len(live), np.uint8)
            _offsetkernel.last_per_key(chunk.data, chunk.ks[live], chunk.kl[live], chunk.khash[live], survivor)
            parts.append(chunk.table(live[np.flatnonzero(survivor)], False))
    if unknown:
        logger.warning("%s: %d records of an unknown type or version left out (on_unknown='raw')", TOPIC, unknown)
    if not parts:
        return _empty(history)
    out = pa.concat_tables(parts)
    if history:
        return out.drop_columns(["_hash"])
    # the last record per key over all chunks: by hash, then checked exactly
    khash = out["_hash"].to_numpy()
    rep, last = _last_per_hash(khash)
    idx = pa.array(rep)
    same = (pc.all(pc.equal(pc.take(out["group"], idx), out["group"])).as_py()
            and pc.all(pc.equal(pc.take(out["topic"], idx), out["topic"])).as_py()
            and pc.all(pc.equal(pc.take(out["partition"], idx), out["partition"])).as_py())
    if same:
        out = out.take(pa.array(last))
    else:  # a hash collision: group by the real key
        out = out.append_column("_row", pa.array(np.arange(out.num_rows)))
        rows = out.group_by(["group", "topic", "partition"], use_threads=False).aggregate([("_row", "max")])
        out = out.take(rows["_row_max"]).drop_columns(["_row"])
    out = out.filter(pc.is_valid(out["offset"])).drop_columns(["_hash"])
    return out.sort_by([("group", "ascending"), ("topic", "ascending"), ("partition", "ascending")])


def _empty(history: bool) -> Any:
    import pyarrow as pa

    ms = pa.timestamp("ms", tz="UTC")
    fields = [("group", pa.string()), ("topic", pa.string()), ("partition", pa.int32()), ("offset", pa.int64()),
              ("leader_epoch", pa.int32()), ("metadata", pa.string()), ("commit_timestamp", ms),
              ("expire_timestamp", ms), ("coordinator_partition", pa.int32()), ("record_offset", pa.int64())]
    if history:
        fields += [("timestamp", ms), ("tombstone", pa.bool_()), ("value_version", pa.int16())]
    return pa.schema(fields).empty_table()
