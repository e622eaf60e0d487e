"""Spark's executors writing the data files of a table sink (:mod:`kbatch.tables`): :func:`write_staged`.

``kbatch convert --engine spark --format iceberg|delta`` needs no Iceberg or Delta jar on the
cluster: the executors write plain Parquet into the sink's staging folder, one folder per topic
(``kbatch_topic=<topic>``) and per value of each of the sink's file partitions, and the driver's
``sink.commit`` takes the files into the tables with the offsets ledger, in one commit each.

The values the executors split by are the table's own, computed from the UTC microseconds (never
the session's time zone): for Iceberg a column's value, the day, the hour since the epoch, and
``bucket(N, col)`` with Iceberg's murmur3 hash (:func:`kbatch.tables._bucket.iceberg_bucket`, in
an Arrow pass over each task's rows); for Delta the derived columns the arrow engine writes
(``timestamp_day``, a date; ``timestamp_hour``, ``YYYY-MM-DD-HH``).
"""

from __future__ import annotations

from typing import Any

from kbatch.tables import Sink, Transform, iceberg_bucket

__all__ = ["SPARK_TRANSFORMS", "check_transform", "write_staged"]

#: The ``--partition-by`` transforms Spark's executors compute, per table format.
SPARK_TRANSFORMS = {"iceberg": ("identity", "day", "hour", "bucket"), "delta": ("identity", "day", "hour")}


def check_transform(t: Transform, format: str = "iceberg") -> None:
    """``ValueError`` for the transforms only the arrow engine writes."""
    allowed = SPARK_TRANSFORMS.get(format, ("identity",))
    if t.name not in allowed:
        said = ", ".join(("a column", *(f"{n}(...)" for n in allowed if n != "identity")))
        raise ValueError(f"--partition-by {t.name}(...) is written by --engine arrow only; with Spark and "
                         f"--format {format} use {said}")


def _micros(t: Transform) -> Any:
    from pyspark.sql import functions as F

    return F.unix_micros(F.col(t.column))


def spark_column(t: Transform, format: str = "iceberg") -> Any:
    """A Spark column of ``t``'s value in the folder names of ``format``'s files (see the module's
    notes); ``bucket`` is added by :func:`_with_bucket` instead."""
    from pyspark.sql import functions as F

    check_transform(t, format)
    if t.name == "identity":
        return F.col(t.column)
    day = F.date_from_unix_date(F.floor(_micros(t) / 86_400_000_000).cast("int"))
    if t.name == "day":
        return day
    hours = F.floor(_micros(t) / 3_600_000_000)
    if format == "iceberg":
        return hours.cast("int")
    return F.concat(F.date_format(day, "yyyy-MM-dd"), F.lit("-"), F.lpad(F.pmod(hours, 24).cast("string"), 2, "0"))


def _with_bucket(df: Any, name: str, t: Transform) -> Any:
    """``df`` with the column ``name``: Iceberg's ``bucket(t.width)`` of ``t.column`` (int), computed
    by the executors over Arrow batches."""
    from pyspark.sql.types import IntegerType, StructField, StructType

    schema = StructType([*df.schema.fields, StructField(name, IntegerType())])
    column, width = t.column, int(t.width or 0)

    def add(batches: Any) -> Any:

        for batch in batches:
            yield batch.append_column(name, iceberg_bucket(batch.column(column), width))

    return df.mapInArrow(add, schema)


def write_staged(df: Any, sink: Sink, *, compression: str | None = None, max_rows_per_file: int | None = None) -> None:
    """Write ``df`` (the Kafka source's rows) as Parquet into ``sink.staging()``, split by topic and
    ``sink.file_partitions()``; ``sink.commit`` then takes the files in."""
    from pyspark.sql import functions as F

    df = df.withColumn("kbatch_topic", F.col("topic"))
    names = []
    for name, transform in sink.file_partitions():
        if transform.name == "bucket":
            check_transform(transform, sink.format)
            df = _with_bucket(df, name, transform)
        else:
            df = df.withColumn(name, spark_column(transform, sink.format))
        names.append(name)
    writer = df.write.mode("append").format("parquet").partitionBy("kbatch_topic", *names)
    if compression:
        writer = writer.option("compression", compression)
    if max_rows_per_file:
        writer = writer.option("maxRecordsPerFile", str(max_rows_per_file))
    writer.save(str(sink.staging()))
