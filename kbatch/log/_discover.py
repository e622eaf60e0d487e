"""Finding partition directories: under one ``log.dirs`` root, or at any depth under a backup.

Names recognised (a broker's, and KIP-405 tiered storage's as the open-source plugins write
object keys, e.g. Aiven's ``ObjectKeyFactory``)::

    <log.dirs root>/<topic>-<partition>/<20-digit base offset>.log (+ .index, .timeindex, ...)
    <prefix>/<topic>-<topic id>/<partition>/<20-digit base offset>-<segment id>.log
        + .index .timeindex .txnindex .snapshot .leader-epoch-checkpoint (one per segment)
        + .rsm-manifest (the plugin's: chunking, compression, encryption of the .log object)
        + .indexes (the plugin's: the index files concatenated, ranges in the manifest)
      topic id and segment id: Kafka Uuids in base64url without padding (22 characters)

A directory counts, when searching at any depth, if it is named as a partition and holds a
segment or a partition's metadata files; one that holds only directories is searched further.
Right under a root, one named as a partition counts unless it holds directories and no
partition file (``broker-1/`` holding a ``log.dirs`` root is not partition 1 of ``broker``).
Names ending in ``-delete``, ``-future`` or ``-stray`` are partitions being deleted or moved:
reported, not read, not searched.

A remote tree is listed in one call (``FileSelector(recursive=True)``: one paginated listing
on object stores), whatever its depth; a local tree is walked.

When a search finds nothing, or a partition directory holds no segment, the words that say
what is there instead are made here, once, for the Python API, the Spark source and the command
line (each names its own option): :func:`logs_deeper`, :func:`misnamed_logs`, :func:`topics_in`.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from pathlib import Path, PurePath, PurePosixPath
from typing import Final, NamedTuple

from kbatch import storage
from kbatch._progress import plural
from kbatch.errors import LayoutError

from ._checkpoint import CHECKPOINT_FILES

__all__ = [
    "PARTITION_DIR",
    "SEGMENT_NAME",
    "SKIPPED_DIRS",
    "TIERED_TOPIC_DIR",
    "Found",
    "deeper_roots",
    "describe_topics",
    "find_partitions",
    "logs_deeper",
    "misnamed_logs",
    "partition_name",
    "topics_in",
]

SEGMENT_NAME: Final = re.compile(r"^(\d{20})(?:-([A-Za-z0-9_-]{22}))?\.log$")
PARTITION_DIR: Final = re.compile(r"^(.+)-(\d+)$")
TIERED_TOPIC_DIR: Final = re.compile(r"^(.+)-([A-Za-z0-9_-]{22})$")
SKIPPED_DIRS: Final = ("-delete", "-future", "-stray")
_METADATA_FILES: Final = ("partition.metadata", "leader-epoch-checkpoint")


def partition_name(path: PurePath) -> tuple[str, int, str | None]:
    """(topic, partition, topic id or None) a partition directory's path says.

    ``<topic>-<partition>`` (a broker's ``log.dirs``), or ``<topic>-<topic id>/<partition>``
    (KIP-405 tiered storage, as the plugins lay objects out).

    >>> partition_name(Path("/data/orders-3"))
    ('orders', 3, None)
    >>> partition_name(PurePosixPath("bucket/orders-MWJ6FHTfRYy67jzwZdeqSQ/7"))
    ('orders', 7, 'MWJ6FHTfRYy67jzwZdeqSQ')
    """
    m = PARTITION_DIR.match(path.name)
    if m:
        return m.group(1), int(m.group(2)), None
    t = TIERED_TOPIC_DIR.match(path.parent.name)
    if path.name.isdigit() and t:
        return t.group(1), int(path.name), t.group(2)
    return path.name, -1, None


def _is_partition(path: PurePath) -> bool:
    return partition_name(path)[1] >= 0


class Found(NamedTuple):
    """A partition directory found: where it is, the root holding it, its listing (remote)."""

    location: storage.Location
    root: str
    listing: Sequence[storage.Entry] | None
    #: (remote) the root's checkpoint files in the listing: ``Location`` of the root, entries
    root_files: tuple[storage.Location, Sequence[storage.Entry]] | None = None


def _holds_partition_files(names: Sequence[str]) -> bool:
    return any(SEGMENT_NAME.match(n) or n in _METADATA_FILES for n in names)


def find_partitions(
    root: storage.Location, recursive: bool, notes: list[str]
) -> tuple[list[Found], str]:
    """Partition directories under ``root`` and a sentence saying what the search saw.

    Not recursive: the directories right under ``root`` named ``<topic>-<partition>`` (and,
    for tiered storage, ``<topic>-<topic id>/<partition>``). Recursive: every directory at any
    depth named as a partition that holds partition files. Skipped ones are said in ``notes``.
    """
    if root.fs is None:
        return _find_local(root, recursive, notes)
    entries = storage.list_files(root, recursive=True)
    by_dir: dict[str, list[storage.Entry]] = {}
    dirs: set[str] = set()
    for e in entries:
        parent = posixpath.dirname(e.path)
        by_dir.setdefault(parent, []).append(e)
        if e.is_dir:
            dirs.add(e.path)
        # object stores list objects, not directories: every prefix of a key is one
        while parent != root.path and parent.startswith(root.path + "/") and parent not in dirs:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    found: list[Found] = []
    skipped: set[str] = set()
    parents = {posixpath.dirname(d) for d in dirs}  # the directories holding directories
    for d in sorted(dirs):
        rel = d[len(root.path) + 1 :]
        if any(rel.startswith(s + "/") for s in skipped):
            continue
        path = PurePosixPath(d)
        if path.name.endswith(SKIPPED_DIRS):
            skipped.add(rel)
            notes.append(f"skipped {root.url}/{rel} (a partition being deleted or moved)")
            continue
        if not _is_partition(path):
            continue
        depth = rel.count("/") + 1
        names = [posixpath.basename(e.path) for e in by_dir.get(d, []) if not e.is_dir]
        tiered = PARTITION_DIR.match(path.name) is None
        if recursive:
            if not _holds_partition_files(names):
                continue
        elif depth != (2 if tiered else 1) or (d in parents and not _holds_partition_files(names)):
            continue
        if any(rel.startswith(f.location.path[len(root.path) + 1 :] + "/") for f in found):
            continue  # inside a partition directory already found
        root_path = posixpath.dirname(posixpath.dirname(d) if tiered else d)
        loc = storage.Location(root.fs, d, f"{root.url}/{rel}")
        root_url = _root_url(root, root_path)
        checkpoints = [e for e in by_dir.get(root_path, []) if posixpath.basename(e.path) in CHECKPOINT_FILES]
        found.append(Found(loc, root_url, by_dir.get(d, []),
                           (storage.Location(root.fs, root_path, root_url), checkpoints)))
    files = sum(1 for e in entries if not e.is_dir)
    seen = f"{files} files in {len(dirs)} directories under {root.url}"
    return found, seen


def _root_url(root: storage.Location, path: str) -> str:
    if path == root.path or not path.startswith(root.path):
        return root.url
    return root.url + path[len(root.path) :]


def _partition_like(folder: Path) -> bool:
    """Whether a local folder named as a partition is one: it holds partition files, or no
    directory (an empty partition)."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return True  # LogDir says what is wrong with it
    return _holds_partition_files([e.name for e in entries]) or not any(e.is_dir() for e in entries)


def _find_local(root: storage.Location, recursive: bool, notes: list[str]) -> tuple[list[Found], str]:
    top = Path(root.path)
    if not top.is_dir():
        raise FileNotFoundError(f"not a directory: {top}")
    found: list[Found] = []
    ndirs = nfiles = 0
    if not recursive:
        for entry in sorted(top.iterdir()):
            ndirs += entry.is_dir()
            nfiles += not entry.is_dir()
            if not entry.is_dir():
                continue
            if entry.name.endswith(SKIPPED_DIRS):
                notes.append(f"skipped {entry} (a partition being deleted or moved)")
                continue
            if PARTITION_DIR.match(entry.name) and _partition_like(entry):
                found.append(Found(storage.Location(None, str(entry), str(entry)), str(top), None))
        return found, f"{nfiles} files and {ndirs} directories in {top}"
    for here, subdirs, files in os.walk(top):
        ndirs += 1
        nfiles += len(files)
        subdirs.sort()
        keep = []
        for name in subdirs:
            if name.endswith(SKIPPED_DIRS):
                notes.append(f"skipped {os.path.join(here, name)} (a partition being deleted or moved)")
            else:
                keep.append(name)
        subdirs[:] = keep
        path = Path(here)
        if here != str(top) and _is_partition(path) and _holds_partition_files(files):
            subdirs[:] = []  # a partition directory holds no partitions
            tiered = PARTITION_DIR.match(path.name) is None
            parent = path.parent.parent if tiered else path.parent
            found.append(Found(storage.Location(None, here, here), str(parent), None))
    return found, f"{nfiles} files in {ndirs} directories under {top}"


# ---------------------------------------------------------------------------------------------
# Saying what is there when nothing was found


def misnamed_logs(url: str, names: Sequence[str], skipped: bool) -> str | None:
    """What to say of the ``.log`` files in ``names`` not named as segments (None: there are none).

    ``skipped``: the directory has segments too, so they are only noted; otherwise reading it
    would give nothing and the sentence is an error's.

    >>> print(misnamed_logs("/d/t-0", ["00000000000000000000.log", "server.log"], True))
    ... # doctest: +NORMALIZE_WHITESPACE
    skipped server.log: not named as a segment
    (<20-digit base offset>.log, or tiered <20 digits>-<segment id>.log)
    """
    odd = sorted(n for n in names if n.endswith(".log") and not SEGMENT_NAME.match(n))
    if not odd:
        return None
    shown = ", ".join(odd[:5]) + (f" and {len(odd) - 5} more" if len(odd) > 5 else "")
    rule = "<20-digit base offset>.log, or tiered <20 digits>-<segment id>.log"
    if skipped:
        return f"skipped {shown}: not named as a segment ({rule})"
    return f"{url} holds no segment: its .log files ({shown}) are not named as segments ({rule})"


def topics_in(folder: Path, recursive: bool = False) -> dict[str, int]:
    """Topic -> number of partition directories (named ``<topic>-<partition>``, not being
    deleted or moved, as :func:`find_partitions` counts them) right in a local ``folder``;
    ``{}`` when it cannot be listed. ``recursive``: at any depth, as a recursive search finds
    them, each partition number counted once (replicas under several roots are one partition)."""
    topics: dict[str, int] = {}
    if recursive:
        try:
            found, _ = find_partitions(storage.locate(str(folder)), True, [])
        except (OSError, LayoutError):
            return topics
        numbers: dict[str, set[int]] = {}
        for f in found:
            topic, partition, _ = partition_name(PurePosixPath(f.location.path))
            numbers.setdefault(topic, set()).add(partition)
        return {t: len(ps) for t, ps in sorted(numbers.items())}
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return topics
    for e in entries:
        m = PARTITION_DIR.match(e.name)
        if m and not e.name.endswith(SKIPPED_DIRS) and e.is_dir() and _partition_like(e):
            topics[m.group(1)] = topics.get(m.group(1), 0) + 1
    return topics


def describe_topics(topics: dict[str, int]) -> str:
    """``"legacy: 1 partition, orders: 3 partitions"``."""
    return ", ".join(f"{t}: {plural(n, 'partition')}" for t, n in sorted(topics.items()))


def deeper_roots(root: storage.Location, limit: int = 4, depth: int = 4) -> list[str]:
    """Folders below ``root`` (not ``root`` itself) holding partition directories, the first
    ``limit`` found: breadth first, at most ``depth`` levels down locally (a remote tree is
    listed whole, in one call). What a recursive search would read."""
    if root.fs is not None:
        found, _ = find_partitions(root, True, [])
        roots = list(dict.fromkeys(f.root for f in found if f.root.rstrip("/") != root.url.rstrip("/")))
        return roots[:limit]
    out: list[str] = []
    level = [Path(root.path)]
    for _ in range(depth):
        nxt = []
        for folder in level:
            try:
                subs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
            except OSError:
                continue
            for sub in subs:
                if _holds_partitions(sub):
                    out.append(str(sub))
                    if len(out) >= limit:
                        return out
                elif not sub.name.endswith(SKIPPED_DIRS):
                    nxt.append(sub)
        level = nxt[:200]
    return out


def _holds_partitions(folder: Path) -> bool:
    """Whether a local folder has a partition directory holding partition files right in it."""
    try:
        subs = [p for p in folder.iterdir() if _is_partition(p) and not p.name.endswith(SKIPPED_DIRS)]
    except OSError:
        return False
    for sub in subs:
        try:
            if sub.is_dir() and _holds_partition_files([f.name for f in sub.iterdir()]):
                return True
        except OSError:
            continue
    return False


def logs_deeper(url: str, deeper: Sequence[str], option: str | None) -> LayoutError:
    """The error for a folder with no partition directory in it but Kafka logs further down.

    ``option`` is how the caller searches at any depth (``recursive=True``, ``--recursive``, ...),
    None when it cannot.

    >>> print(logs_deeper("/backup", ["/backup/b1/kafka-logs"], "recursive=True"))  # doctest: +NORMALIZE_WHITESPACE
    no partition directories in /backup; found Kafka logs under /backup/b1/kafka-logs:
    pass that folder, or recursive=True to read every log below /backup
    """
    shown = ", ".join(deeper[:3]) + (" and more" if len(deeper) > 3 else "")
    which = "that folder" if len(deeper) == 1 else "one of them"
    how = f"pass {which}" + (f", or {option} to read every log below {url}" if option else "")
    return LayoutError(f"no partition directories in {url}; found Kafka logs under {shown}: {how}",
                       url=url, deeper=deeper)
