"""``kbatch convert ROOT OUT``: a Kafka ``log.dirs`` root to Parquet, ORC or JSON, with Spark or in-process with Arrow.

The job of the ``convert`` subcommand: a root or a whole backup to Parquet, ORC and JSON
folders, Iceberg and Delta tables; with Spark (local mode, a cluster) or in-process with Arrow;
typed values, dead letters, resumable appends and a summary that counts every record. Above
the engines and the table formats, below the command line, which reaches it as the
``convert`` subcommand (:func:`add_arguments`, :func:`run`).
"""

from ._arguments import add_arguments
from ._arrow_engine import convert_arrow
from ._errors import ConvertError, UsageError
from ._run import run
from ._spark_engine import convert_spark, spark_config, spark_error_line, task_bytes
from ._summary import PartitionReport, Summary

__all__ = [
    "ConvertError",
    "PartitionReport",
    "Summary",
    "UsageError",
    "add_arguments",
    "convert_arrow",
    "convert_spark",
    "run",
    "spark_config",
    "spark_error_line",
    "task_bytes",
]
