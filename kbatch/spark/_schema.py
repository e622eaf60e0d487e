"""Spark's Kafka source schema, built by hand (no SparkSession needed)."""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

__all__ = ["kafka_struct"]


def kafka_struct(*, include_headers: bool = False, extra_columns: bool = False) -> StructType:
    """Spark's ``StructType`` for :func:`kbatch.arrow.kafka_schema` (all fields nullable).

    Exactly the columns of ``spark.read.format("kafka")`` (``headers`` as Spark declares
    it with ``includeHeaders``), plus kbatch's extras with ``extra_columns``.
    """
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
        StructField("timestampType", IntegerType(), True),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)])
        fields.append(StructField("headers", ArrayType(header, True), True))
    if extra_columns:
        fields += [
            StructField("leaderEpoch", IntegerType(), True),
            StructField("producerId", LongType(), True),
            StructField("producerEpoch", ShortType(), True),
            StructField("sequence", IntegerType(), True),
            StructField("isTransactional", BooleanType(), True),
        ]
    return StructType(fields)
