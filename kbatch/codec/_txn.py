"""read_committed: drop aborted transactional records the way Kafka's consumer does.

The rules, as ``CompletedFetch.nextFetchedRecord`` in Apache Kafka's Java consumer applies
them to the batches of a Fetch response, in order::

    aborted   = queue of (producerId, firstOffset), ordered by firstOffset
    producers = set()
    for batch in batches:
        if batch has a producerId:
            while aborted and aborted.head.firstOffset <= batch.lastOffset:
                producers.add(aborted.pop().producerId)
            if batch is a control batch holding an ABORT marker:
                producers.remove(batch.producerId)
            elif batch.isTransactional and batch.producerId in producers:
                skip the batch                         # aborted data
        if batch is a control batch: skip it           # markers are never returned
    and nothing at or past the last stable offset is returned.

The work per record is NumPy column work; the loop above runs in Python only over the
batches that can matter (control batches and transactional batches of producers that have
an aborted transaction), never once per record.

>>> import kbatch
>>> from kbatch.codec._txn import aborted_from_markers, filter_committed
>>> data = (kbatch.encode([b"a", b"b"], producer_id=7, producer_epoch=0, transactional=True)
...         + kbatch.encode_control("abort", 7, 0, base_offset=2)
...         + kbatch.encode([b"c"], base_offset=3))
>>> table = kbatch.decode(data)
>>> aborted_from_markers(table)
[(7, 0)]
>>> committed = filter_committed(table, aborted_from_markers(table))
>>> committed.records["offset"].tolist(), committed.value(0)
([3], b'c')
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._core import decode as _core_decode
from ._table import RecordTable, select

__all__ = [
    "aborted_batch_mask",
    "aborted_from_markers",
    "check_aborted_index",
    "decode",
    "filter_committed",
    "open_transactions",
    "txn_state",
]

#: Control record types (the ``control_type`` batch column).
ABORT = 0
COMMIT = 1


def _batches_of(table: RecordTable | npt.NDArray[Any]) -> npt.NDArray[Any]:
    return table.batches if isinstance(table, RecordTable) else table


def txn_state(
    batches: npt.NDArray[Any], ongoing: dict[int, int] | None = None
) -> tuple[list[tuple[int, int, int]], dict[int, int]]:
    """Walk markers and transactional batches as Kafka's ProducerStateManager does.

    Returns the completed aborted transactions as (producer_id, first_offset,
    last_offset) and the transactions still open, producer_id -> first_offset.
    """
    ongoing = dict(ongoing or {})
    aborted: list[tuple[int, int, int]] = []
    b = batches
    if len(b) == 0:
        return aborted, ongoing
    interesting = np.flatnonzero(b["is_transactional"] & (b["producer_id"] >= 0) & (b["magic"] >= 2))
    if len(interesting) == 0:
        return aborted, ongoing
    sub = b[interesting]
    pids = sub["producer_id"].tolist()
    base = sub["base_offset"].tolist()
    last = (sub["base_offset"] + sub["last_offset_delta"]).tolist()
    control = sub["is_control"].tolist()
    ctype = sub["control_type"].tolist()
    for pid, first, lastoff, is_control, kind in zip(pids, base, last, control, ctype, strict=True):
        if not is_control:
            ongoing.setdefault(pid, first)
            continue
        if kind not in (ABORT, COMMIT):
            continue
        start = ongoing.pop(pid, lastoff)  # a marker with no data in this partition: its own offset
        if kind == ABORT:
            aborted.append((pid, start, lastoff))
    return aborted, ongoing


def aborted_from_markers(table: RecordTable | npt.NDArray[Any]) -> list[tuple[int, int]]:
    """The aborted transactions of a buffer, from its ABORT control markers.

    Parameters
    ----------
    table : RecordTable or numpy.ndarray
        A decoded table, or its ``batches`` column (e.g. from ``Segment.scan()``).

    Returns
    -------
    list of (int, int)
        ``(producer_id, first_offset)`` per aborted transaction, ordered by
        first offset, as a broker lists them in a Fetch response. A
        transaction's first offset is the base offset of its producer's first
        transactional batch after its previous marker (the marker's own offset
        when it had none).

    Examples
    --------
    >>> import kbatch
    >>> raw = kbatch.encode([b"x"], producer_id=3, producer_epoch=0, transactional=True, base_offset=5)
    >>> aborted_from_markers(kbatch.decode(raw + kbatch.encode_control("abort", 3, 0, base_offset=6)))
    [(3, 5)]
    """
    aborted, _ = txn_state(_batches_of(table))
    return sorted((pid, first) for pid, first, _ in aborted)


def open_transactions(table: RecordTable | npt.NDArray[Any]) -> dict[int, int]:
    """Transactions still open at the end: producer_id -> first offset.

    The last stable offset of a log ending there is the smallest first
    offset (or the log end offset when there is none).

    >>> import kbatch
    >>> raw = kbatch.encode([b"x"], producer_id=3, producer_epoch=0, transactional=True, base_offset=5)
    >>> open_transactions(kbatch.decode(raw))
    {3: 5}
    """
    return txn_state(_batches_of(table))[1]


def check_aborted_index(
    entries: Iterable[tuple[int, int, int]],
    found: Sequence[tuple[int, int, int]],
    *,
    unverifiable: bool = False,
) -> list[str]:
    """Check a segment's ``.txnindex`` entries against the ABORT markers of its ``.log``: what disagrees.

    The index is a hint: the markers (control batches, seen in a header scan)
    are the truth. An entry holds when an ABORT marker of its producer is at its
    last offset and the transaction's data does not start before the entry's
    first offset (it may start later: data before the segment was deleted or
    compacted away). Only the markers' transactions are to be used, so that a
    read gives what it gives with the ``.txnindex`` deleted; when ``unverifiable``
    (the scan skipped corrupt bytes, where a marker may have been), an entry
    naming no marker is noted as such.

    Parameters
    ----------
    entries : iterable of (int, int, int)
        ``(producer_id, first_offset, last_offset)`` per ``.txnindex`` entry.
    found : sequence of (int, int, int)
        The same, per ABORT marker of the segment (the first offset is the
        producer's first transactional batch after its previous marker), as
        ``txn_state`` finds them.
    unverifiable : bool, default False
        Whether the segment's scan skipped corrupt bytes.

    Returns
    -------
    list of str
        One line per entry that does not hold and per marker with no entry.

    Examples
    --------
    >>> check_aborted_index([(7, 0, 2)], [(7, 0, 2)])
    []
    >>> check_aborted_index([], [(7, 0, 2)])
    ['.txnindex has no entry for the ABORT marker of producer 7 at offset 2: the marker is used']
    """
    markers = {(pid, last): first for pid, first, last in found}
    listed: set[tuple[int, int]] = set()
    problems: list[str] = []
    for pid, first, last in entries:
        key = (int(pid), int(last))
        listed.add(key)
        what = f".txnindex entry (producer {pid}, offsets {first}..{last})"
        if key not in markers:
            where = " (it may have been in the bytes skipped as corrupt)" if unverifiable else ""
            problems.append(f"{what}: no ABORT marker of that producer at offset {last}{where}: entry not used")
        elif first > markers[key]:
            problems.append(f"{what}: the transaction's data starts at {markers[key]}: the marker is used")
    for pid, _first, last in found:
        if (pid, last) not in listed:
            problems.append(f".txnindex has no entry for the ABORT marker of producer {pid} at offset {last}: "
                            "the marker is used")
    return problems


def aborted_batch_mask(
    batches: npt.NDArray[Any], aborted_transactions: Iterable[tuple[int, int]]
) -> npt.NDArray[np.bool_]:
    """True for each data batch a read_committed consumer drops as aborted."""
    b = batches
    dropped = np.zeros(len(b), dtype=bool)
    queue = sorted((int(first), int(pid)) for pid, first in aborted_transactions)
    if not queue or len(b) == 0:
        return dropped
    aborted_pids = np.array(sorted({pid for _, pid in queue}), dtype=np.int64)
    has_pid = b["producer_id"] >= 0
    relevant = has_pid & (b["is_control"] | (b["is_transactional"] & np.isin(b["producer_id"], aborted_pids)))
    rows = np.flatnonzero(relevant)
    if len(rows) == 0:
        return dropped
    sub = b[rows]
    last = (sub["base_offset"] + sub["last_offset_delta"]).tolist()
    pids = sub["producer_id"].tolist()
    control = sub["is_control"].tolist()
    ctype = sub["control_type"].tolist()
    txn = sub["is_transactional"].tolist()
    producers: set[int] = set()
    qi = 0
    nq = len(queue)
    for k, row in enumerate(rows.tolist()):
        # Batches skipped here (non-transactional, or transactional of another producer) would only
        # consume the queue earlier; that changes nothing for the batches examined.
        while qi < nq and queue[qi][0] <= last[k]:
            producers.add(queue[qi][1])
            qi += 1
        if control[k]:
            if ctype[k] == ABORT:
                producers.discard(pids[k])
        elif txn[k] and pids[k] in producers:
            dropped[row] = True
    return dropped


def filter_committed(
    table: RecordTable,
    aborted_transactions: Iterable[tuple[int, int]],
    last_stable_offset: int | None = None,
    *,
    inplace: bool = False,
) -> RecordTable:
    """Keep what a read_committed consumer returns from ``table``.

    Parameters
    ----------
    table : RecordTable
        Decoded batches, in log order (a Fetch response's records, a segment).
    aborted_transactions : iterable of (int, int)
        ``(producer_id, first_offset)`` of each aborted transaction that
        overlaps the table, as a Fetch response lists them (or
        :func:`aborted_from_markers` finds them).
    last_stable_offset : int, optional
        Nothing at or past it is returned.
    inplace : bool, default False
        Compact ``table``'s own arrays instead of copying (``table`` must not
        be used afterwards).

    Returns
    -------
    RecordTable
        Sharing ``table.data``; records of aborted transactions and at or
        past the last stable offset are gone (each record by its own offset,
        wherever it is in the table), as are the rows of batches that start
        there; control batch rows stay (they never have records). A batch
        cut by the last stable offset keeps its header's ``record_count``;
        its records are those whose ``batch`` column names it, from its
        ``first_record`` on.

    Examples
    --------
    >>> import kbatch
    >>> raw = (kbatch.encode([b"t"], producer_id=1, producer_epoch=0, transactional=True)
    ...        + kbatch.encode([b"plain"], base_offset=1))
    >>> filter_committed(kbatch.decode(raw), [(1, 0)]).values()
    [b'plain']
    >>> filter_committed(kbatch.decode(raw), [], last_stable_offset=0).values()
    []
    """
    b = table.batches
    keep_batch = ~aborted_batch_mask(b, aborted_transactions)
    if last_stable_offset is not None:
        keep_batch &= b["base_offset"] < last_stable_offset
    out = table if keep_batch.all() else _keep_batches(table, keep_batch, inplace)
    if last_stable_offset is not None and len(out.records):
        # a mask by offset, not a cut: offsets may go back between batches (a record below the
        # last stable offset after one past it is still returned, as Kafka's consumer filters
        # batch by batch); a kept batch row's first_record then counts only the kept records
        below = out.records["offset"] < last_stable_offset
        if not below.all():
            out = select(out, below, np.ones(len(out.batches), dtype=bool), inplace=inplace or out is not table)
    return out


def _keep_batches(table: RecordTable, keep: npt.NDArray[np.bool_], inplace: bool) -> RecordTable:
    """``table`` with only the batches in ``keep`` and their records, moved run by run."""
    b = table.batches
    records = table.records
    headers = np.asarray(table.headers).view(np.ndarray)
    counts = np.where(b["is_control"], 0, b["record_count"]).astype(np.int64)
    first = b["first_record"].astype(np.int64)
    nonempty = counts > 0
    hstart = np.zeros(len(b), dtype=np.int64)
    hend = np.zeros(len(b), dtype=np.int64)
    if len(records):
        idx = np.flatnonzero(nonempty)
        hstart[idx] = records["headers_start"][first[idx]]
        last = records[first[idx] + counts[idx] - 1]
        hend[idx] = last["headers_start"] + last["headers_count"]
    edges = np.diff(np.concatenate(([0], keep.view(np.int8), [0])))
    run_starts, run_ends = np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()
    if not inplace:
        records = records.copy()
        headers = headers.copy()
    rsize, hsize = records.dtype.itemsize, headers.dtype.itemsize
    rbase, hbase = records.ctypes.data, headers.ctypes.data
    rdst = hdst = bdst = 0
    new_first = np.empty(len(b), dtype=np.int64)
    # per kept run: rows moved, and by how much their headers_start / batch go down
    run_rows: list[int] = []
    run_hshift: list[int] = []
    run_bshift: list[int] = []
    for b0, b1 in zip(run_starts, run_ends, strict=True):
        seg = slice(b0, b1)
        data_rows = np.flatnonzero(nonempty[seg])
        if len(data_rows):
            r0 = int(first[b0 + data_rows[0]])
            r1 = int(first[b0 + data_rows[-1]] + counts[b0 + data_rows[-1]])
            h0 = int(hstart[b0 + data_rows[0]])
            h1 = int(hend[b0 + data_rows[-1]])
        else:
            r0 = r1 = h0 = h1 = 0
        n, nh = r1 - r0, h1 - h0
        new_first[seg] = first[seg] - (r0 - rdst) if len(data_rows) else rdst
        if n:
            if rdst != r0:
                ctypes.memmove(rbase + rdst * rsize, rbase + r0 * rsize, n * rsize)
            if nh and hdst != h0:
                ctypes.memmove(hbase + hdst * hsize, hbase + h0 * hsize, nh * hsize)
        run_rows.append(n)
        run_hshift.append(h0 - hdst)
        run_bshift.append(b0 - bdst)
        rdst += n
        hdst += nh
        bdst += b1 - b0
    kept = records[:rdst]
    if rdst:
        rows = np.asarray(run_rows, dtype=np.int64)
        kept["headers_start"] -= np.repeat(np.asarray(run_hshift, dtype=np.int64), rows)
        kept["batch"] -= np.repeat(np.asarray(run_bshift, dtype=np.int32), rows)
    new_batches = b[keep]
    new_batches["first_record"] = new_first[keep]
    return RecordTable(
        records=kept,
        batches=new_batches,
        headers=headers[:hdst],
        data=table.data,
        consumed_bytes=table.consumed_bytes,
        truncated=table.truncated,
        next_offset=table.next_offset,
        topic=table.topic,
        partition=table.partition,
    )


def decode(
    data: Any,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int | None = None,
    isolation_level: str = "read_uncommitted",
    aborted_transactions: Any = None,
    last_stable_offset: int | None = None,
) -> RecordTable:
    """Decode a buffer of Kafka record batches into NumPy columns.

    Parameters
    ----------
    data : buffer
        Any C-contiguous buffer (bytes, bytearray, memoryview, mmap, NumPy
        uint8 array): a Fetch response's ``records`` field or a log segment.
        It is not copied: for uncompressed batches the result points into it.
    verify_crc : bool, default True
        Check every batch's CRC-32C, as Kafka's consumer does with
        ``check.crcs=true``; a mismatch raises :class:`CRCError`.
    max_decompressed_size : int, optional
        Upper bound on the decompressed bytes of one call (compressed input
        only); past it decoding stops with :class:`CorruptRecordError`.
    isolation_level : {"read_uncommitted", "read_committed"}
        ``read_committed`` leaves out the records of aborted transactions as
        Kafka's consumer does (control records are never returned anyway).
    aborted_transactions : iterable of (producer_id, first_offset), optional
        For ``read_committed``: a Fetch response's ``aborted_transactions``.
        None means: the ones whose ABORT marker is in ``data`` (right for a
        whole log segment, not for a Fetch response cut before a marker).
    last_stable_offset : int, optional
        For ``read_committed``: nothing at or past it is returned.

    Returns
    -------
    RecordTable
        ``records``, ``batches`` and ``headers`` columns, ``data`` they point
        into, ``consumed_bytes``, ``truncated`` and ``next_offset``. An
        incomplete batch at the end is not an error: decoding stops before it
        and ``truncated`` is True.

    Raises
    ------
    CorruptRecordError
        The bytes break the format. ``.position``, ``.batch_index`` and
        ``.field`` say where; ``.partial`` holds everything before that batch.
    CRCError
        A batch's checksum does not match (subclass of CorruptRecordError).
    UnsupportedError
        A legacy (magic 0/1) message set.

    Notes
    -----
    It lives here, below the package face (which re-exports it), so that lower layers
    (``Records.decode`` of :mod:`kbatch.protocol`) decode as the face does without importing it.

    Examples
    --------
    >>> t = kbatch.decode(kbatch.encode([b"hello"], headers=[[("trace", b"1")]]))
    >>> len(t), t.value(0), t.headers(0)
    (1, b'hello', [('trace', b'1')])
    >>> t.batches["record_count"].tolist(), t.next_offset, t.truncated
    ([1], 1, False)
    >>> decode(kbatch.encode([b"x"]), isolation_level="read_committed").values()
    [b'x']
    """
    if max_decompressed_size is not None and int(max_decompressed_size) < 0:
        raise ValueError("max_decompressed_size must be >= 0")
    if isolation_level not in ("read_uncommitted", "read_committed"):
        raise ValueError(f"isolation_level must be 'read_uncommitted' or 'read_committed', got {isolation_level!r}")
    table = _core_decode(data, verify_crc=bool(verify_crc), max_decompressed_size=max_decompressed_size)
    if isolation_level == "read_uncommitted":
        return table
    if aborted_transactions is None:
        aborted_transactions = aborted_from_markers(table)
    return filter_committed(table, aborted_transactions, last_stable_offset)
