"""Reading planned work: one :class:`~kbatch.plan.LogSlice` (only the segments it names
opened) or a task of them as Arrow record batches, through :func:`read_logs`, the loop
``kbatch convert --engine arrow`` reads by too, so that both engines give the same rows.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from kbatch.codec import RecordTable, set_threads
from kbatch.errors import StorageError
from kbatch.log import LogDir, log_batches, open_log
from kbatch.storage import is_remote

from ._options import Options
from ._slices import LogSlice, with_root

__all__ = [
    "env_pythonpath",
    "open_slice",
    "read_logs",
    "read_slice",
    "read_task",
]

logger = logging.getLogger("kbatch.spark")


def open_slice(piece: LogSlice, opts: Options) -> LogDir:
    """The partition directory of ``piece`` with only its segments opened (nothing listed).

    Raises
    ------
    ValueError
        A segment of the slice was deleted after planning (retention, compaction) and
        ``failOnDataLoss`` is true; otherwise the loss is logged and the rest is read.
    """
    storage = opts.storage_options or None
    if not piece.segments:
        return open_log(piece.path, storage_options=storage)
    names = piece.segments
    gone = [] if is_remote(piece.path) else [n for n in names if not os.path.exists(os.path.join(piece.path, n))]
    if gone:
        msg = (
            f"{piece.topic}-{piece.partition}: segment{'s' if len(gone) > 1 else ''} {', '.join(gone)} of offsets "
            f"[{piece.start}, {piece.end}) deleted after the query was planned (retention or compaction)"
        )
        if opts.fail_on_data_loss:
            raise ValueError(msg + "; set failOnDataLoss=false to read what is left")
        logger.warning("%s: their records are skipped", msg)
        names = tuple(n for n in names if n not in gone)
    transactions = (list(piece.aborted), piece.last_stable) if opts.isolation_level == "read_committed" else None
    log = open_log(piece.path, segments=names, transactions=transactions, storage_options=storage)
    _check_sizes(piece, log)
    return log


def _check_sizes(piece: LogSlice, log: LogDir) -> None:
    """A segment shorter now than when planned (cut or rewritten since) would lose the records
    past its new end silently: StorageError naming it (it may grow: the active segment)."""
    planned = dict(zip(piece.segments, piece.sizes, strict=False))
    for seg in log.segments:
        was = planned.get(seg.path.name)
        if was is not None and seg.size < was:
            log.close()
            raise StorageError(f"cannot read {seg.url}: {seg.size} bytes, {was} when the query was planned "
                               "(cut or rewritten since)", url=seg.url)


def read_slice(piece: LogSlice, opts: Options, tables: Callable[..., Iterator[RecordTable]] | None = None
               ) -> Iterator[Any]:
    """Yield the records of ``piece`` as ``pyarrow.RecordBatch`` es in the Kafka schema (``tables``:
    the log's tables read by it, as for :func:`kbatch.arrow.log_batches`).

    Opens only the segments the slice names and reads them with :func:`kbatch.arrow.log_batches`
    (the loop ``LogDir.to_arrow`` and ``kbatch convert --engine arrow`` use too). Streams with
    bounded memory (LogDir.iter_tables chunks of at most ``maxBytesPerBatch``; one capped Arrow
    batch converted at a time). With ``failOnDataLoss=false`` corrupt batches are skipped (and
    logged) and an object gone since planning ends the slice with a warning, instead of failing
    the task.
    """
    # Spark runs a task on each core it was given: a parse thread of kbatch's own would
    # only compete with the task next to it.
    set_threads(1)
    try:
        log = open_slice(piece, opts)
    except StorageError as exc:
        if opts.fail_on_data_loss:
            raise
        logger.warning("%s-%s: offsets [%d, %d) not read (failOnDataLoss=false): %s", piece.topic,
                       piece.partition, piece.start, piece.end, exc)
        return

    def lost(_log: LogDir, exc: StorageError) -> None:  # an object gone or cut since planning
        logger.warning("%s-%s: the rest of offsets [%d, %d) not read (failOnDataLoss=false): %s",
                       piece.topic, piece.partition, piece.start, piece.end, exc)

    try:
        yield from read_logs(
            log,
            opts,
            ranges={(log.topic, log.partition): (piece.start, piece.end)},
            lost=None if opts.fail_on_data_loss else lost,
            tables=tables,
        )
    finally:
        log.close()


def read_logs(
    logs: LogDir | Sequence[LogDir],
    opts: Options,
    *,
    ranges: Mapping[tuple[str, int], tuple[int, int]] | None = None,
    lost: Callable[[LogDir, StorageError], None] | None = None,
    progress: Callable[[LogDir, RecordTable | None], None] | None = None,
    tables: Callable[..., Iterator[RecordTable]] | None = None,
) -> Iterator[Any]:
    """The records of ``logs`` as Arrow batches, read as ``opts`` say: :func:`kbatch.arrow.log_batches`.

    The Spark source's tasks (:func:`read_slice`) and ``kbatch convert --engine arrow`` read
    through here: isolation level, ``failOnDataLoss`` (corrupt batches raise or are skipped),
    ``verifyCrc``, ``includeHeaders``, ``extraColumns`` and the batch caps are applied alike.
    ``ranges``, ``lost``, ``progress`` and ``tables`` as for ``log_batches``.
    """
    return log_batches(
        logs,
        ranges=ranges,
        batch_rows=opts.batch_rows,
        batch_bytes=opts.batch_bytes,
        include_headers=opts.include_headers,
        extra_columns=opts.extra_columns,
        lost=lost,
        progress=progress,
        tables=tables,
        read={
            "isolation_level": opts.isolation_level,
            "on_corruption": opts.on_corruption,
            "verify_crc": opts.verify_crc,
            # a chunk of log no larger than a batch: one batch's worth of log held at a time
            "chunk_bytes": min(opts.batch_bytes, 16 << 20),
        },
    )


def read_task(pieces: Sequence[LogSlice], opts: Options,
              tables: Callable[..., Iterator[RecordTable]] | None = None) -> Iterator[Any]:
    """Yield the records of every slice of one task, one slice after the other (with the root
    columns, :attr:`Options.root_columns`, each batch with its slice's root and cluster id;
    ``tables``: how each log's tables are read, as for :func:`kbatch.arrow.log_batches`)."""
    for piece in pieces:
        if opts.root_columns:
            yield from (with_root(b, piece.root, piece.cluster_id) for b in read_slice(piece, opts, tables))
        else:
            yield from read_slice(piece, opts, tables)


def env_pythonpath() -> str:
    """The directory kbatch is imported from (for PYTHONPATH of Spark's Python workers)."""
    return str(Path(__file__).resolve().parents[2])  # kbatch/plan/_read.py -> the folder holding kbatch/
