"""``kbatch convert ROOT OUT``: a Kafka ``log.dirs`` root to Parquet (or ORC, JSON), with Spark.

The README's main job. By default it runs Spark in local mode (``local[*]``) with kbatch's
``kafka-log`` data source, optional filters, and writes the output partitioned by topic
(``OUT/topic=<name>/part-*.parquet``), printing progress and a summary::

    kbatch convert /var/lib/kafka/data out/ --format parquet
    kbatch convert /var/lib/kafka/data out/ --master spark://host:7077 --subscribe 'orders.*'
    kbatch convert /var/lib/kafka/data out/ --engine arrow     # no Spark, in-process

``--engine arrow`` does the same conversion in this process with pyarrow (Parquet or ORC),
for small data or machines without Java.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Summary", "add_arguments", "convert_arrow", "convert_spark", "run", "spark_config", "task_bytes"]

FORMATS = ("parquet", "orc", "json")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``convert``'s arguments to ``parser`` (a subcommand parser)."""
    parser.add_argument("root", help="a Kafka log.dirs root (or one <topic>-<partition> directory)")
    parser.add_argument("out", help="output directory (partitioned by topic)")
    parser.add_argument("--format", choices=FORMATS, default="parquet", help="output format (default parquet)")
    parser.add_argument(
        "--engine",
        choices=("spark", "arrow"),
        default="spark",
        help="spark (default): the kafka-log data source; arrow: in-process with pyarrow, no Spark",
    )
    parser.add_argument(
        "--master", default=None, help="Spark master URL (default local[*]; e.g. spark://host:7077, yarn)"
    )
    sel = parser.add_mutually_exclusive_group()
    sel.add_argument("--subscribe", metavar="TOPICS", help="comma-separated topics")
    sel.add_argument("--subscribe-pattern", metavar="REGEX", help="topics matching this regular expression")
    sel.add_argument("--assign", metavar="JSON", help='partitions: {"topic": [0, 1]}')
    parser.add_argument("--starting-offsets", default=None, help='earliest (default) or {"t": {"0": 5}}')
    parser.add_argument("--ending-offsets", default=None, help='latest (default) or {"t": {"0": 9}}')
    parser.add_argument("--starting-timestamp", type=int, default=None, help="milliseconds since the epoch")
    parser.add_argument("--ending-timestamp", type=int, default=None, help="milliseconds since the epoch")
    parser.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed leaves out aborted transactions",
    )
    parser.add_argument("--no-headers", action="store_true", help="leave the headers column out")
    parser.add_argument("--extra-columns", action="store_true", help="add leaderEpoch, producerId, ...")
    parser.add_argument("--where", default=None, help="a Spark SQL filter, e.g. \"timestamp >= '2024-01-01'\"")
    parser.add_argument("--no-partition-by-topic", action="store_true", help="one flat output directory")
    parser.add_argument(
        "--mode", choices=("errorifexists", "overwrite", "append"), default="errorifexists", help="if OUT exists"
    )
    parser.add_argument("--min-partitions", type=int, default=None, help="at least this many Spark tasks")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration (repeatable)"
    )
    parser.add_argument("--no-fail-on-data-loss", action="store_true", help="skip corrupt batches instead of failing")
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress, only the summary")
    parser.add_argument("--json-summary", action="store_true", help="print the summary as one JSON line")
    parser.set_defaults(handler=run)


@dataclass
class Summary:
    """What a conversion did."""

    topics: int
    partitions: int
    records: int
    input_bytes: int
    output_bytes: int
    seconds: float
    engine: str
    format: str
    out: str

    @property
    def records_per_second(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def lines(self) -> list[str]:
        rate = _size(int(self.input_bytes / self.seconds) if self.seconds else 0)
        return [
            (
                f"converted {self.records:,} records from {self.topics} topics, {self.partitions} partitions "
                f"({_size(self.input_bytes)} of log) to {self.format} in {self.out} ({_size(self.output_bytes)})"
            ),
            f"time {self.seconds:.1f} s, {self.records_per_second:,.0f} records/s ({rate}/s), engine {self.engine}",
        ]

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["records_per_second"] = round(self.records_per_second, 1)
        return d


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))


def _source_options(args: argparse.Namespace) -> dict[str, str]:
    opts: dict[str, str] = {
        "includeHeaders": "false" if args.no_headers else "true",
        "extraColumns": "true" if args.extra_columns else "false",
        "isolationLevel": args.isolation_level,
        "failOnDataLoss": "false" if args.no_fail_on_data_loss else "true",
    }
    for name, value in (
        ("subscribe", args.subscribe),
        ("subscribePattern", args.subscribe_pattern),
        ("assign", args.assign),
        ("startingOffsets", args.starting_offsets),
        ("endingOffsets", args.ending_offsets),
        ("startingTimestamp", args.starting_timestamp),
        ("endingTimestamp", args.ending_timestamp),
        ("minPartitions", args.min_partitions),
    ):
        if value is not None:
            opts[name] = str(value)
    return opts


def _say(args: argparse.Namespace, msg: str) -> None:
    if not args.quiet:
        print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Spark


class _Progress(threading.Thread):
    """Print the running stages' task counts every second (Spark's status tracker)."""

    def __init__(self, sc: Any) -> None:
        super().__init__(daemon=True)
        self.sc = sc
        self.done = threading.Event()

    def run(self) -> None:
        tracker = self.sc.statusTracker()
        last = ""
        while not self.done.wait(1.0):
            parts = []
            for sid in tracker.getActiveStageIds():
                info = tracker.getStageInfo(sid)
                if info is not None:
                    parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks")
            line = ", ".join(parts)
            if line and line != last:
                print(f"  {line}", file=sys.stderr, flush=True)
                last = line


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
    """The configuration ``kbatch convert`` starts Spark with; ``conf`` items (``KEY=VALUE``) win.

    >>> c = spark_config("local[2]", ["spark.sql.maxConcurrentOutputFileWriters=0"])
    >>> c["spark.master"], c["spark.sql.maxConcurrentOutputFileWriters"]
    ('local[2]', '0')
    """
    master = master or "local[*]"
    out = {
        "spark.master": master,
        "spark.app.name": "kbatch convert",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.ui.showConsoleProgress": "false",
        # partitionBy("topic") sorts each task's rows by topic before writing, as a Python
        # data source cannot report an ordering; one open writer per topic instead needs no sort
        "spark.sql.maxConcurrentOutputFileWriters": str(CONCURRENT_WRITERS),
    }
    if master.startswith("local"):
        out["spark.driver.memory"] = _driver_memory()
    for item in conf:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--conf needs KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def task_bytes(input_bytes: int, cores: int) -> int:
    """Bytes of log per Spark task, as Spark's file source sizes its splits: 128 MiB, less to give
    every core a task, and no less than opening four segments costs.

    >>> task_bytes(10 << 30, 8) >> 20, task_bytes(46 << 20, 2) >> 20, task_bytes(1000, 2) >> 10
    (128, 23, 128)
    """
    from kbatch.spark._plan import DEFAULT_MAX_PARTITION_BYTES, SEGMENT_OPEN_COST

    per_core = input_bytes // max(1, cores)
    return max(4 * SEGMENT_OPEN_COST, min(DEFAULT_MAX_PARTITION_BYTES, per_core))


def _spark_session(args: argparse.Namespace) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from kbatch.spark._plan import env_pythonpath

    here = env_pythonpath()  # make kbatch importable by Spark's Python workers (source checkouts)
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *[p for p in paths if p]])
    from pyspark.sql import SparkSession

    builder = SparkSession.builder
    for key, value in spark_config(args.master, args.conf).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def convert_spark(args: argparse.Namespace) -> Summary:
    """Run the Spark pipeline: kafka-log source -> filters -> files partitioned by topic."""
    import kbatch.spark
    from kbatch.spark._plan import Options, select_logs

    opts = _source_options(args)
    parsed = Options.parse({**opts, "path": args.root})
    logs = select_logs(parsed)
    topics = sorted({d.topic for d in logs})
    partitions = len(logs)
    input_bytes = sum(s.size for d in logs for s in d.segments)
    for d in logs:
        d.close()
    _say(args, f"kbatch convert: {len(topics)} topics, {partitions} partitions, {_size(input_bytes)} of log")
    t0 = time.perf_counter()
    spark = _spark_session(args)
    _say(args, f"Spark {spark.version} at {spark.sparkContext.master} ({time.perf_counter() - t0:.1f} s to start)")
    kbatch.spark.register(spark)
    if "minPartitions" not in opts:
        opts["maxPartitionBytes"] = str(task_bytes(input_bytes, spark.sparkContext.defaultParallelism))
    t0 = time.perf_counter()
    progress = _Progress(spark.sparkContext)
    if not args.quiet:
        progress.start()
    try:
        df = spark.read.format("kafka-log").options(**opts).load(args.root)
        if args.where:
            df = df.where(args.where)
        writer = df.write.mode(args.mode).format(args.format)
        if not args.no_partition_by_topic:
            writer = writer.partitionBy("topic")
        writer.save(args.out)
        seconds = time.perf_counter() - t0
        records = spark.read.format(args.format).load(args.out).count() if args.mode != "append" else -1
    finally:
        progress.done.set()
    return Summary(
        len(topics),
        partitions,
        records,
        input_bytes,
        _tree_bytes(Path(args.out)),
        seconds,
        "spark",
        args.format,
        args.out,
    )


# ---------------------------------------------------------------------------------------------
# Arrow (no Spark)


def convert_arrow(args: argparse.Namespace) -> Summary:
    """The same conversion in this process with pyarrow: ``OUT/topic=<t>/partition-<p>.<fmt>``."""
    import pyarrow as pa

    from kbatch.arrow import kafka_schema, to_record_batches
    from kbatch.spark._plan import Options, resolve_range, select_logs

    if args.format == "json":
        raise ValueError("--engine arrow writes parquet or orc; use --engine spark for json")
    if args.where:
        raise ValueError("--where needs --engine spark")
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        if args.mode == "errorifexists":
            raise FileExistsError(f"{out} exists and is not empty (use --mode overwrite)")
        if args.mode == "overwrite":
            import shutil

            shutil.rmtree(out)
    opts = Options.parse({**_source_options(args), "path": args.root})
    logs = select_logs(opts)
    t0 = time.perf_counter()
    records = 0
    input_bytes = sum(s.size for d in logs for s in d.segments)
    schema = kafka_schema(include_headers=opts.include_headers, extra_columns=opts.extra_columns)
    if not args.no_partition_by_topic:
        schema = schema.remove(schema.get_field_index("topic"))
    _say(
        args,
        f"kbatch convert (arrow): {len({d.topic for d in logs})} topics, {len(logs)} partitions, "
        f"{_size(input_bytes)} of log",
    )
    try:
        for log in logs:
            start, end = resolve_range(log, opts)
            folder = out if args.no_partition_by_topic else out / f"topic={log.topic}"
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{log.topic}-{log.partition}.{args.format}"
            n = 0
            writer: Any
            if args.format == "parquet":
                import pyarrow.parquet as pq

                writer = pq.ParquetWriter(target, schema)
            else:
                import pyarrow.orc as orc

                writer = orc.ORCWriter(target)
            try:
                tables = log.iter_tables(
                    start_offset=start,
                    end_offset=end,
                    isolation_level=opts.isolation_level,  # type: ignore[arg-type]
                    on_corruption="raise" if opts.fail_on_data_loss else "skip",
                    verify_crc=opts.verify_crc,
                )
                for table in tables:
                    for batch in to_record_batches(
                        table,
                        topic=log.topic,
                        partition=log.partition,
                        include_headers=opts.include_headers,
                        extra_columns=opts.extra_columns,
                    ):
                        if not args.no_partition_by_topic:
                            batch = batch.drop_columns(["topic"])
                        writer.write(pa.Table.from_batches([batch], schema=schema))
                        n += batch.num_rows
            finally:
                writer.close()
            records += n
            _say(args, f"  {log.topic}-{log.partition}: {n:,} records [{start}, {end}) -> {target}")
    finally:
        for log in logs:
            log.close()
    seconds = time.perf_counter() - t0
    return Summary(
        len({d.topic for d in logs}),
        len(logs),
        records,
        input_bytes,
        _tree_bytes(out),
        seconds,
        "arrow",
        args.format,
        str(out),
    )


def run(args: argparse.Namespace) -> int:
    """Run ``kbatch convert``; print the summary; return the exit status (1 on error)."""
    try:
        summary = convert_arrow(args) if args.engine == "arrow" else convert_spark(args)
    except (ValueError, FileNotFoundError, FileExistsError, ImportError) as exc:
        print(f"kbatch convert: error: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # Spark's errors (AnalysisException, Py4JJavaError...): one line, not a trace
        if type(exc).__module__.startswith(("pyspark", "py4j")):
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"kbatch convert: Spark failed: {first}", file=sys.stderr)
            return 1
        raise
    if args.json_summary:
        print(json.dumps(summary.as_dict()))
    else:
        for line in summary.lines():
            print(line)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kbatch._convert ROOT OUT ...`` (until ``kbatch convert`` is wired in)."""
    parser = argparse.ArgumentParser(prog="kbatch convert", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
