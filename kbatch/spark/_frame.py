"""Planned tasks as a DataFrame: what ``kbatch convert`` runs on Spark.

The ``kafka-log`` source and this frame give the same rows for the same plan: both are thin
shells around :mod:`kbatch.plan` (``plan_tasks`` on the driver, ``read_task`` in each Spark
task). The source is what users query; this frame is for a caller that has planned already.
It skips the three Python processes Spark's driver starts for a Python data source (looking up
the installed sources, creating the source, planning its partitions), about 2 s each in a new
JVM, and reads exactly the partitions and offset ranges the caller checked and reported.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from kbatch.plan import LogSlice, Options, read_task

from ._schema import options_struct

__all__ = ["task_frame"]


def task_frame(spark: Any, tasks: Sequence[Sequence[LogSlice]], opts: Options) -> Any:
    """The records of ``tasks`` (:func:`~kbatch.plan.plan_tasks`) as a DataFrame in the
    ``kafka-log`` schema for ``opts``, one Spark partition per task.

    The plan travels to the executors once, as a broadcast; task ``i`` is row ``i`` of
    ``spark.range``, read by :func:`~kbatch.plan.read_task` in ``mapInArrow``.

    Parameters
    ----------
    spark : pyspark.sql.SparkSession
        A classic session (a broadcast needs its SparkContext).
    tasks : sequence of sequences of LogSlice
    opts : kbatch.plan.Options
        The options the tasks were planned with.

    Returns
    -------
    pyspark.sql.DataFrame
    """
    plan = spark.sparkContext.broadcast([tuple(t) for t in tasks])

    def read(ids: Iterator[Any]) -> Iterator[Any]:
        for batch in ids:
            for i in batch.column(0).to_pylist():
                yield from read_task(plan.value[i], opts)

    n = len(tasks)
    return spark.range(0, n, 1, max(n, 1)).mapInArrow(read, options_struct(opts))
