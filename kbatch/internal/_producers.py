"""Producer state from the ``.snapshot`` files of partition directories, as a table."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from kbatch.errors import KBatchError, UnsupportedError
from kbatch.log import LogDir, read_snapshot, topics_in
from kbatch.storage import is_remote

from ._sources import not_a_root

__all__ = ["directories", "producer_snapshots"]

_PARTITION = re.compile(r"(.+)-(\d+)")
_SNAPSHOT = re.compile(r"(\d{20})\.snapshot")


def directories(source: Any) -> list[Path]:
    """The partition directories of ``source``: one partition directory, a ``log.dirs`` root,
    a :class:`LogDir` or a list of them (what ``open_logs`` returns). A folder holding no
    partition directory at all is not a root: :class:`LayoutError` saying what it holds."""
    if isinstance(source, (list, tuple)) and all(isinstance(d, LogDir) for d in source):
        return [p for d in source for p in directories(d)]
    if isinstance(source, LogDir) and source.location.fs is None:
        return [Path(source.path)]
    if isinstance(source, LogDir) or is_remote(source):
        where = getattr(source, "url", source)
        raise UnsupportedError(f"remote roots are not supported by producer_snapshots yet: {where}")
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"expected a path, a LogDir or a list of them, not {type(source).__name__}")
    path = Path(source)
    if not path.is_dir():
        raise FileNotFoundError(f"not a directory: {path}")
    if _PARTITION.fullmatch(path.name) and any(_SNAPSHOT.fullmatch(p.name) or p.suffix == ".log"
                                               for p in path.iterdir()):
        return [path]
    if not topics_in(path):  # "broker-1/" holding a root is no partition: the same test as open_logs
        raise not_a_root(path, "partition directory")
    return sorted(p for p in path.iterdir() if p.is_dir() and _PARTITION.fullmatch(p.name))


def producer_snapshots(source: Any, *, history: bool = False) -> Any:
    """The producer state of partitions, from their ``<offset>.snapshot`` files.

    Parameters
    ----------
    source : path, LogDir or list of LogDir
        A partition directory, a ``log.dirs`` root (every partition in it), or what
        ``open_logs`` returns. A folder that holds no partition directory raises
        :class:`~kbatch.errors.LayoutError` (not an empty table).
    history : bool, default False
        Every snapshot file of each partition instead of its latest one (the
        one a broker loads).

    Returns
    -------
    pyarrow.Table
        One row per producer: ``topic``, ``partition``, ``snapshot_offset``,
        ``producer_id`` (int64), ``producer_epoch`` (int16),
        ``last_sequence`` (int32), ``last_offset`` (int64, null: no data
        batch), ``offset_delta`` (int32), ``timestamp`` (timestamp[ms]),
        ``coordinator_epoch`` (int32, -1 none), ``current_txn_first_offset``
        (int64, null: no open transaction).

    Raises
    ------
    KBatchError
        A corrupt snapshot file (the error names the file).

    Examples
    --------
    >>> import kbatch, tempfile
    >>> root = tempfile.mkdtemp()
    >>> with kbatch.LogWriter(root, "t", 0) as w:
    ...     _ = w.append(kbatch.encode([b"a", b"b"], producer_id=7, producer_epoch=1, base_sequence=0,
    ...                                transactional=True, timestamps=[5, 6]))
    >>> row = producer_snapshots(root).to_pylist()[0]
    >>> row["snapshot_offset"], row["producer_id"], row["last_sequence"], row["current_txn_first_offset"]
    (2, 7, 1, 0)
    """
    import pyarrow as pa

    tables = []
    for directory in directories(source):
        m = _PARTITION.fullmatch(directory.name)
        topic, partition = (m.group(1), int(m.group(2))) if m else (directory.name, -1)
        files = sorted((int(s.group(1)), p) for p in directory.iterdir() if (s := _SNAPSHOT.fullmatch(p.name)))
        if not history:
            files = files[-1:]
        for offset, path in files:
            try:
                e = read_snapshot(path.read_bytes())
            except KBatchError as exc:
                raise exc.with_context(path) from exc
            n = len(e)
            tables.append(pa.table({
                "topic": pa.array([topic] * n, pa.string()),
                "partition": pa.array(np.full(n, partition, np.int32)),
                "snapshot_offset": pa.array(np.full(n, offset, np.int64)),
                "producer_id": pa.array(e["producer_id"]),
                "producer_epoch": pa.array(e["epoch"]),
                "last_sequence": pa.array(e["last_sequence"]),
                "last_offset": pa.array(e["last_offset"], mask=e["last_offset"] < 0),
                "offset_delta": pa.array(e["offset_delta"]),
                "timestamp": pa.array(e["timestamp"], pa.timestamp("ms", tz="UTC")),
                "coordinator_epoch": pa.array(e["coordinator_epoch"]),
                "current_txn_first_offset": pa.array(e["current_txn_first_offset"],
                                                     mask=e["current_txn_first_offset"] < 0),
            }))
    if not tables:
        ms = pa.timestamp("ms", tz="UTC")
        return pa.schema([("topic", pa.string()), ("partition", pa.int32()), ("snapshot_offset", pa.int64()),
                          ("producer_id", pa.int64()), ("producer_epoch", pa.int16()), ("last_sequence", pa.int32()),
                          ("last_offset", pa.int64()), ("offset_delta", pa.int32()), ("timestamp", ms),
                          ("coordinator_epoch", pa.int32()), ("current_txn_first_offset", pa.int64())]).empty_table()
    return pa.concat_tables(tables)
