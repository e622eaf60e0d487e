"""Kafka log directories in Spark: the ``kafka-log`` data source, ``decode_batches`` and ``decode_values``.

>>> import kbatch.spark                                              # doctest: +SKIP
>>> kbatch.spark.register(spark)                                     # doctest: +SKIP
>>> df = spark.read.format("kafka-log").load("/var/lib/kafka/data")  # doctest: +SKIP

The source reads a ``log.dirs`` root (or one ``<topic>-<partition>`` directory) copied out
of a broker and gives exactly the DataFrame Spark's Kafka source gives (``key binary, value
binary, topic string, partition int, offset bigint, timestamp timestamp, timestampType
int``, plus ``headers array<struct<key: string, value: binary>>`` with
``includeHeaders=true``). It is also found without ``register`` once kbatch is installed,
through the top-level ``pyspark_kbatch`` module Spark scans for ``DefaultSource``.

Options (Spark's Kafka source names and meanings; values are strings)

``assign``
    ``{"topicA": [0, 1], "topicB": [2]}``: exactly these partitions.
``subscribe``
    ``topicA,topicB``: every partition of these topics.
``subscribePattern``
    A regular expression matched against whole topic names. Without any of the three,
    every topic except Kafka's internal ones (``__consumer_offsets``, ...): as Kafka's
    consumer (``exclude.internal.topics``), a pattern never selects them; ``subscribe``
    names them, or ``includeInternalTopics=true`` (also ``kafka.exclude.internal.topics=false``)
    lets a pattern select them. Their decoded contents: ``view`` below, or :mod:`kbatch.internal`.
``startingOffsets`` / ``endingOffsets``
    ``earliest`` / ``latest``, or ``{"topicA": {"0": 23, "1": -2}}`` (-2 earliest, -1
    latest); batch default earliest to latest, streaming default latest. Ending offsets
    are exclusive. ``latest`` is the log end offset, or the last stable offset under
    ``read_committed``.
``startingTimestamp`` / ``endingTimestamp``, ``startingOffsetsByTimestamp`` / ``endingOffsetsByTimestamp``
    Milliseconds: the first offset whose record timestamp is >= it (Kafka's
    ``offsetsForTimes``, through ``.timeindex`` when present); they take precedence over
    the offsets options. ``startingOffsetsByTimestampStrategy``: ``error`` (default) or
    ``latest`` when no record is that late.
``maxPartitionBytes`` (also ``maxBytesPerPartition``)
    Bytes of log per Spark task (default 128 MiB, as ``spark.sql.files.maxPartitionBytes``;
    ``64m``, ``1g`` accepted). Consecutive small segments are packed into one task (each
    counting its size plus 32 KiB for opening it), a larger segment is cut at batch
    boundaries, and slices of several partitions share a task; a task opens only the
    segments it reads.
``minPartitions``, ``maxRecordsPerPartition``
    More Spark tasks: at least ``minPartitions`` (the task size lowered to the total
    divided by it), and none spanning more than ``maxRecordsPerPartition`` offsets.
``failOnDataLoss``
    Default true: fail when a requested offset was deleted or a batch is corrupt; false:
    start at the log start and skip (and log) corrupt batches.
``isolationLevel`` (also ``kafka.isolation.level``)
    ``read_uncommitted`` (default) or ``read_committed``: aborted transactions left out,
    nothing at or past the last stable offset.
``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``maxTriggerDelay``
    Streaming, as Spark's Kafka source: at most ``maxOffsetsPerTrigger`` offsets per
    micro-batch (prorated over partitions by backlog); no micro-batch while fewer than
    ``minOffsetsPerTrigger`` offsets wait, unless ``maxTriggerDelay`` (default ``15m``)
    passed since the last one. ``trigger(availableNow=True)`` never waits.
``recursiveFileLookup``
    Spark's file-source name: find partition directories at any depth under the path (a
    backup of several ``log.dirs`` roots). Rows then carry two last columns, ``root`` (the
    ``log.dirs`` root) and ``clusterId`` (its ``meta.properties``' ``cluster.id``, null
    without one). Directories named alike under several roots are replicas of one log only
    when the cluster ids and the topic ids (``partition.metadata``) match; different logs
    (two clusters, a topic created again) are all read, each over its own offsets (a stream
    refuses them). Replicas are read from one copy (``replicas``: ``best``, the highest log
    end offset then the newest leader epoch, the others logged; or ``all``: every copy over
    its own offsets, batch reads only); replicas that disagree fail the query
    (``ReplicasDisagreeError``), or with ``failOnDataLoss=false`` are logged and the best
    copy read.
``storage.<key>``
    The path may be a URL (``s3://``, ``gs://``, ``abfs://``, ``hdfs://``): ``storage.<key>``
    options are the keyword arguments of pyarrow's filesystem for its scheme (e.g.
    ``storage.endpoint_override``, ``storage.region``); they travel with the query to every
    task. Credentials otherwise come as pyarrow finds them on each executor. With
    ``failOnDataLoss=false`` an object gone since planning is logged and its slice skipped.
``filterPushdown``
    kbatch's, default false: filters on ``topic``, ``partition``, ``offset`` and ``timestamp``
    (``=``, ``<``, ``<=``, ``>``, ``>=``, ``IN``) narrow each partition's offsets before
    tasks are planned (a timestamp lower bound finds its first offset from batch headers);
    Spark still filters the rows. Needs PySpark 4.1+ with
    ``spark.sql.python.filterPushdown.enabled=true`` (PySpark refuses a reader that pushes
    filters when it is off). No column pruning: PySpark's Python sources offer none.
``timeIndex`` / ``timeIndexDir``
    kbatch's: with ``filterPushdown`` and a timestamp filter, each task uses and keeps the
    segments' time index (every batch's least and greatest record timestamp,
    :mod:`kbatch.log._timeindex`), so that a later query skips the batches outside its window
    without reading them. ``timeIndex=false``: neither used nor kept. ``timeIndexDir``: the
    index folder (default ``$KBATCH_INDEX_DIR``, else the user's cache folder, on each machine;
    a folder every executor shares makes one query's index serve the next wherever it runs).
    A file that does not match its segment now is never used.
``view``
    kbatch's: Kafka's own state instead of records (:mod:`kbatch.spark._views`):
    ``consumer_offsets``, ``consumer_groups``, ``transactions``, ``producer_snapshots``,
    ``cluster_metadata.<table>``; with ``history`` (every record) and ``offset`` (of the
    metadata image).
``valueFormat`` / ``keyFormat``
    ``binary`` (default), ``avro``, ``json`` or ``protobuf``: the column becomes the typed struct
    of the reader schema,
    followed by ``value_schema_id`` (``key_schema_id``) and, with ``valueErrors=null``
    (``keyErrors``), ``value_error``; decoded in the executors, batch by batch
    (:mod:`kbatch.spark._values`, docs/values.md). The registry: ``schemaRegistry.url`` (with
    ``schemaRegistry.basic.auth.user.info``, ``schemaRegistry.bearer.auth.token``,
    ``schemaRegistry.ssl.ca.location``), ``schemaRegistry.path`` (a ``log.dirs`` root holding
    ``_schemas``, else a directory of schema files), by default the root's own ``_schemas``. The
    reader schema: ``readerSchema`` / ``keyReaderSchema`` (an id, or schema text in the format's
    language, or a local file holding it), by
    default the latest version of the one topic read's subject (``<topic>-value``); reading
    several topics then needs it named. ``valueErrors`` / ``keyErrors``: ``raise`` (default:
    the task fails naming the record) or ``null``. ``recursiveFieldMaxDepth`` (``from_avro``'s):
    how deep a recursive record is kept; without it a recursive reader schema is refused.
    ``valueSchema`` / ``keySchema`` (with ``json``): plain JSON's JSON Schema, no registry.
    Protobuf: ``from_protobuf``'s ``enums.as.ints``, ``emit.default.values``,
    ``recursive.fields.max.depth``, ``convert.any.fields.to.json``, and ``messageName``.
kbatch's own: ``verifyCrc`` (default true), ``includeHeaders`` (Spark's, default false),
``extraColumns`` (``leaderEpoch, producerId, producerEpoch, sequence, isTransactional``),
``maxRecordsPerBatch`` / ``maxBytesPerBatch`` (cap of each Arrow batch handed to Spark:
65,536 rows, 64 MiB).

Any other option name is refused (names compared case-insensitively, as Spark does), with
the closest valid name: a typo such as ``subscribePatern`` fails instead of reading every
topic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from ._dead_letters import split_frame as split_frame  # for kbatch.convert (lazy below: pyarrow, kbatch.values)
    from ._dead_letters import write_dead_letters as write_dead_letters  # for kbatch.convert (lazy below)
    from ._decode import decode_batches
    from ._frame import task_frame as task_frame  # for kbatch.convert (lazy below: pyspark)
    from ._schema import kafka_struct
    from ._source import KafkaLogDataSource  # defers pyspark (a DataSource subclass)
    from ._values import decode_values
    from ._values import ship as ship  # for kbatch.convert (lazy below: pyarrow, kbatch.values)
from ._session import JAVA_VERSIONS as JAVA_VERSIONS
from ._session import JavaError as JavaError
from ._session import MasterError as MasterError
from ._session import check_master as check_master
from ._session import start_session as start_session
from ._staged import check_transform as check_transform
from ._staged import write_staged as write_staged

__all__ = ["KafkaLogDataSource", "decode_batches", "decode_values", "kafka_struct", "register"]

# pyspark is imported on first use, so that kbatch.plan (the planner, used by
# ``kbatch convert --engine arrow``) works without it.
_LAZY = {
    "KafkaLogDataSource": "kbatch.spark._source",
    "decode_batches": "kbatch.spark._decode",
    "kafka_struct": "kbatch.spark._schema",
    "decode_values": "kbatch.spark._values",
    "split_frame": "kbatch.spark._dead_letters",
    "write_dead_letters": "kbatch.spark._dead_letters",
    "ship": "kbatch.spark._values",
    "task_frame": "kbatch.spark._frame",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'kbatch.spark' has no attribute {name!r}")


def register(spark: Any) -> None:
    """Register the ``kafka-log`` data source with a SparkSession.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
    """
    from ._source import KafkaLogDataSource

    if _registered_statically(spark):
        # ``pyspark_kbatch`` registered this very source at session start: registering it
        # again would only make Spark warn that a statically registered source was replaced.
        return
    try:
        spark.dataSource.register(KafkaLogDataSource)
    except Exception as exc:
        # Spark 4.0/4.1 refuse a second registration of a name; when kbatch is installed,
        # ``pyspark_kbatch`` has already registered this very source at session start.
        if "DATA_SOURCE_ALREADY_EXISTS" not in str(exc):
            raise


def _registered_statically(spark: Any) -> bool:
    """Whether the session already knows ``kafka-log`` (False when it cannot tell, e.g. Spark Connect)."""
    try:
        manager = spark._jsparkSession.sessionState().dataSourceManager()
        return bool(manager.dataSourceExists("kafka-log"))
    except Exception:  # noqa: BLE001 - no JVM (Spark Connect) or an older Spark: register as before
        return False
