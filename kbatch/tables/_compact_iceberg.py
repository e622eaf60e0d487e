"""Iceberg table maintenance for ``kbatch compact``: :func:`compact_iceberg`.

Per table of the catalog (every namespace: the topics' tables and their dead letters):

- **Compaction.** The current snapshot's data files smaller than the target are grouped by
  partition (of the table's current spec; files of an older spec are left as they are) and by
  Parquet schema (files written before a column was added keep their own columns, as every
  kbatch writer does), packed into groups of about the target size; each group of two or more
  is streamed into one new Parquet file (:func:`kbatch.tables._compact.rewrite_parquet`: the
  rows as the files hold them, nulls kept at any depth, the table's codec), in the group's
  partition folder of ``data/``. One pyiceberg transaction then removes exactly the files
  rewritten and adds the new ones (:func:`kbatch.tables._iceberg_files.append_files`: one
  ``overwrite`` snapshot; pyiceberg 0.12 has no ``replace`` operation), its summary carrying
  the table's ledger as it was (``kbatch.ledger``), so :func:`kbatch.tables._iceberg.read_ledger`
  reads the same ledger after it and an append continues exactly once.
- **Exactly once.** The commit of the catalog is the one commit point. The transaction asserts
  the table's main branch is still the snapshot the files were planned from, with pyiceberg's
  retries off (:func:`kbatch.tables._iceberg.no_retries`): a run that committed meanwhile
  makes it fail with :class:`~kbatch.errors.CommitConflictError`, its new files deleted and the
  table unchanged. Killed before the commit, the run leaves only files no snapshot references
  (``kbatch clean`` removes them); killed after it, the table is compacted (what is left is the
  check and the expiry, which the next run does).
- **Delete files.** kbatch writes none (``--upsert`` rewrites the data files it changes); a table
  whose files have delete files (another engine's merge-on-read) is refused, unchanged.
- **Expiry** (``retain``, seconds): the snapshots committed longer ago than that are removed
  from the table's metadata (pyiceberg's ``expire_snapshots``), never a branch's or tag's head,
  nor a snapshot between the current one and the one holding the ledger (the ledger is read
  through them); then the files only they referenced (manifest lists, manifests, data and
  delete files) are deleted. A run killed between the two leaves those files unreferenced:
  ``kbatch clean`` removes them.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kbatch._version import __version__
from kbatch.errors import CommitConflictError, TableError

from ._compact import DEFAULT_TARGET, Compaction, rewrite_parquet
from ._hooks import reached
from ._iceberg import CATALOG_NAME, default_catalog, no_retries, read_ledger
from ._iceberg_files import append_files
from ._ledger import LEDGER_KEY
from ._remote import iceberg_properties

__all__ = ["compact_iceberg", "iceberg_catalog"]


def iceberg_catalog(out: str, storage_options: dict[str, Any] | None = None,
                    catalog_options: dict[str, str] | None = None) -> Any:
    """The catalog ``kbatch convert --format iceberg`` wrote ``out``'s tables to: the SQLite one at
    ``OUT/catalog.db`` (a local OUT), or for ``s3://`` the SQL catalog ``catalog_options`` names
    (``uri=...``, as ``kbatch convert`` was given it)."""
    from pyiceberg.catalog import load_catalog

    options = dict(catalog_options or {})
    if "://" in out:
        if "uri" not in options:
            raise ValueError(f"{out}: give the Iceberg catalog kbatch convert used: --catalog-option uri=...")
        return load_catalog("kbatch", **{"type": "sql", "warehouse": out,
                                         **iceberg_properties(out, storage_options or {}), **options})
    if not (Path(out) / "catalog.db").is_file() and "uri" not in options:
        raise ValueError(f"{out}: no catalog.db: not an Iceberg table kbatch convert wrote with its default catalog")
    if not options:
        return default_catalog(out)
    path = Path(out).resolve()
    return load_catalog(CATALOG_NAME, **{"type": "sql", "uri": f"sqlite:///{path / 'catalog.db'}",
                                         "warehouse": path.as_uri(), **options})


def compact_iceberg(out: str, target: int = DEFAULT_TARGET, retain: float | None = None, dry_run: bool = False,
                    storage_options: dict[str, Any] | None = None,
                    catalog_options: dict[str, str] | None = None) -> list[Compaction]:
    """Compact every table of ``out``'s Iceberg catalog (see the module's notes): ``target`` bytes
    per file; with ``retain`` (seconds), then expire the snapshots older than that and delete the
    files only they referenced. ``dry_run``: say what would be done, change nothing."""
    catalog = iceberg_catalog(out, storage_options, catalog_options)
    done = []
    for ns in sorted(catalog.list_namespaces()):
        for ident in sorted(catalog.list_tables(ns)):
            name = ".".join(ident)
            table = no_retries(catalog.load_table(ident))
            done.append(compact_table(table, name, target, retain, dry_run, out))
    if not done:
        raise ValueError(f"{out}: the Iceberg catalog holds no table")
    return done


def compact_table(table: Any, name: str, target: int = DEFAULT_TARGET, retain: float | None = None,
                  dry_run: bool = False, out: str | None = None) -> Compaction:
    """Compact one pyiceberg ``table`` (loaded with :func:`~kbatch.tables._iceberg.no_retries`),
    called ``name`` in the report; ``out``: the folder the report's paths are relative to."""
    from pyiceberg.exceptions import CommitFailedException

    ledger, _ = read_ledger(table)
    snap = table.metadata.current_snapshot()
    tasks = list(table.scan().plan_files()) if snap is not None else []
    deletes = sorted({d.file_path for t in tasks for d in t.delete_files})
    if deletes:
        raise TableError(f"table {name}: {len(deletes)} delete files (e.g. {deletes[0]}), which kbatch does not "
                         "write and kbatch compact does not apply: nothing compacted", table=name)
    groups = _plan(table, [t.file for t in tasks], target)
    before = len(tasks)
    result = Compaction(name, before, before - sum(len(g) - 1 for g in groups))
    if groups and not dry_run:
        run = f"{os.getpid()}-{os.urandom(4).hex()}"
        written: list[str] = []
        try:
            files = []
            for i, group in enumerate(groups):
                uri = _rewrite(table, group, f"{run}-compact-{i:05d}")
                written.append(uri)
                files.append((uri, group[0].partition))
            props = {"kbatch.version": __version__, **({LEDGER_KEY: ledger.to_json()} if len(ledger) else {})}
            txn = table.transaction()
            append_files(txn, table.io, files, props, [f for g in groups for f in g])
            reached("before-commit")
            table = txn.commit_transaction()  # the commit point
        except CommitFailedException:
            _delete(table.io, written)
            raise CommitConflictError(f"table {name}: another run committed while this one compacted: nothing "
                                      "compacted; run again", table=name) from None
        except BaseException:
            _delete(table.io, written)
            raise
        reached("mid-commit")  # committed, not yet checked nor expired
        new = table.metadata.current_snapshot()
        result.commit = str(new.snapshot_id)
        result.files_after = sum(1 for _ in table.scan().plan_files())
        if read_ledger(table)[0] != ledger:
            raise TableError(f"table {name}: the ledger changed in the compaction (snapshot {result.commit})",
                             table=name)
        total = (snap.summary.get("total-records"), new.summary.get("total-records"))
        if total[0] != total[1]:
            raise TableError(f"table {name}: {total[1]} records after the compaction (snapshot {result.commit}), "
                             f"{total[0]} before", table=name)
    if retain is not None:
        result.expired, result.vacuumed = expire(table, name, retain, dry_run, out)
    return result


def _plan(table: Any, files: list[Any], target: int) -> list[list[Any]]:
    """The data files (``DataFile``) of ``files`` smaller than ``target`` bytes, of the table's
    current spec, by partition and Parquet schema, packed into groups of about ``target`` bytes;
    a group of one file is left out."""
    import pyarrow.parquet as pq
    from pyiceberg.manifest import FileFormat

    spec_id = table.metadata.default_spec_id
    by_key: dict[tuple[str, str], list[Any]] = {}
    for f in files:
        if f.file_size_in_bytes >= target or f.spec_id != spec_id or f.file_format != FileFormat.PARQUET:
            continue
        with table.io.new_input(f.file_path).open() as stream:
            schema = pq.read_schema(stream).remove_metadata().to_string(show_field_metadata=True)
        by_key.setdefault((repr(f.partition), schema), []).append(f)
    out = []
    for same in by_key.values():
        group: list[Any] = []
        size = 0
        for f in same:
            if group and size + f.file_size_in_bytes > target:
                out.append(group)
                group, size = [], 0
            group.append(f)
            size += f.file_size_in_bytes
        out.append(group)
    return [g for g in out if len(g) > 1]


def _rewrite(table: Any, group: list[Any], name: str) -> str:
    """The rows of ``group`` (data files of one partition and schema) in one new Parquet file of
    the partition's folder, named ``<name>.parquet``; its URI."""
    meta = table.metadata
    spec = meta.spec()
    folder = meta.location.rstrip("/") + "/data"
    if spec.fields:
        folder += "/" + spec.partition_to_path(group[0].partition, meta.schema())
    uri = f"{folder}/{name}.parquet"
    codec = meta.properties.get("write.parquet.compression-codec", "zstd")
    with contextlib.ExitStack() as stack:
        sources = [stack.enter_context(table.io.new_input(f.file_path).open()) for f in group]
        dest = stack.enter_context(table.io.new_output(uri).create(overwrite=False))
        rows = rewrite_parquet(sources, dest, "none" if codec == "uncompressed" else codec)
    expected = sum(f.record_count for f in group)
    if rows != expected:
        raise TableError(f"{uri}: {rows} rows written of the {expected} the table's manifests count: nothing "
                         "compacted", table=uri)
    return uri


def _delete(io: Any, uris: Iterable[str]) -> None:
    for uri in uris:
        with contextlib.suppress(Exception):
            io.delete(uri)


def _referenced(table: Any, snapshots: Iterable[Any], cache: dict[str, list[str]]) -> set[str]:
    """The files ``snapshots`` reference: manifest lists, manifests, live data and delete files."""
    out: set[str] = set()
    for snap in snapshots:
        out.add(snap.manifest_list)
        for manifest in snap.manifests(table.io):
            out.add(manifest.manifest_path)
            if manifest.manifest_path not in cache:
                cache[manifest.manifest_path] = [e.data_file.file_path for e in
                                                 manifest.fetch_manifest_entry(table.io, discard_deleted=True)]
            out.update(cache[manifest.manifest_path])
    return out


def expire(table: Any, name: str, retain: float, dry_run: bool = False,
           out: str | None = None) -> tuple[list[int], list[str]]:
    """Expire ``table``'s snapshots committed more than ``retain`` seconds ago (see the module's
    notes) and delete the files only they referenced; ``(snapshot ids, files)`` expired and
    deleted (``dry_run``: that would be, nothing changed). Files are relative to ``out`` when
    under it."""
    if not hasattr(table, "maintenance"):
        import pyiceberg

        raise TableError(f"table {name}: --retain: pyiceberg {pyiceberg.__version__} cannot expire snapshots "
                         "(pyiceberg 0.10 or later can): nothing expired", table=name)
    meta = table.metadata
    keep = {ref.snapshot_id for ref in meta.refs.values()}
    snap = meta.current_snapshot()
    while snap is not None:  # the ledger is read back through these
        keep.add(snap.snapshot_id)
        if snap.summary is not None and snap.summary.get(LEDGER_KEY):
            break
        snap = meta.snapshot_by_id(snap.parent_snapshot_id) if snap.parent_snapshot_id is not None else None
    cutoff = (time.time() - retain) * 1000
    old = [s for s in meta.snapshots if s.timestamp_ms < cutoff and s.snapshot_id not in keep]
    if not old:
        return [], []
    ids = {s.snapshot_id for s in old}
    cache: dict[str, list[str]] = {}
    gone = sorted(_referenced(table, old, cache) - _referenced(table, (s for s in meta.snapshots
                                                                         if s.snapshot_id not in ids), cache))
    if not dry_run:
        table.maintenance.expire_snapshots().by_ids(sorted(ids)).commit()  # the snapshots gone: the commit point
        _delete(table.io, gone)
    return sorted(ids), [_relative(uri, out) for uri in gone]


def _relative(uri: str, out: str | None) -> str:
    from urllib.parse import unquote, urlparse

    if out is None or "://" in out:
        return uri.split("://", 1)[-1][len(out.split("://", 1)[-1]) + 1:] if out and uri.startswith(out) else uri
    path = Path(unquote(urlparse(uri).path) if uri.startswith("file:") else uri)
    with contextlib.suppress(ValueError):
        return path.relative_to(Path(out).resolve()).as_posix()
    return uri
