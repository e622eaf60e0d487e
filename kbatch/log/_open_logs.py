"""Every partition directory under a ``log.dirs`` root or a backup, opened: :func:`open_logs`.

Provides :func:`open_logs` and its :data:`Replicas` choice: the partition directories found
(``kbatch.log._discover``), the small objects each reads at open and each root's checkpoint
files fetched together (a remote root), one :class:`LogDir` (:mod:`kbatch.log._logdir`) each,
and of a partition found in several roots the replicas chosen (``kbatch.log._replicas``). The
public face is :mod:`kbatch.log`.
"""

from __future__ import annotations

import itertools
import logging
import os
import posixpath
from collections.abc import Container
from pathlib import Path, PurePosixPath
from typing import Any, Final, Literal

from kbatch import storage
from kbatch.errors import LayoutError

from . import _replicas
from ._checkpoint import CHECKPOINT_FILES, remember_remote
from ._discover import SEGMENT_NAME, deeper_roots, find_partitions, logs_deeper, partition_name
from ._logdir import LogDir

logger = logging.getLogger("kbatch.log")

Replicas = Literal["best", "all"]
_SIDE_SUFFIXES: Final = (".index", ".timeindex", ".txnindex", ".rsm-manifest", ".indexes")


def _is_side_file(e: storage.Entry) -> bool:
    name = posixpath.basename(e.path)
    return e.size <= 16 << 20 and (name.endswith(_SIDE_SUFFIXES) or name in ("partition.metadata",
                                                                             "leader-epoch-checkpoint"))


def _nothing_found(loc: storage.Location) -> None:
    """Raise :class:`LayoutError` when ``open_logs`` found no partition directory right in
    ``loc`` and a mistake is likely: ``loc`` is a partition directory itself, or holds Kafka
    logs only deeper down. Otherwise (an empty folder, a root with no partition yet) return."""
    if loc.fs is None:
        names = [e.name for e in Path(loc.path).iterdir() if e.is_file()]
    else:
        names = [posixpath.basename(e.path) for e in storage.list_files(loc) if not e.is_dir]
    if any(SEGMENT_NAME.match(n) for n in names):
        raise LayoutError(f"{loc.url} is a partition directory, not a log.dirs root: open it with "
                          f"open_log({loc.url!r})", url=loc.url)
    deeper = deeper_roots(loc)
    if deeper:
        raise logs_deeper(loc.url, deeper, "open_logs(..., recursive=True)")


def open_logs(
    root: str | os.PathLike[str],
    topics: Container[str] | None = None,
    notes: list[str] | None = None,
    *,
    recursive: bool = False,
    replicas: Replicas = "best",
    verify_replicas: bool = True,
    on_disagreement: Literal["raise", "note"] = "raise",
    filesystem: Any = None,
    storage_options: dict[str, Any] | None = None,
) -> list[LogDir]:
    """Every partition directory under a ``log.dirs`` root (or a whole backup), by topic then partition.

    Parameters
    ----------
    root : str or Path
        A local path, ``file://`` or a URL (``s3://bucket/backup``, ...), as :func:`open_log`.
    topics : sequence of str (or any container of names), optional
        Only these topics: the directories of others are not opened (nor compared as
        replicas, nor noted).
    notes : list, optional
        Receives what was skipped and why, and the replica choices.
    recursive : bool, default False
        Search at any depth (a folder holding several ``log.dirs`` roots: one per
        broker, one per disk). Finding nothing then raises ``FileNotFoundError``
        saying what was there.
    replicas : {"best", "all"}
        A partition found in several roots is several replicas of one log when the
        roots' ``cluster.id`` (``meta.properties``) and the copies' topic ids
        (``partition.metadata``) are the same; otherwise these are different logs
        (another cluster, a topic created again) and every one is opened, with a note
        (each :class:`LogDir`'s ``root`` and ``cluster_id`` tell them apart; an id
        missing on one side only counts as different). Of the replicas of one log,
        ``"best"`` opens the one with the highest log end offset (ties: the newest leader
        epoch, then the first root) and notes the others; ``"all"`` opens every copy.
    verify_replicas : bool, default True
        Check that replicas agree where their offsets overlap (same batch CRCs at the
        same offsets; reads every replica's batch headers).
    on_disagreement : {"raise", "note"}
        Replicas that disagree raise :class:`~kbatch.errors.ReplicasDisagreeError`
        naming the partition, the offset and both copies; ``"note"`` opens the best copy
        and says so in ``notes`` (logged as a warning when ``notes`` is not given). With
        ``replicas="all"`` a disagreement is a note.
    filesystem, storage_options
        As :func:`open_log`. A remote root is listed in one call, whatever its depth.

    Returns
    -------
    list of LogDir
        Empty for an empty folder or a ``log.dirs`` root with no partition yet, or when
        ``topics`` selects none (an honest empty).

    Raises
    ------
    LayoutError
        Not recursive, no partition directory in ``root``, and ``root`` is a partition
        directory itself (use :func:`open_log`) or holds Kafka logs deeper down (the
        message names them; use ``recursive=True``).
    ReplicasDisagreeError
        Replicas of one log disagree and ``on_disagreement="raise"``.

    Directories ending in ``-delete``, ``-future`` or ``-stray`` are skipped
    (and said so in ``notes`` and the ``kbatch.log`` logger).

    >>> import kbatch, tempfile
    >>> from kbatch.log import LogWriter, open_logs
    >>> root = tempfile.mkdtemp()
    >>> for topic, p in [("b", 0), ("a", 1), ("a", 0)]:
    ...     LogWriter(root, topic, p).close()
    >>> [(d.topic, d.partition) for d in open_logs(root)]
    [('a', 0), ('a', 1), ('b', 0)]
    >>> [d.partition for d in open_logs(root, topics=["a"])]
    [0, 1]
    """
    if replicas not in ("best", "all"):
        raise ValueError(f"replicas must be 'best' or 'all', got {replicas!r}")
    said: list[str] = []
    loc = storage.locate(root, filesystem, storage_options)
    found, seen = find_partitions(loc, recursive, said)
    if not found and not recursive:
        _nothing_found(loc)
    chosen = [f for f in found if topics is None or partition_name(PurePosixPath(f.location.path))[0] in topics]
    if loc.fs is not None and chosen:
        # the small objects every LogDir reads at open, and each root's checkpoint files,
        # fetched concurrently
        roots = {f.root_files[0].path: f.root_files for f in chosen if f.root_files is not None}
        flat = [e for f in chosen for e in f.listing or ()]
        flat = storage.prefetch(loc.fs, (loc.path, loc.url), flat + [e for _, es in roots.values() for e in es],
                                 lambda e: True if posixpath.basename(e.path) in CHECKPOINT_FILES else _is_side_file(e))
        k = 0
        for i, f in enumerate(chosen):
            n = len(f.listing or ())
            chosen[i] = f._replace(listing=flat[k : k + n])
            k += n
        for root_loc, entries in roots.values():
            got = flat[k : k + len(entries)]
            k += len(entries)
            remember_remote(root_loc, {posixpath.basename(e.path): e.data for e in got if e.data is not None})
    out = []
    for f in chosen:
        log = LogDir(f.location, listing=f.listing)
        log.root = f.root
        out.append(log)
    if recursive and not found:
        raise FileNotFoundError(f"no partition directory (<topic>-<partition> holding segments) found: {seen}")
    out.sort(key=lambda d: (d.topic, d.partition, d.root))
    disagree: list[str] = []
    if len({(d.topic, d.partition) for d in out}) < len(out):
        out, replica_notes = _replicas.choose(out, keep_all=replicas == "all", verify=verify_replicas,
                                              on_disagreement=on_disagreement)
        said.extend(replica_notes)
        disagree = [n for n in replica_notes if "replicas disagree" in n]
    if loc.fs is not None:
        for a, b in itertools.pairwise(out):
            a.read_next(b)  # downloading the next log overlaps decoding this one's end
    for note in said:
        if note in disagree and notes is None:
            logger.warning(note)  # the caller collects no notes: said once, here
        else:
            logger.info(note)
    if notes is not None:
        notes.extend(said)
    return out
