"""``kafka-log`` with ``view``: Kafka's own state (``kbatch.internal``'s tables) as DataFrames.

``spark.read.format("kafka-log").option("view", "consumer_offsets").load(root)``. The views:
``consumer_offsets``, ``consumer_groups``, ``transactions`` (one Spark partition per partition
of the internal topic: a group's or a transactional id's records all live in one),
``producer_snapshots`` (one per partition directory), and ``cluster_metadata.<table>``
(``cluster_metadata.topics``, ``cluster_metadata.partitions``, ...: the KRaft image, one Spark
partition). ``history=true`` gives every record instead of the latest state (not for
``cluster_metadata.*``, whose history tables are per record type and not fixed in advance);
``offset`` names the offset of a ``cluster_metadata`` image. The schema is the Arrow schema of
the kbatch.internal table. Streaming reads of a view are refused.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from kbatch import internal
from kbatch.internal import IMAGE_TABLES, directories, partitions
from kbatch.log import LogDir

__all__ = ["VIEWS", "ViewOptions", "ViewReader", "is_view", "parse_view_options", "spark_schema", "view_arrow_schema",
           "view_pieces", "read_view"]

#: view -> (internal topic whose partitions are the Spark partitions, or None: every partition directory)
VIEWS: dict[str, str | None] = {
    "consumer_offsets": "__consumer_offsets",
    "consumer_groups": "__consumer_offsets",
    "transactions": "__transaction_state",
    "producer_snapshots": None,
}


class ViewOptions(NamedTuple):
    """The options of a view read."""

    view: str
    path: str
    history: bool
    offset: int | None


#: The options a view reads (Spark passes ``path`` for ``load(path)``).
VIEW_OPTIONS = ("view", "path", "history", "offset")


def parse_view_options(options: Mapping[str, str]) -> ViewOptions:
    """The ``view``, ``path``, ``history`` and ``offset`` options, checked."""
    opts = {str(k).lower(): str(v) for k, v in options.items()}
    view = opts["view"].strip()
    unknown = sorted(str(k) for k in options if str(k).lower() not in VIEW_OPTIONS)
    if unknown:
        raise ValueError(f"kafka-log view {view!r}: unknown option{'s' if len(unknown) > 1 else ''} "
                         f"{', '.join(unknown)}; a view reads only {', '.join(VIEW_OPTIONS)}")
    known = [*VIEWS, *(f"cluster_metadata.{t}" for t in IMAGE_TABLES)]
    if view not in known:
        raise ValueError(f"unknown kafka-log view {view!r}: one of {', '.join(known)}")
    path = opts.get("path")
    if not path:
        raise ValueError('kafka-log needs a log.dirs root: spark.read.format("kafka-log").load("/path")')
    history = opts.get("history", "false").lower() in ("true", "1", "yes")
    if history and view.startswith("cluster_metadata."):
        raise ValueError("history=true is not available for cluster_metadata views (kbatch.internal.cluster_metadata)")
    offset = opts.get("offset")
    return ViewOptions(view, path, history, None if offset is None else int(offset))


def _compute(opts: ViewOptions, source: Any) -> Any:
    if opts.view.startswith("cluster_metadata."):
        return internal.cluster_metadata(source, offset=opts.offset)[opts.view.split(".", 1)[1]]
    fn = {"consumer_offsets": internal.consumer_offsets, "consumer_groups": internal.consumer_groups,
          "transactions": internal.transactions, "producer_snapshots": internal.producer_snapshots}[opts.view]
    return fn(source, history=opts.history)


def view_arrow_schema(opts: ViewOptions) -> Any:
    """The Arrow schema of the view (from its table over no partition)."""
    return _compute(opts, []).schema


def view_pieces(opts: ViewOptions) -> list[str]:
    """The directories (or the root) each Spark partition computes its part from."""
    root = Path(opts.path)
    if opts.view.startswith("cluster_metadata."):
        return [str(root)]
    topic = VIEWS[opts.view]
    if topic is not None:
        out = []
        for p in partitions(root, topic):
            if isinstance(p.log, LogDir):
                out.append(str(p.log.path))
                p.log.close()
        return out
    return [str(d) for d in directories(root) if any(p.suffix == ".snapshot" for p in d.iterdir())]


def read_view(opts: ViewOptions, piece: str) -> Iterator[Any]:
    """The view's rows computed over ``piece``, as pyarrow RecordBatches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    table = _compute(opts, piece)
    # Spark's own Arrow forms of its types (timestamps in microseconds, UTC)
    try:
        arrow_schema = to_arrow_schema(spark_schema(opts), timezone="UTC")
    except TypeError:  # Spark 4.0/4.1: no timezone argument, and timestamps are UTC already
        arrow_schema = to_arrow_schema(spark_schema(opts))
    table = table.cast(arrow_schema)
    yield from table.to_batches(max_chunksize=65_536)


def spark_schema(opts: ViewOptions) -> StructType:
    """The view's schema as a Spark StructType."""
    from pyspark.sql.pandas.types import from_arrow_schema

    schema: StructType = from_arrow_schema(view_arrow_schema(opts))
    return schema


def is_view(options: Mapping[str, str]) -> bool:
    """Whether the options name a view."""
    return any(str(k).lower() == "view" for k in options)


class ViewReader(DataSourceReader):
    """Batch reader of a view: one Spark partition per piece (see :func:`view_pieces`)."""

    def __init__(self, opts: ViewOptions, schema: StructType) -> None:
        want = spark_schema(opts)
        if schema.simpleString() != want.simpleString():
            raise ValueError(f"the {opts.view} view has a fixed schema ({want.simpleString()}); "
                             f"got a user schema {schema.simpleString()}")
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in view_pieces(self.opts) or [""]]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        piece: str = partition.value
        if not piece:
            return iter(())
        return read_view(self.opts, piece)
