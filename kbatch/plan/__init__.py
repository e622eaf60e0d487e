"""Reading a ``log.dirs`` root as planned work: the options both engines take (the Spark
source's and ``kbatch convert``'s), the partitions they select, each one's offset range, the
slices of those ranges and the tasks that read them.

Above :mod:`kbatch.log` and :mod:`kbatch.storage`, below the engines (:mod:`kbatch.spark`) and
the jobs (:mod:`kbatch.convert`), which both plan through this face, so that a Spark task and
the Arrow engine read a slice the same way. Nothing here needs Spark: the Spark classes of
:mod:`kbatch.spark` are thin shells around it.

Modules:

- ``_options``: the options (:data:`OPTIONS`), the parsers of their values, :class:`Options`.
- ``_select``: which partition directories the options select (:func:`select_logs`) and each
  one's offset range (:func:`resolve_range`, :func:`latest_offset`, :func:`offsets_json`).
- ``_slices``: those ranges cut into :class:`LogSlice` s and packed into tasks
  (:func:`plan_slices`, :func:`plan_tasks`); the root columns (:func:`range_key`, :func:`with_root`).
- ``_read``: a slice or a task read as Arrow record batches (:func:`read_task`, :func:`read_logs`).
"""

from ._options import DEFAULT_MAX_PARTITION_BYTES, Options, check_option_names, root_columns
from ._read import env_pythonpath, read_logs, read_task
from ._select import INTERNAL_TOPICS, latest_offset, offsets_json, resolve_range, select_logs
from ._slices import (
    CLUSTER_ID_COLUMN,
    ROOT_COLUMN,
    SEGMENT_OPEN_COST,
    LogSlice,
    plan_slices,
    plan_tasks,
    range_key,
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
