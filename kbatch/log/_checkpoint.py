"""The broker's offset checkpoint files at a ``log.dirs`` root: read (as hints) and written.

Grammar (Kafka's ``OffsetCheckpointFile`` over ``CheckpointFile``; text, one item per line)::

    <root>/log-start-offset-checkpoint          where each partition starts (DeleteRecords,
                                                retention); the broker starts a log at
                                                max(this, its first segment's base offset)
    <root>/recovery-point-offset-checkpoint     offsets up to which each log was flushed
    <root>/replication-offset-checkpoint        high watermarks
    <root>/cleaner-offset-checkpoint            compacted logs: the cleaner's first dirty offset

        version     "0"
        count       the number of entry lines that follow
        entries     "<topic> <partition> <offset>", separated by whitespace

    The broker writes ``<file>.tmp`` then renames it over ``<file>``; a missing file is
    empty. A wrong version, a malformed line or a count that does not match the entries
    makes the broker refuse the file; here it is ignored with a note instead.

These files are hints: :class:`kbatch.log.LogDir` checks each offset against its log and
notes the ones outside it rather than trusting them.

>>> import tempfile, pathlib
>>> root = pathlib.Path(tempfile.mkdtemp())
>>> update_checkpoint(root / LOG_START, {("orders", 0): 5, ("orders", 1): 0})
>>> print((root / LOG_START).read_text(), end="")
0
2
orders 0 5
orders 1 0
>>> read_checkpoint(root / LOG_START)[("orders", 0)]
5
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from kbatch.storage import Location, join, read_small

__all__ = [
    "CHECKPOINT_FILES",
    "CLEANER",
    "HIGH_WATERMARK",
    "LOG_START",
    "RECOVERY_POINT",
    "parse_checkpoint",
    "read_checkpoint",
    "remember_remote",
    "remote_root_checkpoints",
    "root_checkpoints",
    "update_checkpoint",
]

LOG_START: Final = "log-start-offset-checkpoint"
RECOVERY_POINT: Final = "recovery-point-offset-checkpoint"
HIGH_WATERMARK: Final = "replication-offset-checkpoint"
CLEANER: Final = "cleaner-offset-checkpoint"
#: File name -> the short name :attr:`kbatch.log.LogDir.checkpoints` uses.
CHECKPOINT_FILES: Final = {
    LOG_START: "log_start_offset",
    RECOVERY_POINT: "recovery_point",
    HIGH_WATERMARK: "high_watermark",
    CLEANER: "cleaner_offset",
}

Entries = dict[tuple[str, int], int]


def read_checkpoint(path: str | os.PathLike[str]) -> Entries:
    """``{(topic, partition): offset}`` of one checkpoint file ({} when it is missing).

    Raises
    ------
    ValueError
        A version other than 0, a malformed line, or a count that does not match.
    """
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ValueError(f"{Path(path).name} is unreadable: {exc}") from None
    return parse_checkpoint(Path(path).name, raw)


def parse_checkpoint(name: str, raw: bytes) -> Entries:
    """``{(topic, partition): offset}`` of a checkpoint file's bytes (``name`` for errors).

    >>> parse_checkpoint(LOG_START, b"0\\n1\\norders 0 5\\n")
    {('orders', 0): 5}

    Raises
    ------
    ValueError
        Not UTF-8, a version other than 0, a malformed line, or a count that does not match.
    """
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{name} is unreadable: {exc}") from None
    lines = text.splitlines()
    if not lines:
        return {}
    if lines[0].strip() != "0":
        raise ValueError(f"{name} has version {lines[0].strip()!r}, expected 0")
    if len(lines) < 2:
        return {}
    try:
        count = int(lines[1])
    except ValueError:
        raise ValueError(f"{name}: malformed count line {lines[1]!r}") from None
    out: Entries = {}
    for line in lines[2:]:
        parts = line.split()
        if len(parts) != 3:
            raise ValueError(f"{name}: malformed line {line!r}")
        try:
            out[(parts[0], int(parts[1]))] = int(parts[2])
        except ValueError:
            raise ValueError(f"{name}: malformed line {line!r}") from None
    if len(lines) - 2 != count:
        raise ValueError(f"{name} says {count} entries but has {len(lines) - 2}")
    return out


_cache: dict[str, tuple[tuple[tuple[int, int, int], ...], dict[str, Entries], list[str]]] = {}
_lock = threading.Lock()


def root_checkpoints(root: str | os.PathLike[str]) -> tuple[dict[str, Entries], list[str]]:
    """Every checkpoint file of a ``log.dirs`` root, by file name, and notes on unusable ones.

    Cached per root while the files' inodes, sizes and modification times stay the same
    (the broker and :func:`update_checkpoint` replace a file by renaming a new one), so that
    opening every partition of a root reads each file once.
    """
    root = Path(root)
    stamps = []
    for name in CHECKPOINT_FILES:
        try:
            st = (root / name).stat()
            stamps.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            stamps.append((-1, -1, -1))
    key = str(root)
    with _lock:
        hit = _cache.get(key)
    if hit is not None and hit[0] == tuple(stamps):
        return hit[1], hit[2]
    found: dict[str, Entries] = {}
    notes: list[str] = []
    for name, stamp in zip(CHECKPOINT_FILES, stamps, strict=True):
        if stamp[0] < 0:
            continue
        try:
            found[name] = read_checkpoint(root / name)
        except ValueError as exc:
            notes.append(f"{exc}: ignored")
    with _lock:
        _cache[key] = (tuple(stamps), found, notes)
    return found, notes


def update_checkpoint(path: str | os.PathLike[str], entries: Mapping[tuple[str, int], int]) -> None:
    """Merge ``entries`` into a checkpoint file, as the broker writes it (temp file, rename).

    Entries already in the file for other partitions are kept; an unreadable file is replaced.
    """
    path = Path(path)
    try:
        merged = read_checkpoint(path)
    except ValueError:
        merged = {}
    merged.update({(str(t), int(p)): int(o) for (t, p), o in entries.items()})
    lines = ["0", str(len(merged))] + [f"{t} {p} {o}" for (t, p), o in sorted(merged.items())]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)


#: A remote root's parsed files: URL -> [(filesystem, (found, notes))] (filesystems compared
#: with ``equals``: one URL on two endpoints is two roots).
_remote: dict[str, list[tuple[Any, tuple[dict[str, Entries], list[str]]]]] = {}


def _parse_all(files: Mapping[str, bytes | None]) -> tuple[dict[str, Entries], list[str]]:
    found: dict[str, Entries] = {}
    notes: list[str] = []
    for name in CHECKPOINT_FILES:
        raw = files.get(name)
        if raw is None:
            continue
        try:
            found[name] = parse_checkpoint(name, raw)
        except ValueError as exc:
            notes.append(f"{exc}: ignored")
    return found, notes


def remember_remote(loc: Location, files: Mapping[str, bytes | None]) -> None:
    """Cache a remote root's checkpoint files from bytes already fetched (``open_logs`` reads
    them with its listing: ``files`` maps each file name present to its bytes; a name absent
    from the listing is absent)."""
    parsed = _parse_all(files)
    with _lock:
        entries = [(fs, v) for fs, v in _remote.get(loc.url, []) if not _same(fs, loc.fs)]
        _remote[loc.url] = [*entries, (loc.fs, parsed)]


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a.equals(b))
    except (TypeError, AttributeError):
        return False


def remote_root_checkpoints(loc: Location) -> tuple[dict[str, Entries], list[str]]:
    """:func:`root_checkpoints` of a remote root (``loc``): read once per process and root
    (one small read per file present), unless :func:`remember_remote` gave them."""
    with _lock:
        for fs, v in _remote.get(loc.url, []):
            if _same(fs, loc.fs):
                return v
    files = {name: read_small(join(loc, name)) for name in CHECKPOINT_FILES}
    remember_remote(loc, files)
    return _parse_all(files)
