"""A partition directory written the way a broker lays it out: :class:`LogWriter`.

Provides the writer of segments, their ``.index``/``.timeindex``/``.txnindex``,
``leader-epoch-checkpoint``, ``partition.metadata``, producer snapshots and the root's
checkpoint files. Uses :mod:`kbatch.log._indexes` (the index dtypes), :mod:`kbatch.log._frames`
(:func:`scan_headers` frames each appended batch), ``kbatch.log._checkpoint`` and
``kbatch.log._producer_snapshot``.
The public face is :mod:`kbatch.log`.
"""

from __future__ import annotations

import base64
import os
import struct
import uuid
import zlib
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np

from kbatch._wire import (
    BATCH_OVERHEAD,
    LEGACY_CRC_OFFSET,
    LEGACY_MAGIC_OFFSET,
    LEGACY_TIMESTAMP_OFFSET,
    LOG_OVERHEAD,
    PARTITION_LEADER_EPOCH_OFFSET,
)
from kbatch.codec import decode_batches
from kbatch.errors import CorruptRecordError, LayoutError

from ._checkpoint import (
    HIGH_WATERMARK,
    LOG_START,
    RECOVERY_POINT,
    read_checkpoint,
    update_checkpoint,
)
from ._frames import scan_headers
from ._indexes import OFFSET_INDEX_DTYPE, TIME_INDEX_DTYPE, TXN_INDEX_DTYPE, read_index
from ._producer_snapshot import ProducerState

if TYPE_CHECKING:  # typing.Self is 3.11+; typing_extensions is not a runtime dependency
    from typing_extensions import Self


def _entries(path: Path, dtype: Any) -> list[tuple[int, ...]]:
    """The entries of an index file as tuples (none when it is missing; a broker's preallocated
    zeros left out)."""
    found = read_index(path, dtype)
    return [] if found is None else [tuple(int(v) for v in e) for e in found.tolist()]


class LogWriter:
    """Write a partition directory the way a broker lays it out.

    Parameters
    ----------
    root : str or Path
        The ``log.dirs`` root; the partition directory ``<topic>-<partition>``
        is created in it.
    topic : str
    partition : int
    segment_bytes : int, default 1 GiB
        Roll to a new segment before a batch would make the current one larger.
    index_interval_bytes : int, default 4096
        Bytes of log between ``.index`` / ``.timeindex`` entries, as the broker.
    topic_id : str, optional
        For ``partition.metadata`` (base64url UUID); a random one by default, the existing
        one when the partition is continued (a different one given is refused).

    Raises
    ------
    LayoutError
        The partition directory exists but cannot be continued: a segment that is damaged
        (cut inside a batch, a frame that is not a batch), offsets that go backwards across
        segments, ``.log`` files not named as segments, or a ``partition.metadata`` that is
        unreadable or names another topic id.

    Notes
    -----
    **An existing partition is continued, never truncated**: its segments are validated
    (every batch framed, offsets rising), then the writer takes up the log where it ends: the
    next offset after the last batch, the topic id of ``partition.metadata``, the leader
    epochs of ``leader-epoch-checkpoint``, the log start of the root's checkpoint, the producer
    state and open transactions rebuilt from the batches, and the last segment reopened for
    appending with its ``.index``/``.timeindex``/``.txnindex`` entries extended (a new segment
    when ``segment_bytes`` is due). Damaged or foreign content is refused instead (above).

    Each :meth:`append` is one broker append per batch: index entries point at
    batch starts and hold the batch's last offset (what Kafka's recovery and
    ``kafka-dump-log.sh --verify-index-only`` expect); ``.timeindex`` holds
    the largest timestamp so far at each entry and once more when a segment is
    closed; an ABORT marker adds a ``.txnindex`` entry with the last stable
    offset of the moment; a rising partition leader epoch adds a line to
    ``leader-epoch-checkpoint``; each roll and :meth:`close` write the producer
    state at the log end offset to ``<offset>.snapshot`` (:mod:`kbatch.log._producer_snapshot`).
    :meth:`flush` and :meth:`close` record the partition in the root's
    ``log-start-offset-checkpoint``, ``recovery-point-offset-checkpoint`` and
    ``replication-offset-checkpoint`` (as a broker's clean shutdown: everything flushed
    and replicated); :meth:`delete_records` moves the log start as the DeleteRecords API does.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        topic: str,
        partition: int,
        *,
        segment_bytes: int = 1 << 30,
        index_interval_bytes: int = 4096,
        topic_id: str | None = None,
    ) -> None:
        if segment_bytes < BATCH_OVERHEAD:
            raise ValueError("segment_bytes is too small")
        self.path = Path(root) / f"{topic}-{int(partition)}"
        self.path.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = int(segment_bytes)
        self.index_interval_bytes = int(index_interval_bytes)
        segments = self._segments()
        existing = self._topic_id() if segments or (self.path / "partition.metadata").exists() else None
        if existing and topic_id and topic_id != existing:
            raise LayoutError(f"{self.path}: partition.metadata names topic id {existing}, not {topic_id}: "
                              "not continued", url=str(self.path))
        self.topic_id = existing or topic_id or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        (self.path / "partition.metadata").write_text(f"version: 0\ntopic_id: {self.topic_id}\n")
        self.next_offset = 0
        #: Where the log starts (moved by :meth:`delete_records`).
        self.log_start_offset = 0
        self.leader_epochs: list[tuple[int, int]] = []
        self._ongoing: dict[int, int] = {}
        self.producers = ProducerState()
        self._file: Any = None
        self._base = 0
        self._size = 0
        self._index: list[tuple[int, int]] = []
        self._time: list[tuple[int, int]] = []
        self._txn: list[tuple[int, int, int, int]] = []
        self._since_index = 0
        self._max_ts = -1
        self._max_ts_offset = -1
        if segments:
            self._continue(segments)
            return
        self._write_epochs()
        self._open_segment(0)

    def _segments(self) -> list[Path]:
        """The partition's ``.log`` segments by base offset (a ``.log`` named otherwise: refused)."""
        logs = sorted(self.path.glob("*.log"))
        for f in logs:
            if len(f.stem) != 20 or not f.stem.isdigit():
                raise LayoutError(f"{f}: not a segment name (20 digits): {self.path} is not continued",
                                  url=str(self.path))
        return sorted(logs, key=lambda f: int(f.stem))

    def _topic_id(self) -> str:
        """The topic id of the existing ``partition.metadata`` (refused when unreadable)."""
        try:
            lines = dict(ln.split(":", 1) for ln in (self.path / "partition.metadata").read_text().splitlines()
                         if ln.strip())
            return lines["topic_id"].strip()
        except (OSError, ValueError, KeyError) as exc:
            raise LayoutError(f"{self.path}/partition.metadata is unreadable ({exc}): the partition is not "
                              "continued", url=str(self.path)) from None

    def _continue(self, segments: list[Path]) -> None:
        """Take up the existing log where it ends (see the class's notes); refuse a damaged one."""
        last_heads: Any = None
        for seg in segments:
            data = seg.read_bytes()
            heads, stop, err, _ = scan_headers(memoryview(data), 0, len(data), 1 << 62, seg)
            if err is not None or stop != len(data):
                why = str(err) if err is not None else f"cut inside a batch at byte {stop} of {len(data)}"
                raise LayoutError(f"{seg}: damaged ({why}): the partition is not continued", url=str(self.path))
            for h in heads:
                base, last = int(h["base_offset"]), int(h["base_offset"]) + int(h["last_offset_delta"])
                if base < self.next_offset:
                    raise LayoutError(f"{seg}: offset {base} goes backwards (the log before ends at "
                                      f"{self.next_offset}): the partition is not continued", url=str(self.path))
                self._replay(h, base, last)
            last_heads = heads
        topic, _, partition = self.path.name.rpartition("-")
        self.log_start_offset = read_checkpoint(self.path.parent / LOG_START).get((topic, int(partition)), 0)
        epochs = (self.path / "leader-epoch-checkpoint")
        if epochs.exists():
            rows = epochs.read_text().split("\n")[2:]
            self.leader_epochs = [(int(e), int(o)) for e, o in (ln.split() for ln in rows if ln.strip())]
        seg = segments[-1]
        self._base = int(seg.stem)
        stem = self._stem()
        self._index = [(e[0], e[1]) for e in _entries(stem.with_suffix(".index"), OFFSET_INDEX_DTYPE)]
        self._time = [(e[0], e[1]) for e in _entries(stem.with_suffix(".timeindex"), TIME_INDEX_DTYPE)]
        self._txn = [(e[1], e[2], e[3], e[4]) for e in _entries(stem.with_suffix(".txnindex"), TXN_INDEX_DTYPE)]
        self._size = seg.stat().st_size
        self._since_index = self._size - (self._index[-1][1] if self._index else 0)
        for h in last_heads:
            if int(h["max_timestamp"]) > self._max_ts:
                self._max_ts = int(h["max_timestamp"])
                self._max_ts_offset = int(h["base_offset"]) + int(h["last_offset_delta"])
        self._file = open(seg, "ab")  # noqa: SIM115 - closed on roll/close

    def _replay(self, h: Any, first: int, last: int) -> None:
        """The producer state and open transactions after one existing batch."""
        if int(h["magic"]) == 2:
            self.producers.update(h, first, last)
            pid = int(h["producer_id"])
            if h["is_transactional"] and pid >= 0:
                if not h["is_control"]:
                    self._ongoing.setdefault(pid, first)
                elif int(h["control_type"]) in (0, 1):
                    self._ongoing.pop(pid, None)
        self.next_offset = last + 1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, tp: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _stem(self) -> Path:
        return self.path / f"{self._base:020d}"

    def _open_segment(self, base: int) -> None:
        self._base = base
        self._file = open(self._stem().with_suffix(".log"), "wb")  # noqa: SIM115 - closed on roll/close
        self._size = 0
        self._index, self._time, self._txn = [], [], []
        self._since_index = 0
        self._max_ts, self._max_ts_offset = -1, -1

    def _time_append(self, timestamp: int, offset: int) -> None:
        if timestamp > (self._time[-1][0] if self._time else -1):
            self._time.append((timestamp, offset - self._base))

    def _close_segment(self) -> None:
        if self._file is None:
            return
        if self._max_ts >= 0:
            self._time_append(self._max_ts, self._max_ts_offset)
        self._file.close()
        self._file = None
        self.producers.write(self.path, self.next_offset)  # as a broker does at a roll and at shutdown
        stem = self._stem()
        np.array(self._index, dtype=OFFSET_INDEX_DTYPE).tofile(stem.with_suffix(".index"))
        np.array(self._time, dtype=TIME_INDEX_DTYPE).tofile(stem.with_suffix(".timeindex"))
        if self._txn:
            entries = [(0, *t) for t in self._txn]
            np.array(entries, dtype=TXN_INDEX_DTYPE).tofile(stem.with_suffix(".txnindex"))

    def _write_epochs(self) -> None:
        lines = ["0", str(len(self.leader_epochs))] + [f"{e} {o}" for e, o in self.leader_epochs]
        (self.path / "leader-epoch-checkpoint").write_text("\n".join(lines) + "\n")

    def append(self, data: Any, *, assign_offsets: bool = False, leader_epoch: int | None = None) -> int:
        """Append whole batches (any magic, any codec); return the next offset.

        Parameters
        ----------
        data : buffer
            Batches back to back, e.g. from :func:`kbatch.encode`.
        assign_offsets : bool, default False
            Renumber magic 2 batches (and uncompressed legacy entries) from the
            log end offset, as a broker does; otherwise offsets are kept and
            must not go backwards (gaps are allowed, as after compaction).
        leader_epoch : int, optional
            Written into each magic 2 batch (outside its CRC, as a broker does).
        """
        buf = bytearray(data)
        view = memoryview(buf)
        path = self.path / "<append>"
        heads, stop, err, _ = scan_headers(view, 0, len(buf), 1 << 62, path)
        if err is not None:
            raise err
        if stop != len(buf):
            raise CorruptRecordError(f"incomplete batch at the end of the appended data ({len(buf) - stop} bytes)",
                                     stop, len(heads), "batchLength", batch_position=stop)
        positions = heads["position"].tolist()
        for k, p in enumerate(positions):
            h = heads[k]
            size = LOG_OVERHEAD + int(h["batch_length"])
            magic = int(h["magic"])
            base, last_delta = int(h["base_offset"]), int(h["last_offset_delta"])
            first = base
            if magic < 2 and int(h["compression"]):
                # a wrapper's offset is its last inner one: count the inner messages
                inner_table = decode_batches(view[p : p + size], verify_crc=False)
                inner = len(inner_table)
                first = base - inner + 1
                if magic == 1 and int(h["timestamp_type"]) == 0 and inner:
                    # as the broker's LogValidator: the wrapper carries the largest inner timestamp
                    largest = int(inner_table.records["timestamp"].max())
                    if largest != int(h["max_timestamp"]):
                        m = p + LOG_OVERHEAD  # the legacy message
                        struct.pack_into(">q", buf, m + LEGACY_TIMESTAMP_OFFSET, largest)
                        crc = zlib.crc32(view[m + LEGACY_MAGIC_OFFSET : p + size]) & 0xFFFFFFFF
                        struct.pack_into(">I", buf, m + LEGACY_CRC_OFFSET, crc)
                        heads[k]["max_timestamp"] = largest
                        h = heads[k]
            if assign_offsets:
                if magic == 2 or int(h["compression"]) == 0:
                    struct.pack_into(">q", buf, p, self.next_offset)
                    base = first = self.next_offset
                elif magic == 1:  # inner offsets are relative: only the wrapper's changes
                    base = self.next_offset + (base - first)
                    first = self.next_offset
                    struct.pack_into(">q", buf, p, base)
                elif first != self.next_offset:
                    raise ValueError("cannot renumber a compressed magic 0 wrapper (absolute inner offsets); "
                                     f"give it offsets from {self.next_offset} on")
            if magic == 2 and leader_epoch is not None:
                struct.pack_into(">i", buf, p + PARTITION_LEADER_EPOCH_OFFSET, leader_epoch)
            last = base + last_delta
            if first < self.next_offset:
                raise ValueError(f"offset {first} goes backwards: the log ends at {self.next_offset}")
            if self._file is None or (self._size and self._size + size > self.segment_bytes) or (
                last - self._base > 2**31 - 1
            ):
                self._close_segment()
                self._open_segment(first)
            ts = int(h["max_timestamp"])
            if ts > self._max_ts:
                self._max_ts, self._max_ts_offset = ts, last
            if self._since_index > self.index_interval_bytes:
                self._index.append((last - self._base, self._size))
                self._time_append(self._max_ts, self._max_ts_offset)
                self._since_index = 0
            self._since_index += size
            self._file.write(view[p : p + size])
            self._size += size
            epoch = int(struct.unpack_from(">i", buf, p + PARTITION_LEADER_EPOCH_OFFSET)[0]) if magic == 2 else -1
            if epoch >= 0 and (not self.leader_epochs or epoch > self.leader_epochs[-1][0]):
                self.leader_epochs.append((epoch, first))
                self._write_epochs()
            pid = int(h["producer_id"])
            if magic == 2:
                self.producers.update(h, first, last)
            if magic == 2 and h["is_transactional"] and pid >= 0:
                if not h["is_control"]:
                    self._ongoing.setdefault(pid, first)
                elif int(h["control_type"]) in (0, 1):
                    first = self._ongoing.pop(pid, last)
                    if int(h["control_type"]) == 0:
                        lso = min(self._ongoing.values()) if self._ongoing else last + 1
                        self._txn.append((pid, first, last, lso))
            self.next_offset = last + 1
        return self.next_offset

    def delete_records(self, offset: int) -> None:
        """Move the log start offset to ``offset``, as Kafka's DeleteRecords API does.

        The segments stay on disk (the broker deletes whole segments below the log start
        later); the root's ``log-start-offset-checkpoint`` says where the log starts.
        """
        offset = int(offset)
        if not self.log_start_offset <= offset <= self.next_offset:
            raise ValueError(
                f"delete_records offset {offset} is outside [{self.log_start_offset}, {self.next_offset}]"
            )
        self.log_start_offset = offset
        self._write_checkpoints()

    def _write_checkpoints(self) -> None:
        topic, _, partition = self.path.name.rpartition("-")
        root, key = self.path.parent, (topic, int(partition))
        update_checkpoint(root / LOG_START, {key: self.log_start_offset})
        for name in (RECOVERY_POINT, HIGH_WATERMARK):
            update_checkpoint(root / name, {key: self.next_offset})

    def roll(self) -> None:
        """Close the current segment; the next append starts a new one."""
        self._close_segment()

    def flush(self) -> None:
        """Write the current segment's indexes as they stand (the segment stays open)."""
        if self._file is not None:
            self._file.flush()
            stem = self._stem()
            np.array(self._index, dtype=OFFSET_INDEX_DTYPE).tofile(stem.with_suffix(".index"))
            np.array(self._time, dtype=TIME_INDEX_DTYPE).tofile(stem.with_suffix(".timeindex"))
        self._write_checkpoints()

    def close(self) -> None:
        """Finish the segment being written (final time index entry, index files, checkpoints)."""
        self._close_segment()
        self._write_epochs()
        self._write_checkpoints()

