"""kbatch index: build the time index of every segment under ROOT, for scans with a time window.

``kbatch index ROOT [--index-dir DIR] [--recursive] [--storage-option KEY=VALUE] [--progress ...]``
walks every batch of every segment of every partition under ROOT (a ``log.dirs`` root, a backup
of several with ``--recursive``, or one partition directory; local or ``s3://``) and writes
each segment's time index (:mod:`kbatch.log._timeindex`: every batch's least and greatest record
timestamp) into the index folder (``--index-dir``, else ``$KBATCH_INDEX_DIR``, else the user's
cache folder; never beside the segments), where later scans (``scan_records``, the Polars and
DuckDB scans) find it and read only the batches a time window needs. The first such scan
builds it too, as it goes; this builds it ahead of time. A segment whose index is complete and
still matches it is not read again; a segment changed since is indexed anew.

Status 0 with a one-line summary (segments indexed, batches, bytes, time); 2 for a user mistake
(no such ROOT, no partition under it, an index folder that cannot be written, a bad option),
1 for a log that cannot be read.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from kbatch import storage
from kbatch._progress import Progress, plural, size
from kbatch.errors import KBatchError, LayoutError
from kbatch.log import build_time_index, default_index_dir, open_log, open_logs

__all__ = ["add_arguments", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``kbatch index``'s arguments to ``parser``."""
    parser.add_argument("root", metavar="ROOT", help="a log.dirs root, a backup (--recursive) or a partition "
                                                    "directory: a path or a URL (s3://...)")
    parser.add_argument("--index-dir", default=None, metavar="DIR",
                        help="where the index files go (default $KBATCH_INDEX_DIR, else the user's cache folder, "
                             "~/.cache/kbatch)")
    parser.add_argument("--recursive", action="store_true",
                        help="find partitions at any depth under ROOT (a backup of several log.dirs roots)")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of pyarrow's filesystem for ROOT's URL scheme, e.g. "
                             "endpoint_override=http://127.0.0.1:9000 (repeatable)")
    parser.add_argument("--progress", choices=("auto", "always", "never"), default="auto",
                        help="the in-place progress line: auto (when stderr is a terminal), always, never")
    parser.add_argument("-q", "--quiet", action="store_true", help="print nothing but errors")


def _logs(root: str, recursive: bool, options: dict[str, Any]) -> list[Any]:
    """The partitions under ``root`` (``root`` itself when it is one)."""
    try:
        logs = open_logs(root, recursive=recursive, storage_options=options or None)
    except LayoutError as exc:  # a partition directory, or partitions deeper down (the message says)
        try:
            return [open_log(root, storage_options=options or None)]
        except LayoutError:
            raise ValueError(str(exc)) from None
    if not logs:
        raise ValueError(f"{root}: no partition directory (<topic>-<partition> holding segments) under it"
                         + ("" if recursive else "; --recursive looks deeper"))
    return logs


def _writable(folder: str) -> None:
    """Raise ValueError unless ``folder`` can be created and written."""
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".kbatch-index-probe-{os.getpid()}")
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as exc:
        raise ValueError(f"the index folder {folder} cannot be written: {exc.strerror or exc}") from None


def run(args: argparse.Namespace) -> int:
    """Run ``kbatch index``; print the summary; return the exit status."""
    t0 = time.perf_counter()
    try:
        options = storage.parse_options(args.storage_option)
        if not storage.is_remote(args.root) and not os.path.isdir(args.root):
            raise ValueError(f"{args.root}: no such folder")
        folder = str(args.index_dir if args.index_dir is not None else default_index_dir())
        _writable(folder)
        logs = _logs(args.root, args.recursive, options)
    except KBatchError as exc:  # before ValueError: a kbatch error is one
        print(f"kbatch index: error: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError, RuntimeError) as exc:  # (RuntimeError: no home folder for the default)
        print(f"kbatch index: error: {exc}", file=sys.stderr)
        return 2
    total = sum(seg.size for log in logs for seg in log.segments)
    enabled = not args.quiet and (args.progress == "always" or (args.progress == "auto" and sys.stderr.isatty()))
    progress = Progress(total, enabled=enabled)
    done = 0

    def step(n: int) -> None:
        nonlocal done
        done += n
        progress.update(done)

    try:
        summary = build_time_index(logs, folder, progress=step)
    except KBatchError as exc:
        progress.close()
        print(f"kbatch index: error: {exc}", file=sys.stderr)
        return 1
    finally:
        for log in logs:
            log.close()
    progress.close()
    if summary.unwritable is not None:
        print(f"kbatch index: error: the index folder {folder} cannot be written: {summary.unwritable}",
              file=sys.stderr)
        return 2
    if not args.quiet:
        for note in summary.notes:
            print(f"kbatch index: note: {note}", file=sys.stderr)
        extra = f" ({plural(summary.up_to_date, 'segment')} up to date)" if summary.up_to_date else ""
        damage = f", {plural(summary.skipped, 'damaged range')} left out" if summary.skipped else ""
        print(f"kbatch index: {plural(summary.segments, 'segment')} indexed{extra}, "
              f"{summary.batches:,} batches, {size(summary.bytes)}{damage} "
              f"in {time.perf_counter() - t0:.1f} s into {folder}", file=sys.stderr)
    return 0
