"""``kbatch convert --engine spark --values avro``: the Spark engine's part of typed values.

The plan is the arrow engine's (:func:`kbatch.convert._value_plan.plan_values`: the registry, each
topic's reader schemas and output schema, where dead letters go); here it runs on Spark. Each
topic is one DataFrame (its tasks from the run's plan, the other topics' slices left out), since
each topic's columns are its own reader schema's: the executors decode and split every batch
(:func:`kbatch.spark._dead_letters.split_frame`, over :func:`kbatch.values.split`), write the
dead letters into the sink's hidden folder (``_dead_letter/topic=<t>/``, the arrow engine's
layout) and hand the good rows to Spark's writer; the driver then counts the dead letters from
their files and commits the data and the dead letters together (the folder sink's side folder).

Iceberg and Delta (``--format iceberg|delta``): the good rows go to the table sink's staging
folder (:func:`kbatch.spark._staged.write_staged`, plain Parquet, no Iceberg or Delta jar), the
dead letters to its hidden ``_dead_letter`` folder; the driver reads those back into the plan
(:func:`take_dead_letters`: counted, those an earlier run committed left out) and commits them
into the ``<topic>__dead_letter`` tables just before the data, as the arrow engine does. A
Parquet OUT with ``--dead-letter PATH`` outside it goes the same way: the executors write the
dead letters beside the data, the driver commits them to PATH's folder just before the data.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kbatch.plan import ROOT_COLUMN, LogSlice, Options

from ._values import ValuePlan

__all__ = ["count_dead_letters", "flatten_frame", "take_dead_letters", "write_values"]


def flatten_frame(df: Any) -> Any:
    """``df`` with its struct ``value`` column as top-level columns ``value_<field>``
    (:func:`kbatch.convert._values.flatten_values`'s columns, in Spark)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    kind = df.schema["value"].dataType
    if not isinstance(kind, StructType):
        return df
    columns = []
    for name in df.columns:
        if name == "value":
            columns += [F.col("value").getField(f.name).alias(f"value_{f.name}") for f in kind.fields]
        else:
            columns.append(F.col(name))
    return df.select(*columns)


def write_values(spark: Any, tasks: Sequence[Sequence[LogSlice]], opts: Options, topics: Sequence[str],
                 values: ValuePlan, folder: str, write: Callable[[Any], None]) -> None:
    """Each topic's records (of ``tasks``) decoded by the executors and given to ``write`` (a
    DataFrame each); the dead letters written into ``folder``'s side folder."""
    from kbatch.spark import split_frame, task_frame  # defers pyspark

    dead = str(Path(folder) / (values.side_folder or "_dead_letter"))
    run = uuid.uuid4().hex[:8]
    for i, topic in enumerate(topics):
        mine = [kept for kept in (tuple(s for s in task if s.topic == topic) for task in tasks) if kept]
        if not mine:
            continue
        df = task_frame(spark, mine, opts)
        readers = values.readers.get(topic)
        if readers is not None:
            df = split_frame(df, values.registry, dead, values=readers[0], keys=readers[1], fail=values.fail,
                             name=f"{run}-{i}", format=values.value_format)
            if values.flatten:
                df = flatten_frame(df)
        write(df)


def count_dead_letters(values: ValuePlan, folder: str) -> None:
    """Count the dead letters the executors wrote under ``folder``'s side folder into ``values``
    (per partition, per reason, the first record of each reason), as the arrow engine counts them."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    dead = Path(folder) / (values.side_folder or "_dead_letter")
    if not dead.is_dir():
        return
    topic = pads.partitioning(pa.schema([("topic", pa.string())]), flavor="hive")
    dataset = pads.dataset(str(dead), format="parquet", partitioning=topic)
    columns = ["topic", "partition", "offset", "reason"]
    if ROOT_COLUMN in dataset.schema.names:
        columns.append(ROOT_COLUMN)
    table = dataset.to_table(columns=columns).sort_by([("topic", "ascending"), ("partition", "ascending"),
                                                       ("offset", "ascending")])
    for row in table.to_pylist():
        values.dead[(row["topic"], row["partition"], row.get(ROOT_COLUMN))] += 1
        values.reasons[row["reason"]] += 1
        values.examples.setdefault(row["reason"], f"{row['topic']}-{row['partition']} offset {row['offset']}")


def _dead_letter_table(values: ValuePlan, folder: str) -> Any:
    """The dead letters the executors wrote under ``folder``'s side folder, as a table of
    ``values.dead_schema`` in (topic, partition, offset) order; None when there are none."""
    import pyarrow as pa
    import pyarrow.dataset as pads

    dead = Path(folder) / (values.side_folder or "_dead_letter")
    if not dead.is_dir():
        return None
    topic = pads.partitioning(pa.schema([("topic", pa.string())]), flavor="hive")
    table = pads.dataset(str(dead), format="parquet", partitioning=topic).to_table()
    table = table.sort_by([("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    return table.select(values.dead_schema.names).cast(values.dead_schema)


def take_dead_letters(values: ValuePlan, folder: str) -> None:
    """Hand the dead letters the executors wrote under ``folder`` to ``values`` (after
    ``values.start``), which commits them apart from the data: into the dead-letter tables
    (Iceberg, Delta) or the folder of ``--dead-letter PATH``; with ``--cdc`` cut by time, those at
    or past their partition's cut left out. Their files in ``folder`` are then removed (nothing of
    them moves in with the data)."""
    import shutil

    table = _dead_letter_table(values, folder)
    if table is not None and values.cdc is not None:  # those at or past an --as-of cut: left to a later run
        table = values.cdc.before_cut(table)
    if table is not None and table.num_rows:
        values.set_aside(table)
    shutil.rmtree(Path(folder) / (values.side_folder or "_dead_letter"), ignore_errors=True)
