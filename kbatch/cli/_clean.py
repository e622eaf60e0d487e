"""kbatch clean: remove the files of OUT's table that no commit references, older than a retention.

``kbatch clean OUT [--older-than DURATION] [--dry-run]`` first removes what runs no longer alive
left (:func:`kbatch.tables._leftovers.recover`, as every ``kbatch convert`` does), then the table
files that nothing references and that were last written longer ago than ``--older-than``
(default ``7d``; ``0s`` takes every one: only when no run writes to OUT):

- **Parquet folder**: the data files (names readers see) that no commit of the offsets ledger
  (``_kbatch_ledger``) names;
- **Delta**: deltalake's ``VACUUM`` of each topic's table in full mode (files that no version of
  the log references, and files removed from the table longer ago than the retention);
- **Iceberg** (OUT's own SQLite catalog; on S3 the one ``--catalog-option uri=...`` names): the
  files under each table's folder that neither the current metadata, its metadata log, nor any
  snapshot (manifest lists, manifests, data and delete files) references: a run killed between
  writing its files and its commit leaves them.

A file younger than the retention may belong to a run still writing: keep the retention longer
than the longest run. Status 0 (what was removed, one line each with ``--dry-run``: what would
be), 2 for a user mistake (no such OUT, a bad duration), 1 for a table that cannot be read.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from kbatch import storage
from kbatch.errors import KBatchError
from kbatch.tables import Store, default_catalog, delta_options, iceberg_properties, recover, table_format

__all__ = ["add_arguments", "parse_duration", "run", "unreferenced"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(text: str, flag: str = "--older-than") -> float:
    """Seconds of ``30s``, ``15m``, ``12h``, ``7d``, ``2w`` (a number and one unit).

    >>> parse_duration("7d"), parse_duration("0s"), parse_duration("1.5h")
    (604800.0, 0.0, 5400.0)
    """
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text)
    if not m:
        raise ValueError(f"{flag} {text!r}: a number and a unit (s, m, h, d, w), e.g. 7d")
    return float(m.group(1)) * _UNITS[m.group(2)]


def _parquet(store: Store, cutoff: float) -> list[str]:
    named: set[str] = set()
    for rel, _ in store.objects("_kbatch_ledger"):
        name = rel.rsplit("/", 1)[-1]
        if name.endswith(".json") and name[:-5].isdigit():
            raw = store.read(rel)
            try:
                named.update(json.loads(raw or b"{}").get("files", []))
            except ValueError:
                raise KBatchError(f"{store.url}/{rel}: unreadable ledger file: nothing cleaned") from None
    return [rel for rel, mtime in store.objects()
            if not any(p.startswith(("_", ".")) for p in rel.split("/")) and rel not in named and mtime < cutoff]


def _delta(store: Store, seconds: float, dry_run: bool, options: dict[str, Any]) -> list[str]:
    from deltalake import DeltaTable

    out = []
    for top in sorted({rel.split("/", 1)[0] for rel, _ in store.objects() if "/_delta_log/" in rel}):
        uri = f"{store.url}/{top}"
        table = DeltaTable(uri, storage_options=delta_options(uri, options) if store.remote else None)
        gone = table.vacuum(retention_hours=int(seconds // 3600), dry_run=dry_run,
                            enforce_retention_duration=False, full=True)
        out += [f"{top}/{g.rsplit(f'/{top}/', 1)[-1]}" for g in gone]
    return out


def _iceberg(store: Store, cutoff: float, catalog_options: dict[str, str], options: dict[str, Any]) -> list[str]:

    if store.remote:
        from pyiceberg.catalog import load_catalog

        if "uri" not in catalog_options:
            raise ValueError(f"{store.url}: give the Iceberg catalog kbatch convert used: --catalog-option uri=...")
        catalog = load_catalog("kbatch", **{"type": "sql", "warehouse": store.url,
                                            **iceberg_properties(store.url, options), **catalog_options})
    else:
        catalog = default_catalog(store.url)
    out = []
    for ns in catalog.list_namespaces():
        for ident in catalog.list_tables(ns):
            table = catalog.load_table(ident)
            named = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log)}
            named.update(s.manifest_list for s in table.metadata.snapshots)
            if table.metadata.snapshots:
                named.update(table.inspect.all_manifests().column("path").to_pylist())
                named.update(table.inspect.all_files().column("file_path").to_pylist())
            mine = {_relative(store, u) for u in named}
            folder = _relative(store, table.metadata.location)
            out += [rel for rel, mtime in store.objects(folder)
                    if rel not in mine and not rel.endswith("/") and mtime < cutoff]
    return out


def _relative(store: Store, uri: str) -> str:
    """``uri`` (a file or folder of OUT's tables) relative to OUT."""
    from urllib.parse import unquote, urlparse

    if store.remote:
        return uri.split("://", 1)[-1][len(store.url.split("://", 1)[-1]) + 1:]
    path = Path(unquote(urlparse(uri).path) if uri.startswith("file:") else uri).resolve()
    return path.relative_to(Path(store.url).resolve()).as_posix()


def unreferenced(out: str, older_than: float, storage_options: dict[str, Any] | None = None,
                 dry_run: bool = True, catalog_options: dict[str, str] | None = None) -> list[str]:
    """The table files of ``out`` that no commit references, last written more than ``older_than``
    seconds ago (paths relative to OUT); deleted unless ``dry_run`` (Delta's vacuum deletes them
    itself)."""
    store = Store(out, storage_options)
    fmt = table_format(store)
    cutoff = time.time() - older_than
    if fmt == "delta":
        return _delta(store, older_than, dry_run, dict(storage_options or {}))
    found = _parquet(store, cutoff) if fmt == "parquet" else _iceberg(store, cutoff, dict(catalog_options or {}),
                                                                        dict(storage_options or {}))
    if not dry_run:
        store.delete(found)
    return found


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("out", metavar="OUT", help="the table folder kbatch convert wrote (a path or s3://)")
    parser.add_argument("--older-than", default="7d", metavar="DURATION",
                        help="remove only files last written longer ago than this (default 7d; 30s, 15m, 12h, 2w)")
    parser.add_argument("--dry-run", action="store_true", help="list what would be removed, remove nothing")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="pyarrow filesystem option of an s3:// OUT (as kbatch convert's)")
    parser.add_argument("--catalog-option", action="append", default=[], metavar="KEY=VALUE",
                        help="the Iceberg catalog of an s3:// OUT, as kbatch convert was given it (uri=...)")


def run(args: argparse.Namespace) -> int:
    """Run ``kbatch clean``; print what was removed; return the exit status."""
    try:
        seconds = parse_duration(args.older_than)
        options = storage.parse_options(args.storage_option)
        if not storage.is_remote(args.out) and not Path(args.out).is_dir():
            raise ValueError(f"{args.out}: no such folder")
        left = [] if args.dry_run else recover(args.out, options)
        catalog = dict(item.split("=", 1) for item in args.catalog_option if "=" in item)
        gone = unreferenced(args.out, seconds, options, dry_run=args.dry_run, catalog_options=catalog)
    except KBatchError as exc:  # before ValueError: a kbatch error is one
        print(f"kbatch clean: error: {exc}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as exc:
        print(f"kbatch clean: error: {exc}", file=sys.stderr)
        return 2
    verb = "would remove" if args.dry_run else "removed"
    for rel in [*left, *gone]:
        print(f"{verb} {rel}")
    print(f"kbatch clean: {verb} {len(left) + len(gone)} files of {args.out} that no commit references",
          file=sys.stderr)
    return 0
