"""Table maintenance: small files rewritten into large ones in one commit that keeps the offsets
ledger (``kbatch compact``): :func:`compact_folder`, :func:`compact_delta`, and (in
:mod:`kbatch.tables._compact_iceberg`) ``compact_iceberg``.

Compaction changes no record, so the ledger after it is the ledger before it, and an append
after it continues where the table ended.

- **Parquet folder** (:func:`compact_folder`): in each ``topic=`` folder with two or more files
  smaller than the target (per leaf folder, files of one schema together), the small files are
  rewritten into files of about the target size. The new ``topic=`` folder is built in
  ``OUT/_kbatch_staging/<run>/`` (the files kept hard-linked, the new ones written); the commit
  point is the next ledger file, which holds the same ledger and names the folders replaced
  (``compacted``) and the files removed; then each folder is exchanged whole with its staged
  copy (:func:`kbatch.tables._swap.exchange`): a reader sees the old files or the new ones of a
  topic, never both. A run killed after the commit point is rolled forward by the next sink
  opened on OUT (:func:`kbatch.tables._folder.roll_forward`), one killed before it leaves only
  its staging folder (:func:`kbatch.tables._leftovers.recover` removes it).
- **Delta** (:func:`compact_delta`): deltalake's ``optimize.compact`` per topic table, its
  commit info carrying the ledger (as every kbatch commit's does); then, when asked, ``VACUUM``
  of the files removed longer ago than the retention (never below the table's
  ``delta.deletedFileRetentionDuration``, 7 days unless set: a reader of an older version may
  still need them).
- **Iceberg** (:func:`kbatch.tables._compact_iceberg.compact_iceberg`): per table, the small
  data files of each partition streamed into files of about the target size
  (:func:`rewrite_parquet`, shared with the folder's) and swapped for them in one pyiceberg
  transaction, an ``overwrite`` snapshot removing exactly those files whose summary carries
  the ledger; the catalog commit is the commit point (a concurrent commit makes it fail, the
  table unchanged). With a retention, then the snapshots older than it are expired and the
  files only they referenced deleted. A table with delete files is refused.

A run killed before its commit point leaves nothing a reader sees (a staging folder, or files
no snapshot or version references: ``kbatch clean`` removes them); one killed after it leaves
the table compacted (a Parquet folder's swap is finished by the next run on OUT). The stages
the tests kill a run at are :func:`kbatch.tables._hooks.reached`'s ``before-commit`` and
``mid-commit``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbatch.errors import CommitConflictError, TableError

from ._delta import read_ledger as read_delta_ledger
from ._folder import (
    LEDGER_DIR,
    STAGING_DIR,
    FolderSink,
    drop_staging_dir,
    ledger_entry,
    link_entry,
    read_ledger,
    roll_forward,
)
from ._hooks import reached
from ._ledger import LEDGER_KEY, Ledger
from ._runs import run_name

__all__ = ["DEFAULT_TARGET", "Compaction", "compact_delta", "compact_folder", "plan_groups", "rewrite_parquet"]

#: The default size of a compacted file: 128 MiB.
DEFAULT_TARGET = 128 << 20
#: Rows per row group of a compacted Parquet file: about what ``kbatch convert`` writes (its
#: writers close a group at 65,536 rows and up). Readers decode a file's row groups in parallel:
#: a file of 1M-row groups read 1.5x slower with Polars than the conversion's own.
_ROW_GROUP = 1 << 16


@dataclass
class Compaction:
    """What compacting one table did (or, in a dry run, would do)."""

    table: str
    files_before: int
    files_after: int
    #: the commit's id (a ledger commit number, a Delta version); None when nothing changed
    commit: str | None = None
    #: files a vacuum removed (or would)
    vacuumed: list[str] = field(default_factory=list)
    #: Iceberg: the snapshots expired (or that would be)
    expired: list[int] = field(default_factory=list)

    def line(self, dry_run: bool = False) -> str:
        if self.files_before == self.files_after:
            return f"table {self.table}: {self.files_before} data files, nothing to compact"
        verb = "would compact" if dry_run else "compacted"
        tail = f" (commit {self.commit})" if self.commit else ""
        return f"table {self.table}: {verb} {self.files_before} data files into {self.files_after}{tail}"


def _data_files(folder: Path) -> Iterator[Path]:
    """The Parquet data files under ``folder`` (hidden names left out), at any depth."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "_")))
        for name in sorted(filenames):
            if not name.startswith((".", "_")):
                yield Path(dirpath) / name


def plan_groups(files: Sequence[tuple[Any, int]], target: int, schema_of: Callable[[Any], Any]) -> list[list[Any]]:
    """The ``(file, size)`` of one folder smaller than ``target`` bytes, by schema (``schema_of(file)``:
    its Arrow schema), packed into groups of about ``target`` bytes; a group of one file is left out
    (nothing to gain). The one grouping of a local and a remote (S3) Parquet folder."""
    by_schema: dict[str, list[tuple[Any, int]]] = {}
    for f, size in files:
        if size < target:
            key = schema_of(f).remove_metadata().to_string(show_field_metadata=True)
            by_schema.setdefault(key, []).append((f, size))
    out = []
    for same in by_schema.values():
        group: list[Any] = []
        total = 0
        for f, size in same:
            if group and total + size > target:
                out.append(group)
                group, total = [], 0
            group.append(f)
            total += size
        out.append(group)
    return [g for g in out if len(g) > 1]


def rewrite_parquet(sources: Sequence[Any], dest: Any, codec: str | None = None) -> int:
    """The rows of ``sources`` (Parquet files of one schema: paths or open binary files) in one
    Parquet file ``dest`` (a path or an open binary file), in order, with the first file's schema
    (its metadata, field ids included) and ``codec`` (default: the first file's); returns the rows
    written. Rows are streamed, a row group at a time; a count that differs from the sources'
    footers raises :class:`~kbatch.errors.TableError`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = [pq.ParquetFile(s) for s in sources]
    meta = files[0].metadata
    if codec is None:
        written = meta.num_row_groups and meta.num_columns
        codec = meta.row_group(0).column(0).compression.lower() if written else "snappy"
    schema = files[0].schema_arrow
    rows = 0
    pending: list[Any] = []
    with pq.ParquetWriter(dest, schema, compression=codec) as writer:
        for source in files:
            for batch in source.iter_batches(batch_size=1 << 16):
                pending.append(batch)
                rows += batch.num_rows
                if sum(b.num_rows for b in pending) >= _ROW_GROUP:
                    writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=_ROW_GROUP)
                    pending = []
        if pending:
            writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=_ROW_GROUP)
    expected = sum(f.metadata.num_rows for f in files)
    if rows != expected:
        raise TableError(f"{dest}: {rows} rows written of {expected}: nothing compacted", table=str(dest))
    return rows


def compact_folder(out: str | os.PathLike[str], target: int = DEFAULT_TARGET, dry_run: bool = False) -> Compaction:
    """Compact the Parquet folder ``out`` (see the module's notes); ``target`` bytes per file."""
    import pyarrow.parquet as pq

    out = Path(out)
    FolderSink(out, "append")  # rolls forward a commit killed before its files were in place
    ledger, number = read_ledger(out)
    if not number:
        raise ValueError(f"{out}: no offsets ledger (_kbatch_ledger): not a Parquet folder kbatch convert wrote")
    tops = sorted(p.name for p in out.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    if any(p.is_file() and not p.name.startswith((".", "_")) for p in out.iterdir()) or not all(
            t.startswith("topic=") for t in tops):
        raise ValueError(f"{out}: only a folder partitioned by topic (topic=<name>/) can be compacted "
                         "(--no-partition-by-topic tables cannot yet)")
    before = 0
    plans: dict[str, list[list[Path]]] = {}
    for top in tops:
        by_leaf: dict[Path, list[Path]] = {}
        for f in _data_files(out / top):
            if f.suffix != ".parquet":
                raise ValueError(f"{f}: only Parquet data files can be compacted")
            by_leaf.setdefault(f.parent, []).append(f)
            before += 1
        groups = [g for files in by_leaf.values()
                  for g in plan_groups([(f, f.stat().st_size) for f in files], target, pq.read_schema)]
        if groups:
            plans[top] = groups
    after = before - sum(len(g) - 1 for gs in plans.values() for g in gs)
    if dry_run or not plans:
        return Compaction(str(out), before, after)
    run = run_name()
    staging = out / STAGING_DIR / run
    try:
        new, removed = _stage(out, staging, plans, run.partition("@")[0])
        reached("before-commit")
        entry = {"commit": number + 1, "ledger": json.loads(ledger.to_json()),
                 "converted": json.loads(Ledger().to_json()), "files": new, "records": 0,
                 "staging": f"{STAGING_DIR}/{run}", "compacted": sorted(plans), "removed": removed}
        try:
            link_entry(out / LEDGER_DIR, number + 1, entry, run)  # the commit point
        except FileExistsError:
            raise CommitConflictError(f"{out}: another run committed (ledger commit {number + 1}) while this "
                                      "one compacted: nothing compacted; run again", table=str(out)) from None
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        drop_staging_dir(out)
        raise
    reached("mid-commit")
    roll_forward(out, ledger_entry(out, number + 1))
    drop_staging_dir(out)
    return Compaction(str(out), before, after, str(number + 1))


def _stage(out: Path, staging: Path, plans: dict[str, list[list[Path]]], name: str) -> tuple[list[str], list[str]]:
    """Each planned ``topic=`` folder of ``out`` built anew in ``staging``: its files hard-linked
    but those of ``plans`` (rewritten, one file per group); returns the new files and the files
    removed, relative to OUT."""
    new, removed = [], []
    for top, groups in plans.items():
        gone = {f for g in groups for f in g}
        for dirpath, _dirs, filenames in os.walk(out / top):
            there = staging / Path(dirpath).relative_to(out)
            there.mkdir(parents=True, exist_ok=True)
            for fname in filenames:
                path = Path(dirpath) / fname
                if path not in gone:
                    os.link(path, there / fname)
        for i, group in enumerate(groups):
            rel = group[0].parent.relative_to(out) / f"part-{name}-compact-{i}.parquet"
            rewrite_parquet(group, staging / rel)
            new.append(rel.as_posix())
            removed += [f.relative_to(out).as_posix() for f in group]
    return new, sorted(removed)


def _delta_codec(table: Any) -> Any:
    """The codec of the Delta ``table``'s first data file (deltalake's spelling; None: its default)."""
    for fragment in table.to_pyarrow_dataset().get_fragments():
        meta = fragment.metadata
        if meta.num_row_groups and meta.num_columns:
            codec = meta.row_group(0).column(0).compression.upper()
            return codec if codec in ("UNCOMPRESSED", "SNAPPY", "GZIP", "BROTLI", "LZ4", "ZSTD", "LZ4_RAW") else None
    return None


def compact_delta(uri: str, target: int = DEFAULT_TARGET, retain: float | None = None, dry_run: bool = False,
                  storage_options: dict[str, Any] | None = None) -> Compaction:
    """Compact the Delta table ``uri`` with deltalake's ``optimize.compact`` in one commit
    carrying its ledger; then, with ``retain`` (seconds), vacuum what was removed longer ago.
    ``dry_run``: count what would be compacted (and vacuumed), change nothing."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, WriterProperties

    table = DeltaTable(uri, storage_options=storage_options)
    ledger, _ = read_delta_ledger(table)
    files = pa.table(table.get_add_actions(flatten=True)).to_pydict()
    sizes = files.get("size_bytes", [])
    parts = [{k: v[i] for k, v in files.items() if k.startswith("partition.")} for i in range(len(sizes))]
    small: dict[str, int] = {}
    for size, part in zip(sizes, parts, strict=True):
        if size < target:
            key = json.dumps(part, sort_keys=True, default=str)
            small[key] = small.get(key, 0) + 1
    before = len(sizes)
    after = before - sum(n - 1 for n in small.values() if n > 1)
    result = Compaction(uri, before, after)
    if not dry_run and after < before:
        reached("before-commit")
        props = CommitProperties(custom_metadata={LEDGER_KEY: ledger.to_json()}) if len(ledger) else None
        # the files written as the conversion writes them: its codec, its row groups
        writer = WriterProperties(max_row_group_size=_ROW_GROUP, compression=_delta_codec(table))
        table.optimize.compact(target_size=target, commit_properties=props, writer_properties=writer)  # the commit
        reached("mid-commit")  # committed, not yet checked nor vacuumed
        result.files_after = len(table.file_uris())
        result.commit = str(table.version())
        if read_delta_ledger(table)[0] != ledger:
            raise TableError(f"{uri}: the ledger changed in the compaction (version {result.commit})", table=uri)
    if retain is not None:
        try:
            result.vacuumed = table.vacuum(retention_hours=int(retain // 3600), dry_run=dry_run,
                                           enforce_retention_duration=True)
        except Exception as exc:  # deltalake's: a retention below the table's
            if "retention" in str(exc).lower():
                raise ValueError(f"--retain: {exc}") from None
            raise
    return result
