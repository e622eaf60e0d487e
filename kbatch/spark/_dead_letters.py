"""``kbatch convert --engine spark --values avro``: the executors decode and split each batch.

:func:`split_frame` turns a DataFrame of the Kafka source's rows into the decoded rows (typed
``value`` / ``key``, ``value_schema_id`` / ``key_schema_id``) with ``mapInArrow`` over
:func:`kbatch.values.split`, the one definition of dead letters both engines use. The records
that do not decode are written by the executor that met them, as Parquet, into the dead-letter
folder (hive ``topic=<topic>`` folders, :func:`kbatch.values.dead_letter_schema`'s columns but
the topic, as the arrow engine writes them); the driver's sink commits that folder with the
output. A file is named after its run, its frame, its Spark partition and its place in the
task: a task attempt run again (a retry, a speculative copy) writes the same names, replacing
the files of the attempt before (each written aside and renamed into place), so no dead letter
is counted twice.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from kbatch.values import Registry, Schema, split

from ._values import Decoding, decoded_struct, ship

__all__ = ["split_frame", "write_dead_letters"]


def write_dead_letters(dead: pa.Table, folder: str, basename: str) -> None:
    """``dead`` (dead letters with a ``topic`` column) as ``<folder>/topic=<t>/<basename>``
    Parquet files, the topic column left to the folder name; each written aside, then renamed."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    topics = pc.unique(dead.column("topic")).to_pylist()
    for topic in topics:
        rows = dead.filter(pc.equal(dead.column("topic"), topic)) if len(topics) > 1 else dead
        rows = rows.drop_columns(["topic"])
        where = os.path.join(folder, f"topic={topic}")
        os.makedirs(where, exist_ok=True)
        temp = os.path.join(where, f".{basename}.{uuid.uuid4().hex}.tmp")
        pq.write_table(rows, temp)
        os.replace(temp, os.path.join(where, basename))


def split_frame(
    df: Any,
    registry: Registry | None,
    dead_letters: str,
    *,
    values: Schema | None = None,
    keys: Schema | None = None,
    mapping: str = "spark",
    fail: bool = False,
    name: str = "",
    format: str = "auto",
) -> Any:
    """``df``'s rows decoded; those that do not decode written to ``dead_letters`` by the executors.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        The Kafka source's rows (``kafka-log``'s columns).
    registry : kbatch.values.Registry or None
        Broadcast to the executors once (None: plain JSON values, their schema given).
    dead_letters : str
        The dead-letter folder (local, or shared by the driver and executors).
    values, keys : Schema or None
        The reader schemas (fixed on the driver); None leaves that column binary.
    mapping : {"spark"}
    fail : bool
        Stop at the first record that does not decode (the task fails with its
        :class:`~kbatch.errors.ValueDecodeError`) instead of writing dead letters.
    name : str
        Unique per frame of a run (file names of a run's frames never collide).
    format : {"auto", "avro", "json", "protobuf"}
        :func:`kbatch.values.split`'s (``"json"`` with no registry: plain JSON values).

    Returns
    -------
    pyspark.sql.DataFrame
        The decoded rows: ``df``'s columns with ``value`` (``key``) the reader's struct and
        ``value_schema_id`` (``key_schema_id``) after it.
    """
    decodings = [Decoding(c, r) for c, r in (("key", keys), ("value", values)) if r is not None]
    if not decodings:
        raise ValueError("nothing to decode: give values or keys")
    out = decoded_struct(df.schema, decodings)
    shipped = ship(df, registry)
    prefix = f"part-{name or uuid.uuid4().hex[:12]}"
    on_error = "raise" if fail else "dead-letter"

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        reg = shipped()
        context = TaskContext.get()
        task = context.partitionId() if context is not None else 0
        k = 0
        for batch in batches:
            good, dead = split(batch, reg, values=values, keys=keys, mapping=mapping,
                                      on_error=on_error, format=format)  # type: ignore[arg-type]
            if dead.num_rows:
                write_dead_letters(dead, dead_letters, f"{prefix}-{task:05d}-{k:05d}.parquet")
                k += 1
            yield from good.combine_chunks().to_batches()

    return df.mapInArrow(decode, out)

