"""Where an internal topic's records come from: a root, a partition directory, or a RecordTable."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple

from kbatch._progress import plural
from kbatch.codec import RecordTable
from kbatch.errors import LayoutError
from kbatch.log import LogDir, deeper_roots, describe_topics, logs_deeper, open_log, open_logs, topics_in
from kbatch.storage import Location, is_remote

__all__ = ["Source", "Part", "not_a_root", "partitions", "tables"]


Source = str | os.PathLike[str] | LogDir | RecordTable


class Part(NamedTuple):
    """One partition of an internal topic: its number (-1 when unknown), its reader, and
    whether kbatch opened it (and so closes it once read)."""

    partition: int
    log: LogDir | RecordTable
    owned: bool = False


def partitions(source: Any, topic: str) -> list[Part]:
    """The partitions of ``topic`` that ``source`` holds, in partition order.

    ``source`` is a :class:`RecordTable` (one partition), a :class:`LogDir`, a list of them
    (what ``open_logs`` returns: those of ``topic``), a partition directory (``<topic>-<n>``)
    or a ``log.dirs`` root (every ``<topic>-<n>`` directory in it), as a path or a URL
    (``s3://...``: credentials as pyarrow finds them; for other options pass
    ``open_logs(url, storage_options=...)``).

    A path holding no partition of ``topic`` is :class:`LayoutError`, never an empty table: a
    ``log.dirs`` root holding other topics only (this broker has no replica of it) says which
    it holds; a folder holding no partition directory at all is not a root, said with what it
    holds (Kafka logs deeper down, named; or nothing of Kafka's). A list of logs holding none
    (what ``open_logs`` returns) is an empty list: the caller chose them.
    """
    if isinstance(source, RecordTable):
        return [Part(-1, source)]
    if isinstance(source, LogDir):
        return [Part(source.partition, source)]
    if isinstance(source, (list, tuple)) and all(isinstance(d, LogDir) for d in source):
        return sorted((Part(d.partition, d) for d in source if d.topic == topic), key=lambda p: p.partition)
    if not isinstance(source, (str, os.PathLike)):
        raise TypeError(f"expected a path, a LogDir or a RecordTable, not {type(source).__name__}")
    if is_remote(source):
        url = os.fspath(source).rstrip("/")
        if re.fullmatch(re.escape(topic) + r"-(\d+)", url.rsplit("/", 1)[-1]):
            log = open_log(url)
            return [Part(log.partition, log, True)]
        logs = open_logs(url, topics=[topic])
        if not logs:
            raise _none_of(topic, url, None)
        return [Part(d.partition, d, True) for d in logs]
    path = Path(source)
    if not path.is_dir():
        raise FileNotFoundError(f"not a directory: {path}")
    pattern = re.compile(re.escape(topic) + r"-(\d+)")
    m = pattern.fullmatch(path.name)
    if m:
        return [Part(int(m.group(1)), open_log(path), True)]
    found = []
    for entry in path.iterdir():
        m = pattern.fullmatch(entry.name)
        if m and entry.is_dir():
            found.append(Part(int(m.group(1)), open_log(entry), True))
    if not found:
        topics = topics_in(path)
        if not topics:
            raise not_a_root(path, f"{topic}-<partition> directory")
        raise _none_of(topic, str(path), topics)
    return sorted(found, key=lambda p: p.partition)


def not_a_root(path: Path, wanted: str) -> LayoutError:
    """The error for a local folder holding no ``<topic>-<partition>`` directory: the Kafka
    logs deeper down (named, with the option that reads them), or what it holds instead."""
    deeper = deeper_roots(Location(None, str(path), str(path)))
    if deeper:
        return logs_deeper(str(path), deeper, "open_logs(..., recursive=True)")
    dirs = sum(1 for e in path.iterdir() if e.is_dir())
    files = sum(1 for _ in path.iterdir()) - dirs
    return LayoutError(f"no {wanted} in {path}: it is not a log.dirs root (no <topic>-<partition> directory in "
                       f"it; {plural(files, 'file')} and {plural(dirs, 'folder')})", url=str(path))


def _none_of(topic: str, url: str, topics: dict[str, int] | None) -> LayoutError:
    """The error for a root with no partition of ``topic``."""
    said = f"no {topic}-<partition> directory in {url}" + (f" (found {describe_topics(topics)})" if topics else "")
    return LayoutError(said, url=url)


def tables(part: Part, isolation_level: Literal["read_committed", "read_uncommitted"],
           chunk_bytes: int = 64 << 20) -> Iterator[RecordTable]:
    """The records of one partition in RecordTables of about ``chunk_bytes`` of log."""
    if isinstance(part.log, RecordTable):
        yield part.log
        return
    try:
        yield from part.log.iter_tables(isolation_level=isolation_level, chunk_bytes=chunk_bytes)
    finally:
        if part.owned:
            part.log.close()
