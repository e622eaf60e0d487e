"""Reading a ``log.dirs`` root as planned work: the options both engines take (the Spark
source's and ``kbatch convert``'s), the partitions they select, each one's offset range, the
slices of those ranges and the tasks that read them.

Above :mod:`kbatch.log` and :mod:`kbatch.storage`, below the engines (:mod:`kbatch.spark`) and
the jobs (:mod:`kbatch.convert`), which both plan through this face, so that a Spark task and
the Arrow engine read a slice the same way.
"""

from ._plan import (
    CLUSTER_ID_COLUMN,
    DEFAULT_MAX_PARTITION_BYTES,
    INTERNAL_TOPICS,
    ROOT_COLUMN,
    SEGMENT_OPEN_COST,
    LogSlice,
    Options,
    check_option_names,
    env_pythonpath,
    latest_offset,
    offsets_json,
    plan_slices,
    plan_tasks,
    range_key,
    read_logs,
    read_task,
    resolve_range,
    root_columns,
    select_logs,
    with_root,
)

__all__ = [
    "CLUSTER_ID_COLUMN",
    "DEFAULT_MAX_PARTITION_BYTES",
    "INTERNAL_TOPICS",
    "ROOT_COLUMN",
    "SEGMENT_OPEN_COST",
    "LogSlice",
    "Options",
    "check_option_names",
    "env_pythonpath",
    "latest_offset",
    "offsets_json",
    "plan_slices",
    "plan_tasks",
    "range_key",
    "read_logs",
    "read_task",
    "resolve_range",
    "root_columns",
    "select_logs",
    "with_root",
]
