"""``kbatch convert``'s command line: its arguments, handled by :func:`~kbatch.convert._run.run`.

:func:`add_arguments` adds them to the ``convert`` subcommand's parser (the typed values' own:
:func:`kbatch.convert._value_plan.add_arguments`); they are checked together before any work
(:func:`kbatch.convert._plan.plan`).
"""

from __future__ import annotations

import argparse

from kbatch.tables import MODES

from ._as_of import AS_OF_BY
from ._cdc import CDC_FORMATS
from ._run import run
from ._value_plan import add_arguments as add_value_arguments

__all__ = ["COMPRESSIONS", "FORMATS", "add_arguments"]

FORMATS = ("parquet", "orc", "json", "iceberg", "delta")
COMPRESSIONS = ("snappy", "zstd", "gzip", "lz4", "none")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``convert``'s arguments to ``parser`` (a subcommand parser)."""
    parser.add_argument("root", help="a Kafka log.dirs root (or one <topic>-<partition> directory), a path or a URL "
                                     "(s3://, gs://, abfs://, hdfs://)")
    parser.add_argument("out", help="output directory (partitioned by topic), a path or an s3:// URL")
    parser.add_argument("--format", choices=FORMATS, default="parquet",
                        help="output format (default parquet); iceberg, delta: a table per topic "
                             "(pyiceberg, deltalake)")
    parser.add_argument(
        "--engine",
        choices=("spark", "arrow"),
        default=None,
        help="spark: the kafka-log data source (the default for parquet, orc and json); arrow: in-process with "
             "pyarrow, no Spark (the default for iceberg, delta and --values); the summary's time line says "
             "which ran and, when not given, why",
    )
    parser.add_argument("--catalog", default=None, metavar="NAME",
                        help="iceberg: a catalog pyiceberg's load_catalog knows (default: SQLite at OUT/catalog.db, "
                             "warehouse OUT; for an s3:// OUT, SQLite where --catalog-option uri=sqlite:////PATH says)")
    parser.add_argument("--catalog-option", action="append", default=[], metavar="KEY=VALUE",
                        help="iceberg: a catalog property, e.g. uri=http://127.0.0.1:8181 (repeatable)")
    parser.add_argument("--namespace", default=None, help="iceberg: the tables' namespace (default kafka)")
    parser.add_argument("--upsert", action="store_true",
                        help="iceberg, delta: one row per key, the latest; a tombstone deletes the key (what log "
                             "compaction keeps); either engine (spark: its executors read, this process merges)")
    parser.add_argument("--cdc", choices=CDC_FORMATS, default=None,
                        help="iceberg, delta (with --values): the records are Debezium change events: the table is "
                             "the database's, the after image of each create, update and snapshot read, the row "
                             "deleted by a delete (and its tombstone), emptied by a truncate, by the record key's "
                             "fields; records that are not envelopes are dead letters; either engine (spark: its "
                             "executors decode, this process merges) (docs/GUIDE.md)")
    parser.add_argument("--cdc-columns", default=None, metavar="LIST",
                        help="--cdc: metadata columns too, comma-separated: op, ts_ms, source.<field> (e.g. "
                             "source.ts_ms, source.lsn, source.pos), partition, offset, timestamp, named as "
                             "Debezium's ExtractNewRecordState names them (__op, __source_ts_ms, ...)")
    parser.add_argument("--as-of", default=None, metavar="TIMESTAMP|OFFSETS",
                        help="--upsert, --cdc: the table as it stood then: a time (milliseconds since the epoch or "
                             "ISO 8601, by --as-of-by) or offsets {\"t\": {\"0\": 9}} (those not applied); a later "
                             "--mode append carries it forward")
    parser.add_argument("--as-of-by", choices=AS_OF_BY, default=None,
                        help="what --as-of TIMESTAMP is compared with: timestamp (the record's, the default), "
                             "source.ts_ms (when the database changed the row) or ts_ms (when Debezium read it), "
                             "with --cdc")
    parser.add_argument("--partition-by", action="append", default=None, metavar="TRANSFORM",
                        help="iceberg, delta: a partition transform, e.g. day(timestamp) (the default), "
                             "hour(timestamp), partition, bucket(16, key) (iceberg), or none (repeatable; --cdc: none)")
    parser.add_argument(
        "--master", default=None, help="Spark master URL (default local[*]; e.g. spark://host:7077, yarn)"
    )
    sel = parser.add_mutually_exclusive_group()
    sel.add_argument("--subscribe", metavar="TOPICS", help="comma-separated topics")
    sel.add_argument("--subscribe-pattern", metavar="REGEX", help="topics matching this regular expression")
    sel.add_argument("--assign", metavar="JSON", help='partitions: {"topic": [0, 1]}')
    parser.add_argument("--include-internal", action="store_true",
                        help="Kafka's internal topics (__consumer_offsets, __transaction_state, ...) are left out by "
                             "default and by --subscribe-pattern, as Kafka's consumer leaves them out of pattern "
                             "subscriptions: this includes them (or name them in --subscribe); their decoded "
                             "contents are in the Python API's kbatch.internal")
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
    parser.add_argument("--where", default=None,
                        help="a Spark SQL filter, e.g. \"timestamp >= '2024-01-01'\" (not with --upsert, --cdc)")
    parser.add_argument("--no-partition-by-topic", action="store_true", help="one flat output directory")
    parser.add_argument("--mode", choices=MODES, default="errorifexists", help="if OUT exists")
    parser.add_argument("--compact-after", type=int, default=None, metavar="FILES",
                        help="after the run, compact OUT (as kbatch compact OUT does) once a table holds this many "
                        "data files or more, some smaller than 128M")
    parser.add_argument("--recursive", action="store_true",
                        help="find partitions at any depth under ROOT (a backup of several log.dirs roots); "
                             "every different log (cluster id, topic id) and one replica of each, with "
                             "'root' and 'clusterId' columns")
    parser.add_argument("--replicas", choices=("best", "all"), default="best",
                        help="a partition found under several roots of one cluster: read the best copy "
                             "(default) or every copy, with its root in the 'root' column")
    parser.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE",
                        help="an option of pyarrow's filesystem for ROOT's (and OUT's) URL scheme, e.g. "
                             "endpoint_override=http://127.0.0.1:9000 (repeatable); Spark tasks get them too")
    parser.add_argument(
        "--compression", choices=COMPRESSIONS, default=None, help="Parquet/ORC codec (default snappy; zstd is smaller)"
    )
    parser.add_argument(
        "--max-rows-per-file", type=int, default=None, metavar="N", help="start a new file after N rows"
    )
    parser.add_argument(
        "--row-group-rows", type=int, default=None, metavar="N", help="rows per Parquet row group (arrow engine)"
    )
    parser.add_argument("--min-partitions", type=int, default=None, help="at least this many Spark tasks")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="extra Spark configuration (repeatable)"
    )
    parser.add_argument("--no-fail-on-data-loss", action="store_true", help="skip corrupt batches instead of failing")
    parser.add_argument(
        "--progress",
        choices=("auto", "always", "never"),
        default="auto",
        help="the in-place progress line: auto (when stderr is a terminal), always, never",
    )
    parser.add_argument(
        "-q", "--quiet", action="store_true", help="print nothing but errors (and --json-summary), Spark's logs too"
    )
    parser.add_argument("--json-summary", action="store_true", help="print the summary as one JSON line")
    add_value_arguments(parser)
    parser.set_defaults(handler=run)
