"""kbatch compact: rewrite the small files of OUT's table into large ones, in one commit that keeps the ledger.

``kbatch compact OUT [--target-size SIZE] [--retain DURATION] [--dry-run]`` first removes what
runs no longer alive left (:func:`kbatch.tables._leftovers.recover`, as every ``kbatch convert``
does), then rewrites each partition's files smaller than ``--target-size`` (default 128M) into
files of about that size, in one commit per table that holds the same offsets ledger as before
(compaction changes no record; a later ``convert --mode append`` continues exactly once):

- **Parquet folder**: per ``topic=`` folder, swapped whole with its compacted copy after the
  ledger commit (:mod:`kbatch.tables._compact`); the old files are gone at once (``--retain``
  does not apply);
- **Delta**: deltalake's ``optimize.compact`` of each topic's table, its commit info carrying the
  ledger; with ``--retain DURATION``, then ``VACUUM`` of the files removed longer ago than that
  (never below the table's ``delta.deletedFileRetentionDuration``, 7d unless set; default: keep
  them);
- **Iceberg** (OUT's own SQLite catalog; on S3 the one ``--catalog-option uri=...`` names): per
  table, the files rewritten and their replacements in one pyiceberg transaction, its snapshot
  carrying the ledger (:mod:`kbatch.tables._compact_iceberg`); a table with delete files (kbatch
  writes none) is refused. With ``--retain DURATION``, then the snapshots older than that are
  expired (never the current one, nor those the ledger is read through) and the files only
  they referenced deleted (default: keep them).

Status 0 (one line per table: files before and after; ``--dry-run``: what would be), 2 for a
user mistake (no such OUT, not a kbatch table, a bad size or duration), 1 for a table that
cannot be read or a commit that lost to another run.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from kbatch import storage
from kbatch.errors import KBatchError
from kbatch.tables import Store, compact_out, hold, recover, release, table_format

from ._clean import parse_duration

__all__ = ["add_arguments", "parse_size", "run"]

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes of ``512k``, ``128M``, ``1g``, ``1048576`` (binary units, an optional ``B``/``iB``).

    >>> parse_size("128M"), parse_size("64MiB"), parse_size("1000")
    (134217728, 67108864, 1000)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmg]?)(?:i?b)?\s*", text, re.IGNORECASE)
    if not m or float(m.group(1)) * _UNITS[m.group(2).lower()] < 1:
        raise ValueError(f"--target-size {text!r}: a size, e.g. 128M, 512k, 1G")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT", help="the table folder kbatch convert wrote (a path or s3://)")
    parser.add_argument("--target-size", default="128M", metavar="SIZE",
                        help="the size of a compacted file; files smaller are rewritten (default 128M)")
    parser.add_argument("--retain", metavar="DURATION",
                        help="Delta: then vacuum the files removed longer ago than this; Iceberg: expire the "
                        "snapshots older than this and delete the files only they referenced (7d, 12h; "
                        "default: keep)")
    parser.add_argument("--dry-run", action="store_true", help="say what would be compacted, change nothing")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="pyarrow filesystem option of an s3:// OUT (as kbatch convert's)")
    parser.add_argument("--catalog-option", action="append", default=[], metavar="KEY=VALUE",
                        help="the Iceberg catalog of an s3:// OUT, as kbatch convert was given it (uri=...)")


def run(args: argparse.Namespace) -> int:
    """Run ``kbatch compact``; print a line per table; return the exit status."""
    try:
        target = parse_size(args.target_size)
        retain = parse_duration(args.retain, "--retain") if args.retain is not None else None
        options = storage.parse_options(args.storage_option)
        if not storage.is_remote(args.out) and not Path(args.out).is_dir():
            raise ValueError(f"{args.out}: no such folder")
        catalog = dict(item.split("=", 1) for item in args.catalog_option if "=" in item)
        if not args.dry_run:
            table_format(Store(args.out, options))  # (a folder that holds no table: nothing recovered in it)
            recover(args.out, options)
            hold(args.out, options)  # this run's staging folder is not a dead run's leftover
        try:
            done = compact_out(args.out, target, retain, args.dry_run, options, catalog)
        finally:
            if not args.dry_run:
                release(args.out)
    except KBatchError as exc:  # before ValueError: a kbatch error is one
        print(f"kbatch compact: error: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"kbatch compact: error: {exc}", file=sys.stderr)
        return 2
    for c in done:
        print(c.line(args.dry_run))
        verb = "would remove" if args.dry_run else "removed"
        for snap in c.expired:
            print(f"{'would expire' if args.dry_run else 'expired'} snapshot {snap} of {c.table}")
        for rel in c.vacuumed:
            print(f"{verb} {rel}")
    return 0
