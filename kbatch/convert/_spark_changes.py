"""``kbatch convert --engine spark --upsert|--cdc``: executors stage the run's changes, the driver merges them.

Under the arrow engine a keyed sink (:class:`kbatch.tables.Keyed`: ``--upsert``'s latest record per
key, ``--cdc``'s changes by the primary key) is handed the run's rows in log order and reduces
them per key at its commit. Under Spark the same happens in two halves:

- the executors (:func:`stage_changes`, one Spark job per topic) read their slices, decode the
  values and turn Debezium envelopes into change rows as this process does under the arrow
  engine (:class:`kbatch.convert._values.TopicDecode`: ``--values``, then
  :meth:`kbatch.convert._cdc.CdcPlan.apply`: the table's columns and the hidden op, partition,
  offset and timestamp ones) and write them with pyarrow, types kept, as Parquet into a hidden
  folder of the sink's staging folder (``_changes/topic=<t>/``, which the sink's commit never
  takes as data files), the dead letters beside them (``_dead_letter/``, as ``--values`` does).
  Each task returns a row per partition it read: the records read and, with ``--as-of-by
  source.ts_ms|ts_ms``, the offset of the first change of its slices later than that time;
- the driver takes a partition's cut as the least of its tasks' (a task cuts its own slices
  only: rows it kept at or past an earlier slice's cut are dropped here, dead letters too),
  reads each topic's staged changes back sorted by (partition, offset), since Spark tasks split
  a partition into slices that finish in any order (:func:`staged_changes`), and gives them to
  ``sink.write``: the reduction and merge of the arrow engine, committed with the ledger (trimmed
  at the cuts, :meth:`~kbatch.convert._cdc.CdcPlan.trim`) in one commit per table.

Memory: the driver holds one run's change rows (every topic's, the table's columns and the hidden
ones, after ``--values`` decoding; not the raw log), as the keyed sinks do under the arrow engine,
plus the small per-task rows; an executor holds one batch at a time.

A file is named after its run, its topic's frame, its Spark partition and its batch's place in
the task, and written aside then renamed: a retried or speculative attempt replaces the files of
the one before, so no change is staged twice. A job that fails or is killed leaves its files in
the sink's staging folder only, which no commit took in: the sink's abort removes them, or, for a
killed run, the next run on OUT (:func:`kbatch.tables.recover`).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kbatch.plan import ROOT_COLUMN, LogSlice, Options

from ._cdc import OFFSET, PARTITION
from ._values import TopicDecode, ValuePlan

__all__ = ["CHANGES_DIR", "stage_changes", "staged_changes"]

#: The hidden folder of the sink's staging folder that the executors stage changes in.
CHANGES_DIR = "_changes"


def _write_aside(rows: Any, folder: str, basename: str) -> None:
    """``rows`` (a ``pyarrow.Table``) as ``folder/basename``, written aside then renamed into place."""
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    temp = os.path.join(folder, f".{basename}.{uuid.uuid4().hex}.tmp")
    pq.write_table(rows, temp)
    os.replace(temp, os.path.join(folder, basename))


def _task_rows(raw: Any, read: dict[tuple[int, str | None], list[int]]) -> None:
    """Count ``raw``'s records per (partition, root) into ``read``: [records, first offset, last offset]."""
    import pyarrow as pa

    keys = ["partition", *([ROOT_COLUMN] if ROOT_COLUMN in raw.schema.names else [])]
    found = (pa.table({k: raw.column(k) for k in [*keys, "offset"]}).group_by(keys, use_threads=False)
             .aggregate([("offset", "count"), ("offset", "min"), ("offset", "max")]))
    for row in found.to_pylist():
        key = (row["partition"], row.get(ROOT_COLUMN))
        have = read.setdefault(key, [0, row["offset_min"], row["offset_max"]])
        have[0] += row["offset_count"]
        have[1], have[2] = min(have[1], row["offset_min"]), max(have[2], row["offset_max"])


def stage_changes(spark: Any, tasks: Sequence[Sequence[LogSlice]], opts: Options, topics: Sequence[str],
                  values: ValuePlan | None, folder: str) -> dict[tuple[Any, ...], tuple[int, int, int]]:
    """Each topic's records of ``tasks`` staged as change rows under ``folder`` by the executors
    (see the module's notes); the records read per partition, keyed as the reports are
    (``(topic, partition)``, with the root columns ``(topic, partition, root)``): ``(records,
    first offset, last offset)``. With ``values.cdc`` cut by time, its ``cuts`` are set."""
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    from kbatch.spark import ship, task_frame, write_dead_letters  # defers pyspark

    run = uuid.uuid4().hex[:8]
    cdc = values.cdc if values is not None else None
    out = StructType([StructField("partition", IntegerType()), StructField("root", StringType()),
                      StructField("records", LongType()), StructField("first", LongType()),
                      StructField("last", LongType()), StructField("cut", LongType())])
    counts: dict[tuple[Any, ...], tuple[int, int, int]] = {}
    for i, topic in enumerate(topics):
        mine = [kept for kept in (tuple(s for s in task if s.topic == topic) for task in tasks) if kept]
        if not mine:
            continue
        df = task_frame(spark, mine, opts)
        decode = values.topic_decode(topic) if values is not None else None
        registry = ship(df, values.registry if values is not None else None)
        changes = os.path.join(folder, CHANGES_DIR, f"topic={topic}")
        dead_folder = os.path.join(folder, (values.side_folder if values is not None else None) or "_dead_letter")
        name = f"part-{run}-{i}"

        def stage(batches: Iterator[Any], topic: str = topic, decode: TopicDecode | None = decode,
                  registry: Any = registry, changes: str = changes, dead_folder: str = dead_folder,
                  name: str = name) -> Iterator[Any]:
            import pyarrow as pa
            from pyspark import TaskContext

            plan = replace(cdc, cuts={}) if cdc is not None else None  # this task's own cuts
            context = TaskContext.get()
            task = context.partitionId() if context is not None else 0
            read: dict[tuple[int, str | None], list[int]] = {}
            reg = registry()
            for k, batch in enumerate(batches):
                if not batch.num_rows:
                    continue
                _task_rows(batch, read)
                basename = f"{name}-{task:05d}-{k:05d}.parquet"
                rows, dead, more = pa.Table.from_batches([batch]), None, None
                if decode is not None:
                    rows, dead, more = decode(topic, batch, reg, plan)
                if rows.num_rows:
                    _write_aside(rows, changes, basename)
                for j, letters in enumerate((dead, more)):
                    if letters is not None and letters.num_rows:
                        write_dead_letters(letters, dead_folder, f"{basename[:-8]}-{j}.parquet")
            cuts = plan.cuts if plan is not None else {}
            found = sorted(read.items(), key=lambda kv: (kv[0][0], kv[0][1] or ""))
            yield pa.RecordBatch.from_pylist(
                [{"partition": part, "root": root, "records": n, "first": first, "last": last,
                  "cut": cuts.get((topic, part))} for (part, root), (n, first, last) in found],
                schema=pa.schema([("partition", pa.int32()), ("root", pa.string()), ("records", pa.int64()),
                                  ("first", pa.int64()), ("last", pa.int64()), ("cut", pa.int64())]))

        for row in df.mapInArrow(stage, out).collect():
            key = (topic, row["partition"], row["root"]) if opts.root_columns else (topic, row["partition"])
            n, first, last = counts.get(key, (0, row["first"], row["last"]))
            counts[key] = (n + row["records"], min(first, row["first"]), max(last, row["last"]))
            if cdc is not None and row["cut"] is not None:
                at = (topic, row["partition"])
                cdc.cuts[at] = min(cdc.cuts.get(at, row["cut"]), row["cut"])
    return counts


def staged_changes(folder: str, topics: Sequence[str], schema: Any, cdc: Any = None) -> Iterator[Any]:
    """The change rows :func:`stage_changes` staged under ``folder``, each topic's in log order
    (by partition, then offset; with the root columns by root first), as ``pyarrow.RecordBatch``es
    for a keyed sink's ``write``; those at or past their partition's cut (``cdc.cuts``) left out.
    ``schema``: what the sink was opened with (one ``pyarrow.Schema``, or one per topic); the
    columns it names are cast to its types (Spark hands its executors timestamps in the session's
    zone name, ``Etc/UTC`` for ``UTC``)."""
    import pyarrow.compute as pc
    import pyarrow.dataset as pads

    for topic in topics:
        where = Path(folder) / CHANGES_DIR / f"topic={topic}"
        if not where.is_dir():
            continue
        table = pads.dataset(str(where), format="parquet").to_table()
        if not table.num_rows:
            continue
        want = schema[topic] if isinstance(schema, Mapping) else schema
        for f in want:
            at = table.schema.get_field_index(f.name)
            if at >= 0 and table.schema.field(at).type != f.type:
                table = table.set_column(at, table.schema.field(at).with_type(f.type), table.column(at).cast(f.type))
        partition, offset = (PARTITION, OFFSET) if cdc is not None else ("partition", "offset")  # a change's own
        order = [(ROOT_COLUMN, "ascending")] if ROOT_COLUMN in table.column_names else []
        table = table.sort_by([*order, (partition, "ascending"), (offset, "ascending")])
        for (t, part), cut in sorted((cdc.cuts if cdc is not None else {}).items()):
            if t == topic:
                late = pc.and_(pc.equal(table.column(partition), part), pc.greater_equal(table.column(offset), cut))
                table = table.filter(pc.invert(late))
        yield from table.to_batches()
