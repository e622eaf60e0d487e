"""``kbatch convert --engine arrow``: the conversion in this process with pyarrow, no Spark.

The selected records as Arrow batches (the Spark source's own loop, each partition counted in
its report as its batches pass), written by pyarrow's dataset writer in Spark's layout
(``topic=<name>/part-*``; ORC by a writer of its own) or handed to a table sink with its ledger
(:mod:`kbatch.tables`: folders, Iceberg, Delta), ``--values`` decoded on the way.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kbatch._progress import Progress, plural, size
from kbatch.errors import KBatchError, TableError
from kbatch.plan import range_key, read_logs, with_root
from kbatch.tables import EndOnError, FolderSink, Ledger, Sink, TableCommit

from ._errors import UsageError
from ._plan import Plan, ledger_keys, plan, plan_changes, row_schema
from ._reports import finish_report, log_notes, read_ranges, reports_before_read
from ._resume import resume_run
from ._sinks import RemoteStaging, has_ledger, is_remote, open_out_sink, table_options
from ._summary import PartitionReport, Summary, progress_enabled, say
from ._value_plan import plan_values
from ._values import ValuePlan

__all__ = ["convert_arrow", "pa_reader"]


def _arrow_batches(
    p: Plan, args: argparse.Namespace, reports: dict[tuple[Any, ...], PartitionReport], progress: Progress
) -> Iterator[Any]:
    """The selected records as Arrow batches (the Spark source's loop, :func:`kbatch.plan.read_logs`),
    each partition's records and skipped bytes counted in its report as they go; with
    the root columns (``--recursive``, ``--replicas all``) each log (and copy) over its own range,
    with its root and cluster id as the ``root`` and ``clusterId`` columns."""
    opts = p.opts
    done_bytes = finished_bytes = records = 0

    def count(log: Any, table: Any) -> None:
        nonlocal done_bytes, finished_bytes, records
        rep = reports[range_key(log, opts)]
        if table is not None:
            rep.records += len(table)
            records += len(table)
            done_bytes += table.consumed_bytes
            if table.next_offset is not None:
                reached[range_key(log, opts)] = table.next_offset
        else:  # the partition is done
            rep.skipped_bytes = sum(s.length for s in log.skipped)
            finished_bytes += sum(s.size for s in log.segments)
            done_bytes = max(done_bytes, finished_bytes)
        progress.update(done_bytes, records=records)

    reached: dict[tuple[Any, ...], int] = {}  # the offset each partition's read has reached

    def lost(log: Any, exc: KBatchError) -> None:  # --no-fail-on-data-loss: told, not raised
        rep = reports[range_key(log, opts)]
        rep.lost, rep.lost_at = str(exc), max(reached.get(range_key(log, opts), rep.start), rep.start)

    on_lost = None if opts.fail_on_data_loss else lost
    if not opts.root_columns and not p.pieces:
        yield from read_logs(p.logs, opts, ranges=p.ranges, progress=count, lost=on_lost)
        return
    for log in p.logs:  # copies of one partition: ranges by (topic, partition, root); or pieces of a range
        k = range_key(log, opts)
        for piece in p.pieces.get(k, [p.ranges[k]]):
            if reports[k].lost:  # (the ledger ends where it stopped: no later piece is read)
                break
            reached[k] = piece[0]
            batches = read_logs(log, opts, ranges={(log.topic, log.partition): piece}, progress=count, lost=on_lost)
            yield from (with_root(b, log.root, log.cluster_id) for b in batches) if opts.root_columns else batches


def _write_orc(reader: Any, folder: Path, args: argparse.Namespace, token: str) -> None:
    """ORC files in the dataset writer's layout: ``topic=<name>/part-<token>-<i>.orc`` (topics arrive
    one after another: the logs are sorted by topic), a new file every ``--max-rows-per-file`` rows."""
    import pyarrow as pa
    import pyarrow.orc as orc

    codec = {"none": "uncompressed", "gzip": "zlib", None: "snappy"}.get(args.compression, args.compression)
    writer: Any = None
    key: str | None = None
    rows = index = 0
    limit = args.max_rows_per_file or 0
    try:
        for batch in reader:
            if batch.num_rows == 0:
                continue
            topic = batch.column(batch.schema.get_field_index("topic"))[0].as_py()
            if not args.no_partition_by_topic:
                batch = batch.drop_columns(["topic"])
            here = "" if args.no_partition_by_topic else topic
            while batch.num_rows:
                if writer is None or here != key or (limit and rows >= limit):
                    if writer is not None:
                        writer.close()
                    sub = folder if args.no_partition_by_topic else folder / f"topic={topic}"
                    sub.mkdir(parents=True, exist_ok=True)
                    writer = orc.ORCWriter(str(sub / f"part-{token}-{index}.orc"), compression=codec)
                    key, rows, index = here, 0, index + 1
                take = batch.num_rows if not limit else min(batch.num_rows, limit - rows)
                writer.write(pa.Table.from_batches([batch.slice(0, take)]))
                rows += take
                batch = batch.slice(take)
    finally:
        if writer is not None:
            writer.close()


def convert_arrow(args: argparse.Namespace) -> Summary:
    """The same conversion in this process with pyarrow's dataset writer, same layout as Spark's."""
    import pyarrow as pa

    wall = time.perf_counter()
    p = plan(args)
    try:
        schema = row_schema(p)
        if args.format == "orc" and is_remote(args.out):
            raise UsageError("--engine arrow writes ORC to a local OUT only; use parquet, or --engine spark")
        values = plan_values(args, p.topics, schema, p.logs)
        if values is not None and args.format in ("iceberg", "delta"):
            values.catalog = table_options(args, ledger_keys(p))  # the dead letters' tables opened as the data's
        cdc = plan_changes(args, p, values)
        if has_ledger(args.out):
            side = (values.side_folder,) if values is not None and values.side_folder else ()
            if cdc is not None:
                sink = open_out_sink(args, p.topics, cdc.columns(), ledger_keys(p), side, keyed=cdc.keyed())
            else:
                sink = open_out_sink(args, p.topics, schema.names, ledger_keys(p), side)
            return _convert_to_table(args, p, schema, sink, wall, values)
        import pyarrow.dataset as pads  # not before: it imports pandas (0.5 s), which a rerun never needs
        reports = reports_before_read(p)
        say(args, f"kbatch convert (arrow): {plural(len(p.topics), 'topic')}, {plural(len(p.logs), 'partition')}, "
                  f"{size(p.input_bytes)} of log")
        # a remote OUT other than S3 (no offsets ledger there): the files staged under OUT, copied in at the end
        progress = Progress(p.input_bytes, enabled=progress_enabled(args))
        staged = RemoteStaging(args.out, args.mode, args.storage_option)
        file_options = None
        codec = args.compression or "snappy"
        if args.format == "parquet":
            file_options = pads.ParquetFileFormat().make_write_options(
                compression=None if codec == "none" else codec
            )
        rows_per_file = args.max_rows_per_file or 0
        group = args.row_group_rows or min(1 << 20, rows_per_file or 1 << 20)
        partitioning = None
        if not args.no_partition_by_topic:
            partitioning = pads.partitioning(pa.schema([("topic", pa.string())]), flavor="hive")
        try:
            with staged as tmp:
                source = EndOnError(_arrow_batches(p, args, reports, progress))  # raised after the writer
                reader = pa.RecordBatchReader.from_batches(schema, source)
                pads.write_dataset(
                    reader,
                    str(tmp),
                    filesystem=staged.fs,
                    format=args.format,
                    partitioning=partitioning,
                    basename_template=f"part-{staged.token}-{{i}}.{args.format}",
                    existing_data_behavior="overwrite_or_ignore",
                    file_options=file_options,
                    max_rows_per_file=rows_per_file,
                    max_rows_per_group=group,
                    min_rows_per_group=min(group, 1 << 16),
                    max_open_files=4096,
                    preserve_order=True,
                )
                source.check()
                written = staged.has_data()
                if not written:
                    staged.discard()  # nothing to write: OUT is not created
        finally:
            progress.close()
        read_ranges(p, reports, Ledger())
        for r in reports.values():
            finish_report(r, r.records, filtered=False)
        notes = p.notes + log_notes(p.logs)
    finally:
        p.close()
    return Summary(
        len(p.topics),
        len(p.logs),
        sum(r.records for r in reports.values()),
        p.input_bytes,
        0,
        time.perf_counter() - wall,
        "arrow",
        args.format,
        args.out,
        written=written,
        mode=args.mode,
        left_out=p.left_out,
        per_partition=list(reports.values()),
        notes=notes,
    )


def _convert_to_table(args: argparse.Namespace, p: Plan, schema: Any, sink: Sink, wall: float,
                      values: ValuePlan | None = None) -> Summary:
    """The arrow engine into a table sink: with ``--mode append``, each partition from where the
    table's ledger ends (nothing read nor committed when nothing is new); the data and the new
    ledger committed together (:mod:`kbatch.tables`). With ``values`` (``--values``), each topic's
    values decoded into its own schema, the dead letters committed just before (or with) the data."""
    r = resume_run(args, p, sink, wall)
    if r.done is not None:
        return r.done
    reports = reports_before_read(p)
    say(args, f"kbatch convert (arrow): {plural(len(p.topics), 'topic')}, {plural(len(p.logs), 'partition')}, "
              f"{size(p.input_bytes)} of log to {args.format}")
    progress = Progress(p.input_bytes, enabled=progress_enabled(args))
    commits: list[TableCommit] = []
    try:
        with sink:
            sink.open(values.schemas if values is not None else schema)
            batches = _arrow_batches(p, args, reports, progress)
            if values is not None:
                values.start(sink)
                batches = values.decode(batches)
            if isinstance(sink, FolderSink) and args.format == "orc":  # pyarrow's dataset writer has no ORC
                _write_orc(pa_reader(schema, batches), sink.folder, args, sink.run.partition("@")[0])
                sink.adopt(sum(rep.records for rep in reports.values()))
            else:
                sink.write(batches)
            converted = read_ranges(p, reports, r.converted)
            if values is not None and values.cdc is not None:  # --as-of by the envelopes' time
                converted = values.cdc.trim(converted)
                r.notes += values.cdc.notes()
            if len(converted):
                if values is not None:
                    values.commit(converted)
                commits = sink.commit(r.held.advanced(converted), converted)
            else:
                sink.abort()
    except TableError as exc:
        if values is None:
            raise
        raise values.explain(exc) from None
    finally:
        progress.close()
        if values is not None:
            values.close()
    for rep in reports.values():
        finish_report(rep, rep.records, filtered=False)
    dead: dict[str, Any] = {}
    if values is not None:
        for (topic, partition, root), n in values.dead.items():
            reports[(topic, partition, root) if p.opts.root_columns else (topic, partition)].dead_letters = n
        commits = values.commits + commits
        r.notes += values.summary_notes()
        dead = {"dead_letters": values.total(), "dead_letter_path": values.where, "value_errors": values.commonest()}
    return Summary(
        len(p.topics), len(p.logs), sum(rep.records for rep in reports.values()), p.input_bytes,
        sum(c.bytes for c in commits), time.perf_counter() - wall, "arrow", args.format, args.out,
        written=bool(commits), mode=args.mode, left_out=p.left_out, per_partition=list(reports.values()),
        notes=r.notes + p.notes + log_notes(p.logs) + [n for c in commits for n in c.notes], tables=commits,
        gaps=r.gaps, **dead,
    )


def pa_reader(schema: Any, batches: Any) -> Any:
    """``batches`` as a ``pyarrow.RecordBatchReader`` of ``schema``."""
    import pyarrow as pa

    return pa.RecordBatchReader.from_batches(schema, batches)
