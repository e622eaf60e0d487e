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
Names ending in ``-delete``, ``-future`` or ``-stray`` are partitions being deleted or moved:
reported, not read, not searched.

A remote tree is listed in one call (``FileSelector(recursive=True)``: one paginated listing
on object stores), whatever its depth; a local tree is walked.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Sequence
from pathlib import Path, PurePath, PurePosixPath
from typing import Final, NamedTuple

from kbatch import _storage
from kbatch._checkpoint import CHECKPOINT_FILES

__all__ = [
    "PARTITION_DIR",
    "SEGMENT_NAME",
    "SKIPPED_DIRS",
    "TIERED_TOPIC_DIR",
    "Found",
    "find_partitions",
    "partition_name",
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

    location: _storage.Location
    root: str
    listing: Sequence[_storage.Entry] | None
    #: (remote) the root's checkpoint files in the listing: ``Location`` of the root, entries
    root_files: tuple[_storage.Location, Sequence[_storage.Entry]] | None = None


def _holds_partition_files(names: Sequence[str]) -> bool:
    return any(SEGMENT_NAME.match(n) or n in _METADATA_FILES for n in names)


def find_partitions(
    root: _storage.Location, recursive: bool, notes: list[str]
) -> tuple[list[Found], str]:
    """Partition directories under ``root`` and a sentence saying what the search saw.

    Not recursive: the directories right under ``root`` named ``<topic>-<partition>`` (and,
    for tiered storage, ``<topic>-<topic id>/<partition>``). Recursive: every directory at any
    depth named as a partition that holds partition files. Skipped ones are said in ``notes``.
    """
    if root.fs is None:
        return _find_local(root, recursive, notes)
    entries = _storage.list_files(root, recursive=True)
    by_dir: dict[str, list[_storage.Entry]] = {}
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
        elif depth != (2 if tiered else 1):
            continue
        if any(rel.startswith(f.location.path[len(root.path) + 1 :] + "/") for f in found):
            continue  # inside a partition directory already found
        root_path = posixpath.dirname(posixpath.dirname(d) if tiered else d)
        loc = _storage.Location(root.fs, d, f"{root.url}/{rel}")
        root_url = _root_url(root, root_path)
        checkpoints = [e for e in by_dir.get(root_path, []) if posixpath.basename(e.path) in CHECKPOINT_FILES]
        found.append(Found(loc, root_url, by_dir.get(d, []),
                           (_storage.Location(root.fs, root_path, root_url), checkpoints)))
    files = sum(1 for e in entries if not e.is_dir)
    seen = f"{files} files in {len(dirs)} directories under {root.url}"
    return found, seen


def _root_url(root: _storage.Location, path: str) -> str:
    if path == root.path or not path.startswith(root.path):
        return root.url
    return root.url + path[len(root.path) :]


def _find_local(root: _storage.Location, recursive: bool, notes: list[str]) -> tuple[list[Found], str]:
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
            if PARTITION_DIR.match(entry.name):
                found.append(Found(_storage.Location(None, str(entry), str(entry)), str(top), None))
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
            found.append(Found(_storage.Location(None, here, here), str(parent), None))
    return found, f"{nfiles} files in {ndirs} directories under {top}"
