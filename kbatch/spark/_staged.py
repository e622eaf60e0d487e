"""Spark's executors writing the data files of a table sink (:mod:`kbatch.tables`): :func:`write_staged`.

``kbatch convert --engine spark --format iceberg|delta`` needs no Iceberg or Delta jar on the
cluster: the executors write plain Parquet into the sink's staging folder, one folder per topic
(``kbatch_topic=<topic>``) and per value of each of the sink's file partitions, and the driver's
``sink.commit`` takes the files into the tables with the offsets ledger, in one commit each.
"""

from __future__ import annotations

from typing import Any

from kbatch.tables import Sink, Transform

__all__ = ["SPARK_TRANSFORMS", "check_transform", "write_staged"]

#: The ``--partition-by`` transforms Spark's executors compute (without Iceberg's own functions).
SPARK_TRANSFORMS = ("identity", "day")


def check_transform(t: Transform) -> None:
    """``ValueError`` for the transforms only the arrow engine writes."""
    if t.name not in SPARK_TRANSFORMS:
        raise ValueError(f"--partition-by {t.name}(...) is written by --engine arrow only; with Spark use a column "
                         "or day(timestamp)")


def spark_column(t: Transform) -> Any:
    """A Spark column of ``t``'s value: the column itself, or the UTC day of a timestamp (from its
    microseconds, not the session's time zone)."""
    from pyspark.sql import functions as F

    check_transform(t)
    if t.name == "identity":
        return F.col(t.column)
    return F.date_from_unix_date(F.floor(F.unix_micros(F.col(t.column)) / 86_400_000_000).cast("int"))


def write_staged(df: Any, sink: Sink, *, compression: str | None = None, max_rows_per_file: int | None = None) -> None:
    """Write ``df`` (the Kafka source's rows) as Parquet into ``sink.staging()``, split by topic and
    ``sink.file_partitions()``; ``sink.commit`` then takes the files in."""
    from pyspark.sql import functions as F

    df = df.withColumn("kbatch_topic", F.col("topic"))
    names = []
    for name, transform in sink.file_partitions():
        df = df.withColumn(name, spark_column(transform))
        names.append(name)
    writer = df.write.mode("append").format("parquet").partitionBy("kbatch_topic", *names)
    if compression:
        writer = writer.option("compression", compression)
    if max_rows_per_file:
        writer = writer.option("maxRecordsPerFile", str(max_rows_per_file))
    writer.save(str(sink.staging()))
