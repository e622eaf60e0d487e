"""Spark's hook for kbatch's ``kafka-log`` data source.

PySpark (4.0+) imports every top-level module whose name starts with ``pyspark_`` and
registers its ``DefaultSource``, so once kbatch is installed ``spark.read.format("kafka-log")``
works without calling :func:`kbatch.spark.register`.
"""

from kbatch.spark import KafkaLogDataSource as DefaultSource

__all__ = ["DefaultSource"]
