"""``kbatch compact`` of a Parquet folder on S3 (``s3://bucket/prefix``): small files rewritten
into large ones in one ledger commit that keeps the offsets ledger, as a local folder's
(:func:`kbatch.tables._compact.compact_folder`), with what atomicity S3 gives
(:mod:`kbatch.tables._remotefolder`):

1. the plan: each leaf folder of each ``topic=`` folder, its files smaller than the target
   grouped by schema (:func:`kbatch.tables._compact.plan_groups`, the local folder's grouping);
2. each group streamed into one new file under the run's staging folder
   (``OUT/_kbatch_staging/<run>/``, hidden from readers; :func:`kbatch.tables._compact.rewrite_parquet`,
   the local folder's and Iceberg's rewrite);
3. **the commit point**: the next ledger object, created only if its key is free, holding the
   same ledger and naming the new files, the staging folder and the files they replace
   (:meth:`kbatch.tables.RemoteFolderSink.commit_rewrite`); a run that lost the race to another
   commit fails with :class:`~kbatch.errors.CommitConflictError`, nothing changed;
4. the replaced objects deleted, then the new ones moved into place.

A run killed before 3 leaves only its staging folder (deleted by the next run once this one is
dead: :func:`kbatch.tables._leftovers.recover`); one killed after it is rolled forward by the next
sink opened on OUT (``kbatch compact``, ``kbatch convert --mode append``) before it reads
anything. A reader listing OUT during step 4 (or after a kill in it, until the roll forward)
sees the topic without the replaced files' records; the ledger, and every reader after the
roll forward, has each record once. The stages the tests kill a run at are ``mid-write`` (a
group rewritten), ``before-commit`` and ``mid-commit`` (:func:`kbatch.tables._hooks.reached`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from ._compact import DEFAULT_TARGET, Compaction, plan_groups, rewrite_parquet
from ._hooks import reached
from ._remotefolder import RemoteFolderSink

__all__ = ["compact_remote_folder"]


def compact_remote_folder(out: str, target: int = DEFAULT_TARGET, dry_run: bool = False,
                          storage_options: Mapping[str, Any] | None = None) -> Compaction:
    """Compact the Parquet folder ``out`` on S3 (see the module's notes); ``target`` bytes per file.

    Raises
    ------
    ValueError
        ``out`` has no offsets ledger, is not partitioned by topic, or holds other files than Parquet.
    CommitConflictError
        Another run committed to ``out`` while this one compacted (nothing compacted).
    """
    import pyarrow.parquet as pq

    sink = RemoteFolderSink(out, "append", storage_options=storage_options)  # rolls forward a killed commit
    if not sink.last_commits():
        raise ValueError(f"{sink.url}: no offsets ledger (_kbatch_ledger): not a Parquet folder kbatch convert wrote")
    files = sink.data_files()
    if not all(rel.startswith("topic=") and "/" in rel for rel, _ in files):
        raise ValueError(f"{sink.url}: only a folder partitioned by topic (topic=<name>/) can be compacted "
                         "(--no-partition-by-topic tables cannot yet)")
    by_leaf: dict[str, list[tuple[str, int]]] = {}
    for rel, size in files:
        if not rel.endswith(".parquet"):
            raise ValueError(f"{sink.url}/{rel}: only Parquet data files can be compacted")
        by_leaf.setdefault(posixpath.dirname(rel), []).append((rel, size))

    def schema_of(rel: str) -> Any:
        return pq.read_schema(f"{sink.root}/{rel}", filesystem=sink.fs)

    groups = [g for leaf in sorted(by_leaf) for g in plan_groups(by_leaf[leaf], target, schema_of)]
    before = len(files)
    after = before - sum(len(g) - 1 for g in groups)
    if dry_run or not groups:
        return Compaction(sink.url, before, after)
    sink.open(None)  # the staging folder is this run's: dropped if it fails before the commit
    new, removed = [], []
    try:
        name = sink.run.partition("@")[0]
        for i, group in enumerate(groups):
            rel = f"{posixpath.dirname(group[0])}/part-{name}-compact-{i}.parquet"
            sources = [sink.fs.open_input_file(f"{sink.root}/{f}") for f in group]
            try:
                with sink.fs.open_output_stream(f"{sink.staging_path}/{rel}") as dest:
                    rewrite_parquet(sources, dest)
            finally:
                for s in sources:
                    s.close()
            new.append(rel)
            removed += group
            reached("mid-write")
    except BaseException:
        sink.abort()
        raise
    compacted = sorted({rel.split("/", 1)[0] for rel in removed})
    number = sink.commit_rewrite(new, sorted(removed), compacted)
    return Compaction(sink.url, before, after, number)
