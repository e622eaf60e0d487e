"""Producer state snapshots: the ``<offset>.snapshot`` files of a partition directory.

A broker writes one when it rolls a segment and when it shuts down: the state of every
idempotent or transactional producer of the partition at that offset (Kafka's
``ProducerStateManager``; the body is the ``ProducerSnapshot`` message, version 1). The
file, big-endian::

    int16  version                      (1)
    uint32 crc                          CRC32C of every byte after this field, to the end of the file
    int32  count (>= 0), then count entries of 46 bytes:
        int64 producerId
        int16 epoch
        int32 lastSequence              of the producer's last data batch
        int64 lastOffset                that batch's last offset (-1: no data batch)
        int32 offsetDelta               its last offset delta
        int64 timestamp                 the producer's last timestamp (data batch or marker)
        int32 coordinatorEpoch          of the producer's last transaction marker (-1: none)
        int64 currentTxnFirstOffset     first offset of its open transaction (-1: none)
    any bytes after the entries         covered by the CRC, otherwise ignored

:func:`read_snapshot` reads it as Kafka's ``ProducerStateManager.readSnapshot`` does: it
checks the version, that the count's entries fit in the file and the CRC over everything
after the CRC field (bytes after the entries included), and returns the entries as a NumPy
structured array; :func:`write_snapshot` is its inverse;
:class:`ProducerState` follows the batches a :class:`kbatch.LogWriter` appends, as the
broker's producer state does, so the snapshots it writes read back as a broker's.

>>> state = ProducerState()
>>> data = write_snapshot(state.entries())
>>> data.hex(), len(read_snapshot(data))
('000148674bc700000000', 0)
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import crc32c
import numpy as np
import numpy.typing as npt

from kbatch.errors import CorruptRecordError, UnsupportedError

__all__ = ["ENTRY_DTYPE", "ProducerState", "read_snapshot", "write_snapshot", "snapshot_path"]

_WIRE = np.dtype([
    ("producer_id", ">i8"), ("epoch", ">i2"), ("last_sequence", ">i4"), ("last_offset", ">i8"),
    ("offset_delta", ">i4"), ("timestamp", ">i8"), ("coordinator_epoch", ">i4"),
    ("current_txn_first_offset", ">i8"),
])
#: one row per producer (native byte order)
ENTRY_DTYPE = _WIRE.newbyteorder("=")
_HEAD = 10  # version, crc, count


def read_snapshot(data: Any) -> npt.NDArray[Any]:
    """Decode a ``.snapshot`` file's bytes into an :data:`ENTRY_DTYPE` array.

    Raises
    ------
    UnsupportedError
        A version other than 1.
    CorruptRecordError
        Too short, a count whose entries do not fit, or a CRC mismatch.

    Bytes after the entries are accepted when the CRC covers them, as Kafka
    accepts them (ProducerSnapshot is not flexible: they cannot be tagged fields);
    they carry no producer.
    """
    buf = memoryview(data).cast("B")
    if len(buf) < _HEAD:
        raise CorruptRecordError(f"a producer snapshot of {len(buf)} bytes ({_HEAD} at least)", 0, -1, "version")
    version = int.from_bytes(buf[0:2], "big", signed=True)
    if version != 1:
        raise UnsupportedError(f"producer snapshot version {version} (only 1 exists)", 0, -1, "version")
    stored = int.from_bytes(buf[2:6], "big")
    count = int.from_bytes(buf[6:10], "big", signed=True)
    if count < 0 or _HEAD + count * _WIRE.itemsize > len(buf):
        raise CorruptRecordError(f"{count} producer entries do not fit in {len(buf) - _HEAD} bytes", 6, -1,
                                 "producerEntries")
    computed = crc32c.crc32c(buf[6:])
    if stored != computed:
        raise CorruptRecordError(f"producer snapshot crc32c mismatch: stored 0x{stored:08x}, computed 0x{computed:08x}",
                                 2, -1, "crc")
    return np.frombuffer(buf, _WIRE, count, _HEAD).astype(ENTRY_DTYPE)


def write_snapshot(entries: npt.NDArray[Any]) -> bytes:
    """The bytes of a ``.snapshot`` file holding ``entries`` (fields of :data:`ENTRY_DTYPE`)."""
    wire = np.asarray(entries).astype(_WIRE)
    body = len(wire).to_bytes(4, "big", signed=True) + wire.tobytes()
    return (1).to_bytes(2, "big") + crc32c.crc32c(body).to_bytes(4, "big") + body


def snapshot_path(directory: str | os.PathLike[str], offset: int) -> Path:
    """``<directory>/<offset, 20 digits>.snapshot``."""
    return Path(directory) / f"{offset:020d}.snapshot"


class ProducerState:
    """The producer state of a partition, fed batch by batch (Kafka's ``ProducerAppendInfo`` rules).

    A data batch of producer id >= 0 sets its epoch, last sequence
    (``baseSequence + lastOffsetDelta``, wrapping at 2**31), last offset,
    offset delta and timestamp, and a transactional one opens a transaction
    at its first offset if none is open; a transaction marker sets the
    coordinator epoch and the timestamp and closes the transaction.
    """

    def __init__(self) -> None:
        self._producers: dict[int, list[int]] = {}

    def update(self, head: Any, first: int, last: int) -> None:
        """Apply one batch (a row of ``kbatch.BATCH_DTYPE``) whose offsets are ``first..last``."""
        pid = int(head["producer_id"])
        if pid < 0:
            return
        e = self._producers.get(pid)
        epoch = int(head["producer_epoch"])
        if e is None or e[1] != epoch:
            e = [pid, epoch, -1, -1, 0, -1, -1 if e is None else e[6], -1 if e is None else e[7]]
            self._producers[pid] = e
        e[5] = int(head["max_timestamp"])
        if head["is_control"]:
            e[6] = int(head["coordinator_epoch"])
            e[7] = -1
            return
        delta = int(head["last_offset_delta"])
        base_seq = int(head["base_sequence"])
        e[2] = (base_seq + delta) % (1 << 31) if base_seq >= 0 else -1
        e[3] = last
        e[4] = delta
        if head["is_transactional"] and e[7] < 0:
            e[7] = first

    def entries(self) -> npt.NDArray[Any]:
        """Every producer, by producer id, as an :data:`ENTRY_DTYPE` array."""
        rows = [tuple(self._producers[p]) for p in sorted(self._producers)]
        return np.array(rows, dtype=ENTRY_DTYPE)

    def write(self, directory: str | os.PathLike[str], offset: int) -> Path:
        """Write ``<offset>.snapshot`` into ``directory``; return its path."""
        path = snapshot_path(directory, offset)
        path.write_bytes(write_snapshot(self.entries()))
        return path
