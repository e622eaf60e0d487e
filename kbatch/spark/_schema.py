"""Spark's Kafka source schema as a ``StructType`` (no SparkSession needed), from :mod:`kbatch.codec._columns`."""

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

from kbatch.codec import HEADERS_COLUMN, columns
from kbatch.plan import CLUSTER_ID_COLUMN, ROOT_COLUMN, Options

__all__ = ["kafka_struct", "options_struct"]


def kafka_struct(*, include_headers: bool = False, extra_columns: bool = False) -> StructType:
    """Spark's ``StructType`` for :func:`kbatch.arrow.kafka_schema` (all fields nullable).

    Exactly the columns of ``spark.read.format("kafka")`` (``headers`` as Spark declares
    it with ``includeHeaders``), plus kbatch's extras with ``extra_columns``.
    """
    header = StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)])
    types = {
        "binary": BinaryType(),
        "string": StringType(),
        "int": IntegerType(),
        "bigint": LongType(),
        "smallint": ShortType(),
        "boolean": BooleanType(),
        "timestamp": TimestampType(),
        HEADERS_COLUMN[1]: ArrayType(header, True),
    }
    cols = columns(include_headers=include_headers, extra_columns=extra_columns)
    fields = [StructField(name, types[kind], True) for name, kind in cols]
    return StructType(fields)


def options_struct(opts: Options) -> StructType:
    """The schema of a ``kafka-log`` read with ``opts``: :func:`kafka_struct`, and last the columns
    ``root`` and ``clusterId`` (:data:`~kbatch.plan.ROOT_COLUMN`, :data:`~kbatch.plan.CLUSTER_ID_COLUMN`)
    with ``recursiveFileLookup`` or ``replicas=all``."""
    schema = kafka_struct(include_headers=opts.include_headers, extra_columns=opts.extra_columns)
    if not opts.root_columns:
        return schema
    return schema.add(ROOT_COLUMN, StringType(), True).add(CLUSTER_ID_COLUMN, StringType(), True)
