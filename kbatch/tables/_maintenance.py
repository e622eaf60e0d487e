"""Maintenance of a whole OUT: what it holds (:func:`table_format`) and its compaction
(:func:`compact_out`), the work of ``kbatch compact OUT`` and of ``kbatch convert
--compact-after N`` (:func:`compact_after`).

Each format's compaction is its own module's (:mod:`kbatch.tables._compact`,
:mod:`kbatch.tables._compact_remote` for a Parquet folder on S3,
:mod:`kbatch.tables._compact_iceberg`); this one finds the format and the tables, and runs it
under the caller's lease on OUT (:func:`kbatch.tables._leftovers.hold`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._compact import Compaction, compact_delta, compact_folder
from ._compact_iceberg import compact_iceberg
from ._compact_remote import compact_remote_folder
from ._leftovers import Store
from ._remote import delta_options

__all__ = ["compact_after", "compact_out", "table_format"]


def table_format(store: Store) -> str:
    """What OUT holds: ``parquet`` (an offsets ledger), ``iceberg`` (kbatch's catalog) or ``delta``.

    Raises
    ------
    ValueError
        OUT holds none of them.
    """
    names = {rel.split("/", 1)[0] for rel, _ in store.objects()}
    if "_kbatch_ledger" in names:
        return "parquet"
    if "catalog.db" in names or any(rel.endswith(".metadata.json") for rel, _ in store.objects()):
        return "iceberg"
    if any("/_delta_log/" in rel for rel, _ in store.objects()):
        return "delta"
    raise ValueError(f"{store.url} holds no table kbatch wrote (an offsets ledger, catalog.db, _delta_log)")


def compact_out(out: str, target: int, retain: float | None = None, dry_run: bool = False,
                storage_options: Mapping[str, Any] | None = None,
                catalog_options: Mapping[str, str] | None = None) -> list[Compaction]:
    """Compact every table of ``out`` (files smaller than ``target`` bytes rewritten, one commit per
    table keeping its ledger), then with ``retain`` (seconds) vacuum / expire; ``dry_run``: what
    would be done. The caller holds OUT's lease.

    Raises
    ------
    ValueError
        OUT holds no table kbatch wrote; ``retain`` for a Parquet folder.
    """
    options = dict(storage_options or {})
    store = Store(out, options)
    fmt = table_format(store)
    if fmt == "parquet":
        if retain is not None:
            raise ValueError("--retain: a Parquet folder keeps no replaced files (they go at the commit)")
        if store.remote:
            return [compact_remote_folder(out, target, dry_run, options)]
        return [compact_folder(out, target, dry_run=dry_run)]
    if fmt == "iceberg":
        return compact_iceberg(out, target, retain, dry_run, options, dict(catalog_options or {}))
    done = []
    for top in sorted({rel.split("/", 1)[0] for rel, _ in store.objects() if "/_delta_log/" in rel}):
        uri = f"{store.url}/{top}"
        done.append(compact_delta(uri, target, retain, dry_run, delta_options(uri, options) if store.remote else None))
    return done


def compact_after(out: str, files: int, target: int, storage_options: Mapping[str, Any] | None = None,
                  catalog_options: Mapping[str, str] | None = None) -> list[Compaction]:
    """``kbatch convert --compact-after FILES``: when a table of ``out`` holds at least ``files``
    data files and some of them would be rewritten (a dry run says so), compact ``out`` (every
    table); what was compacted (empty: nothing reached the threshold)."""
    planned = compact_out(out, target, None, True, storage_options, catalog_options)
    if not any(c.files_before >= files and c.files_after < c.files_before for c in planned):
        return []
    return compact_out(out, target, None, False, storage_options, catalog_options)
