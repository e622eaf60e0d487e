"""``kbatch convert --engine spark``: the checked plan's tasks run by Spark, written by its writers.

The session (:func:`spark_config`: ``local[*]`` by default, the driver's memory, no web UI;
Spark's own error logs quieted, and Ctrl-C one line as under the arrow engine), the planned
tasks as a DataFrame (:func:`spark_tasks` of :func:`task_bytes`, :func:`planned_frame`), the
write (``--where``; partitioned by topic into the sink's folder, or staged for Iceberg and
Delta; ``--upsert`` and ``--cdc``: changes staged by the executors and merged by this process,
:mod:`kbatch.convert._spark_changes`), the progress line drawn from Spark's status tracker, the
records written counted back per partition, and a failure said in kbatch's words
(:func:`spark_error_line`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import threading
import time
from collections.abc import Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from kbatch._progress import Progress, plural, size
from kbatch.errors import TableError
from kbatch.plan import (
    DEFAULT_MAX_PARTITION_BYTES,
    ROOT_COLUMN,
    SEGMENT_OPEN_COST,
    LogSlice,
    Options,
    env_pythonpath,
    plan_slices,
    plan_tasks,
)
from kbatch.spark import (
    JAVA_VERSIONS,
    JavaError,
    MasterError,
    check_master,
    check_transform,
    start_session,
    write_staged,
)
from kbatch.tables import FolderSink, Ledger, RemoteFolderSink, Sink, TableCommit, has_data_files

from ._errors import ConvertError, UsageError
from ._plan import Plan, ledger_keys, plan, plan_changes, row_schema
from ._reports import find_skipped, finish_report, read_ranges, reports_and_notes
from ._resume import Resumed, resume_run
from ._sinks import has_ledger, is_remote, open_out_sink, table_options
from ._spark_changes import stage_changes, staged_changes
from ._spark_values import count_dead_letters, take_dead_letters, write_values
from ._summary import Summary, progress_enabled, say
from ._value_plan import plan_values

__all__ = ["CONCURRENT_WRITERS", "convert_spark", "planned_frame", "spark_config", "spark_error_line", "spark_tasks",
           "task_bytes"]


def spark_error_line(exc: BaseException) -> str:
    """kbatch's own one-line message out of a Spark/Py4J exception's text, else its first line.

    An error kbatch raises in a Python worker reaches the driver inside a JVM stack trace
    as the worker's Python traceback; its last line reads ``kbatch.errors.CRCError: ...``
    (or ``ValueError: ...`` for kbatch's checks). That line is what the user needs.
    """
    text = str(exc)
    found = re.findall(r"^\s*(kbatch\.errors\.\w+|[A-Za-z_]*(?:Error|Exception)): (.+)$", text, re.MULTILINE)
    kbatch_lines = [msg for kind, msg in found if kind.startswith("kbatch.errors.")]
    if kbatch_lines:
        return str(kbatch_lines[-1]).strip()
    python = [msg for kind, msg in found if kind in ("ValueError", "FileNotFoundError", "OSError")]
    if python:
        return str(python[-1]).strip()
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return first[:500]


class _Progress(threading.Thread):
    """Poll Spark's status tracker and draw the estimated progress of the write job."""

    def __init__(self, sc: Any, progress: Progress, records: int) -> None:
        super().__init__(daemon=True)
        self.sc = sc
        self.progress = progress
        self.records = records  # expected from the batch headers
        self.done = threading.Event()

    def run(self) -> None:
        tracker = self.sc.statusTracker()
        seen: dict[int, tuple[int, int]] = {}
        while not self.done.wait(0.5):
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None and info.numTasks:
                    seen[sid] = (info.numCompletedTasks, info.numTasks)
            if seen:
                # the write job's stage is the largest one seen
                completed, total = max(seen.values(), key=lambda ct: ct[1])
                fraction = completed / total
                self.progress.update(self.progress.total * fraction, records=int(self.records * fraction), approx=True)


#: Parquet/ORC files each task keeps open at once when writing partitioned by topic; past it
#: Spark falls back to sorting the task's remaining rows.
CONCURRENT_WRITERS = 64


def _driver_memory() -> str:
    """A quarter of this machine's memory, 1 to 8 GiB: in local mode the driver's JVM also runs
    every task (Spark's default, 1 GiB, leaves little room for 2 x 64 MiB Arrow batches per core
    and a Parquet writer per topic)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{max(1, min(8, total // (4 << 30)))}g"


def spark_config(master: str | None, conf: Sequence[str] = ()) -> dict[str, str]:
    """The configuration ``kbatch convert`` starts Spark with; ``conf`` items (``KEY=VALUE``) win,
    except that JVM options (``*.extraJavaOptions``) given twice are joined, not replaced.

    >>> c = spark_config("local[2]", ["spark.sql.maxConcurrentOutputFileWriters=0"])
    >>> c["spark.master"], c["spark.sql.maxConcurrentOutputFileWriters"]
    ('local[2]', '0')
    >>> spark_config(None, ["spark.driver.extraJavaOptions=-Da=1", "spark.driver.extraJavaOptions=-Db=2"])[
    ...     "spark.driver.extraJavaOptions"]
    '-Da=1 -Db=2'
    """
    master = master or "local[*]"
    out = {
        "spark.master": master,
        "spark.app.name": "kbatch convert",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.ui.showConsoleProgress": "false",
        # no web UI (its server is about a tenth of the JVM's start-up; kbatch draws its own
        # progress from the status tracker): --conf spark.ui.enabled=true to watch the job there
        "spark.ui.enabled": "false",
        # partitionBy("topic") sorts each task's rows by topic before writing, as rows from
        # Python carry no ordering; one open writer per topic instead needs no sort
        "spark.sql.maxConcurrentOutputFileWriters": str(CONCURRENT_WRITERS),
    }
    if master.startswith("local"):
        out["spark.driver.memory"] = _driver_memory()
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--conf needs KEY=VALUE, got {item!r}")
        key, value = key.strip(), value.strip()
        if key.endswith(".extraJavaOptions") and out.get(key):
            value = f"{out[key]} {value}"  # -q's log4j option and the user's, both
        out[key] = value
    return out


def task_bytes(cost: int, cores: int) -> int:
    """The cost of log per Spark task, as Spark's file source sizes its splits: 128 MiB, less to
    give every core a task, and no less than opening four segments costs.

    ``cost`` is the log's bytes plus :data:`~kbatch.plan.SEGMENT_OPEN_COST` per segment (what
    the planner packs), as Spark counts a file's length plus ``openCostInBytes``: four
    partitions of 43 MiB on 2 cores then make 2 tasks, not 4.

    >>> task_bytes(10 << 30, 8) >> 20, task_bytes(46 << 20, 2) >> 20, task_bytes(1000, 2) >> 10
    (128, 23, 128)
    """
    per_core = cost // max(1, cores)
    return max(4 * SEGMENT_OPEN_COST, min(DEFAULT_MAX_PARTITION_BYTES, per_core))


def _spark_session(args: argparse.Namespace) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    here = env_pythonpath()  # make kbatch importable by Spark's Python workers (source checkouts)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *[p for p in paths if p]])
    if (args.master or "local").startswith("local"):
        # one machine: no routable address to look for (Spark warns when it finds only loopback)
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return start_session(spark_config(args.master, args.conf))


def _quiet_spark_errors(spark: Any) -> None:
    """kbatch reports a failure itself, in one line: Spark's own error logs would repeat it with
    its whole stack (a failed task logs it at ERROR in the JVM; PySpark logs an analysis error
    with its query context on the Python side)."""
    import logging

    spark.sparkContext.setLogLevel("FATAL")
    try:
        from pyspark.logger import PySparkLogger
    except ImportError:  # pragma: no cover - PySpark before 4.0
        return
    for name in ("SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        PySparkLogger.getLogger(name).setLevel(logging.CRITICAL)


class _NotPy4J:
    """A logging filter: drops the records Py4J logs on the root logger (``logging.exception``
    of a call cut by Ctrl-C), which would print a traceback."""

    @staticmethod
    def filter(record: Any) -> bool:
        return f"{os.sep}py4j{os.sep}" not in record.pathname


def _plain_interrupts() -> None:
    """Ctrl-C under Spark as under the arrow engine: ``KeyboardInterrupt`` in the main thread,
    reported by ``kbatch`` in one line (status 130), the JVM's jobs ended with the session.

    PySpark's SIGINT handler calls ``cancelAllJobs`` through Py4J from inside the signal, while
    the main thread waits in a Py4J call on the same connection: a reentrant read, and Py4J
    logs the failures with their tracebacks, some on the root logger (``logging.exception``),
    some on its own ``py4j.*`` loggers (closing the cut connection). The default handler
    replaces PySpark's; the root logger drops Py4J's records (and keeps Python's last-resort
    output for the others, so that ``logging.exception`` installs no handler of its own), and
    the ``py4j`` loggers end in a null handler (a root logger's filters never see records that
    propagate from below)."""
    import logging
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, signal.default_int_handler)
    root = logging.getLogger()
    if not root.handlers and logging.lastResort is not None:
        root.addHandler(logging.lastResort)
    if not any(isinstance(f, _NotPy4J) for f in root.filters):
        root.addFilter(_NotPy4J())
    py4j = logging.getLogger("py4j")
    py4j.propagate = False
    if not py4j.handlers:
        py4j.addHandler(logging.NullHandler())


def _filtered(args: argparse.Namespace, df: Any) -> Any:
    """``df`` with ``--where`` applied (a filter Spark cannot analyse: UsageError)."""
    if args.where:
        try:
            df = df.where(args.where)
        except Exception as exc:  # noqa: BLE001 - Spark's AnalysisException/ParseException: a user mistake
            raise UsageError(f"--where {args.where!r}: {spark_error_line(exc)}") from None
    return df


def _write_spark(spark: Any, args: argparse.Namespace, df: Any, target: str) -> None:
    df = _filtered(args, df)
    # the staging folder is ours and empty: "append" writes into it as it is
    writer = df.write.mode("append" if target != args.out else args.mode).format(args.format)
    if args.compression:
        codec = "zlib" if args.format == "orc" and args.compression == "gzip" else args.compression
        writer = writer.option("compression", codec)
    if args.max_rows_per_file:
        writer = writer.option("maxRecordsPerFile", str(args.max_rows_per_file))
    if not args.no_partition_by_topic:
        writer = writer.partitionBy("topic")
    writer.save(target)


def spark_tasks(p: Plan, cores: int) -> tuple[list[tuple[LogSlice, ...]], Options]:
    """The Spark tasks of a checked plan and the options they were planned with: tasks of
    :func:`task_bytes` for ``cores`` (or ``--min-partitions``) over exactly the partitions and
    ranges ``plan()`` resolved and the reports describe."""
    opts = p.opts
    if not opts.min_partitions:
        cost = p.input_bytes + SEGMENT_OPEN_COST * sum(len(d.segments) for d in p.logs)
        opts = replace(opts, max_bytes_per_partition=task_bytes(cost, cores))
    return plan_tasks(plan_slices(p.logs, p.ranges, opts, p.pieces), opts), opts


def planned_frame(spark: Any, p: Plan) -> Any:
    """The checked plan's records as a DataFrame (:func:`spark_tasks` for the session's cores)."""
    from kbatch.spark import task_frame  # defers pyspark

    return task_frame(spark, *spark_tasks(p, spark.sparkContext.defaultParallelism))


def _written_counts(spark: Any, args: argparse.Namespace, folder: str) -> dict[tuple[Any, ...], tuple[int, int, int]]:
    """``(topic, partition) -> (records, first offset, last offset)`` of what was written to ``folder``
    (``(topic, partition, root)`` with the root columns, as the reports' keys)."""

    labelled = getattr(args, "recursive", False) or getattr(args, "replicas", "best") == "all"
    keys = ["topic", "partition", ROOT_COLUMN] if labelled else ["topic", "partition"]
    local = not is_remote(folder)
    if local and not has_data_files(Path(folder)):
        return {}
    if local and args.format in ("parquet", "orc"):
        import pyarrow.dataset as pads

        part = None if args.no_partition_by_topic else "hive"
        dataset = pads.dataset(folder, format=args.format, partitioning=part)
        t = dataset.to_table(columns=[*keys, "offset"])
        g = t.group_by(keys).aggregate([("offset", "count"), ("offset", "min"), ("offset", "max")])
        return {
            tuple(r[k] for k in keys): (r["offset_count"], r["offset_min"], r["offset_max"]) for r in g.to_pylist()
        }
    from pyspark.sql import functions as F

    df = spark.read.format(args.format).load(folder)
    rows = df.groupBy(*keys).agg(F.count("*"), F.min("offset"), F.max("offset")).collect()
    n = len(keys)
    return {(r[0], int(r[1]), *r[2:n]): (int(r[n]), int(r[n + 1]), int(r[n + 2])) for r in rows}


def convert_spark(args: argparse.Namespace) -> Summary:
    """Run the Spark pipeline: the planned tasks (read as the ``kafka-log`` source reads) -> filters
    -> files partitioned by topic."""
    wall = time.perf_counter()
    try:
        check_master(args.master)  # before the JVM: an unreachable master costs it a minute of retries
    except MasterError as exc:
        raise UsageError(str(exc)) from None
    p = plan(args)
    sink: Sink | None = None
    resumed = Resumed(Ledger(), [], Ledger(), [])
    schema = row_schema(p)
    cdc = None
    try:
        values = plan_values(args, p.topics, schema, p.logs)  # --values: each topic's reader schemas (a local OUT)
        if values is not None and args.format in ("iceberg", "delta"):
            values.catalog = table_options(args, ledger_keys(p))  # the dead letters' tables opened as the data's
        cdc = plan_changes(args, p, values)
    except BaseException:
        p.close()
        raise
    #: --upsert, --cdc: the executors stage changes, the driver merges them (kbatch.convert._spark_changes)
    keyed = bool(getattr(args, "upsert", False)) or cdc is not None
    if has_ledger(args.out):  # the files and the offsets ledger committed together
        side = (values.side_folder,) if values is not None and values.side_folder else ()
        if cdc is not None:
            sink = open_out_sink(args, p.topics, cdc.columns(), ledger_keys(p), side, keyed=cdc.keyed())
        else:
            sink = open_out_sink(args, p.topics, schema.names, ledger_keys(p), side)
        for _name, transform in [] if keyed else sink.file_partitions():  # keyed: the sink writes its files
            try:  # what the executors cannot compute: said before the JVM starts
                check_transform(transform, sink.format)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        resumed = resume_run(args, p, sink, wall)
        if resumed.done is not None:  # nothing new: no JVM started
            p.close()
            return resumed.done
    say(args, f"kbatch convert: {plural(len(p.topics), 'topic')}, {plural(len(p.logs), 'partition')}, "
              f"{size(p.input_bytes)} of log")
    if args.quiet:
        import warnings

        warnings.filterwarnings("ignore", module="pyspark")
    # the partitions' reports (a header scan of every segment) while the JVM starts
    scan = ThreadPoolExecutor(1, thread_name_prefix="kbatch-reports")
    explained = scan.submit(reports_and_notes, p)
    scan.shutdown(wait=False)
    t0 = time.perf_counter()
    try:
        spark = _spark_session(args)
    except JavaError as exc:
        futures.wait([explained])
        raise UsageError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 - Java too old or broken, bad --conf: one line
        futures.wait([explained])
        raise ConvertError(f"Spark did not start: {spark_error_line(exc)} (Spark 4 needs Java "
                           f"{JAVA_VERSIONS}: set JAVA_HOME to one, or use --engine arrow)") from None
    startup = time.perf_counter() - t0
    reports, notes = explained.result()
    _quiet_spark_errors(spark)
    _plain_interrupts()
    say(args, f"Spark {spark.version} at {spark.sparkContext.master} ({startup:.1f} s to start)")
    df = planned_frame(spark, p)
    progress = Progress(p.input_bytes, enabled=progress_enabled(args))
    expected = sum(r.span - r.control_markers - r.aborted_records - r.compacted_offsets for r in reports.values())
    poller = _Progress(spark.sparkContext, progress, expected)
    if progress.enabled:
        poller.start()
    counts: dict[tuple[Any, ...], tuple[int, int, int]] = {}
    commits: list[TableCommit] = []
    written = True
    try:
        if sink is None:  # a remote OUT without a ledger (not s3): Spark's own mode handling
            _write_spark(spark, args, df, args.out)
            counts = _written_counts(spark, args, args.out)
        else:
            assert sink is not None
            with sink:  # Spark's executors write into the sink's folder; this process commits it
                sink.open(schema if values is None else values.schemas)
                if keyed:  # Iceberg, Delta: the executors' changes merged by this process at the commit
                    if values is not None:
                        values.start(sink)
                    staged = str(sink.staging())
                    counts = stage_changes(spark, *spark_tasks(p, spark.sparkContext.defaultParallelism), p.topics,
                                           values, staged)
                    sink.write(staged_changes(staged, p.topics, schema if values is None else values.schemas, cdc))
                    if values is not None:
                        take_dead_letters(values, staged)  # (those at or past an --as-of cut left out)
                elif values is not None and not isinstance(sink, FolderSink):  # Iceberg, Delta: staged files
                    values.start(sink)
                    staged = str(sink.staging())
                    write_values(spark, *spark_tasks(p, spark.sparkContext.defaultParallelism), p.topics, values,
                                 staged, lambda frame: write_staged(_filtered(args, frame), sink,
                                                                    compression=args.compression,
                                                                    max_rows_per_file=args.max_rows_per_file))
                    counts = _written_counts(spark, argparse.Namespace(**{**vars(args), "format": "parquet",
                                                                           "no_partition_by_topic": False}), staged)
                    take_dead_letters(values, staged)
                elif values is not None:  # each topic decoded by the executors, its dead letters beside
                    assert isinstance(sink, FolderSink)  # --values: a local parquet OUT (check_arguments)
                    folder = str(sink.folder)
                    if values.side_folder is None:  # --dead-letter PATH outside OUT: a folder sink of its own
                        values.start(sink)
                    write_values(spark, *spark_tasks(p, spark.sparkContext.defaultParallelism), p.topics, values,
                                 folder, lambda frame: _write_spark(spark, args, frame, folder))
                    counts = _written_counts(spark, args, folder)
                    if values.side_folder is None:
                        take_dead_letters(values, folder)  # committed to PATH just before the data
                    else:
                        count_dead_letters(values, folder)  # committed with the data
                elif isinstance(sink, (FolderSink, RemoteFolderSink)):
                    _write_spark(spark, args, df, str(sink.folder))
                    counts = _written_counts(spark, args, str(sink.folder))
                else:
                    write_staged(_filtered(args, df), sink, compression=args.compression,
                                 max_rows_per_file=args.max_rows_per_file)
                    counts = _written_counts(spark, argparse.Namespace(**{**vars(args), "format": "parquet",
                                                                           "no_partition_by_topic": False}),
                                             str(sink.staging()))
                if counts or (values is not None and values.total()) or (len(resumed.held) and len(resumed.converted)):
                    sink.adopt(sum(c[0] for c in counts.values()))
                    if not p.opts.fail_on_data_loss and not args.where:
                        find_skipped(p, reports, {k: c[0] for k, c in counts.items()})
                    converted = read_ranges(p, reports, resumed.converted)
                    if cdc is not None:  # --as-of by the envelopes' time
                        converted = cdc.trim(converted)
                        notes = notes + cdc.notes()
                    if values is not None:  # dead letters kept apart (tables, --dead-letter PATH) first
                        values.commit(converted)
                    commits = sink.commit(resumed.held.advanced(converted), converted)
                else:
                    sink.abort()  # no _SUCCESS in a folder without data
                    written = False
    except Exception as exc:
        if isinstance(exc, TableError) and values is not None:
            raise values.explain(exc) from None
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            raise ConvertError(spark_error_line(exc)) from None
        raise
    finally:
        poller.done.set()
        progress.close()
        if values is not None:
            values.close()
    dead: dict[str, Any] = {}
    if values is not None:  # a dead letter is a record read: counted in its partition, as the arrow engine does
        for (topic, partition, root), n in values.dead.items():
            key = (topic, partition, root) if p.opts.root_columns else (topic, partition)
            if not keyed:  # (keyed: counts are every record read already)
                old = counts.get(key, (0, 0, 0))
                counts[key] = (old[0] + n, *old[1:])
            reports[key].dead_letters = n
        notes = values.summary_notes() + notes
        commits = values.commits + commits
        dead = {"dead_letters": values.total(), "dead_letter_path": values.where, "value_errors": values.commonest()}
    for key, rep in reports.items():
        finish_report(rep, counts.get(key, (0, 0, 0))[0], filtered=bool(args.where))
    return Summary(
        len(p.topics),
        len(p.logs),
        sum(c[0] for c in counts.values()),
        p.input_bytes,
        sum(c.bytes for c in commits),
        time.perf_counter() - wall,
        "spark",
        args.format,
        args.out,
        startup_seconds=startup,
        written=written,
        mode=args.mode,
        left_out=p.left_out,
        per_partition=list(reports.values()),
        notes=resumed.notes + notes + [n for c in commits for n in c.notes],
        tables=commits,
        gaps=resumed.gaps,
        **dead,
    )
