"""The schema a Parquet folder's readers read: ``_common_metadata`` beside the files, merged over
every commit, and the changes no reader could merge refused.

Readers of a folder of Parquet files take one file's schema unless told otherwise (pyarrow's
datasets, Polars: the first file's; Spark: ``_common_metadata`` first, then ``_metadata``, then
one file). A topic whose values gained a field (a newer reader schema), or a later run with more
columns, leaves files of two schemas in one folder; read by the first file's, the new field is
gone without a word. So each folder of data files (``OUT/topic=<t>/``, or OUT when not
partitioned by topic) holds ``_common_metadata``: a Parquet footer without rows whose schema is
every file's, merged by name (:func:`merge`), with ``topic`` last when it is the folder's name.
Spark reads it by itself; pyarrow (``schema=``), Polars (``schema=``) are handed it; DuckDB's
``union_by_name`` merges the same way. docs/GUIDE.md, "Read what convert wrote", has each reader's
command.

What merges: a column or a struct field that only some files have (it reads null where missing,
so it is nullable in the merged schema), a field nullable in some files and not in others. What
does not: a column (or nested field) of two types, e.g. ``value`` binary in the files there and a
struct in this run's (a topic converted raw, then with ``--values``). No reader of a folder reads
that as one column, so :func:`merge` raises :class:`~kbatch.errors.TableError` naming the column
and both types, and the commit is refused.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Callable, Iterable
from typing import Any

from kbatch.errors import TableError

__all__ = ["COMMON_METADATA", "READERS", "folder_schema", "merge", "read_common_metadata", "read_recipe",
           "summarize", "write_common_metadata"]

COMMON_METADATA = "_common_metadata"


def _short(kind: Any) -> str:
    text = str(kind)
    return text if len(text) <= 60 else text[:56] + " ...>"


def _conflict(path: str, old: Any, new: Any, where: str) -> TableError:
    return TableError(
        f"{where}: column {path} is {_short(old)} in the files there and {_short(new)} in this run's: no Parquet "
        "reader reads both as one column; write this run to another OUT, or use --format iceberg or delta, "
        "whose tables track their schema's changes", table=where)


def _merge_type(old: Any, new: Any, path: str, where: str) -> Any:
    import pyarrow as pa

    if old.equals(new):
        return old
    if pa.types.is_struct(old) and pa.types.is_struct(new):
        return pa.struct(_merge_fields(list(old), list(new), path, where))
    for is_list, make in ((pa.types.is_list, pa.list_), (pa.types.is_large_list, pa.large_list)):
        if is_list(old) and is_list(new):
            return make(_merge_field(old.value_field, new.value_field, f"{path}[]", where))
    if pa.types.is_map(old) and pa.types.is_map(new):
        key = _merge_field(old.key_field, new.key_field, f"{path}.key", where)
        item = _merge_field(old.item_field, new.item_field, f"{path}.value", where)
        return pa.map_(key, item)
    raise _conflict(path, old, new, where)


def _merge_field(old: Any, new: Any, path: str, where: str) -> Any:
    kind = _merge_type(old.type, new.type, path, where)
    return old.with_type(kind).with_nullable(old.nullable or new.nullable)


def _merge_fields(old: list[Any], new: list[Any], path: str, where: str) -> list[Any]:
    """``old``'s fields then ``new``'s that ``old`` lacks, by name; a field one side lacks is nullable."""
    theirs = {f.name: f for f in new}
    mine = {f.name for f in old}
    out = []
    for f in old:
        name = f"{path}.{f.name}" if path else f.name
        out.append(_merge_field(f, theirs[f.name], name, where) if f.name in theirs else f.with_nullable(True))
    out += [f.with_nullable(True) for f in new if f.name not in mine]
    return out


def merge(old: Any, new: Any, where: str) -> Any:
    """The schema that reads files of schema ``old`` and of schema ``new`` alike (``old``'s
    columns first, fields matched by name at every depth); ``where`` names the folder in the
    error. Raises :class:`~kbatch.errors.TableError` for a column of two types."""
    import pyarrow as pa

    if old is None:
        return new
    return pa.schema(_merge_fields(list(old), list(new), "", where))


def folder_schema(files: Iterable[str | os.PathLike[str]], where: str, start: Any = None,
                  filesystem: Any = None) -> Any:
    """:func:`merge` of ``start`` (a schema, or None) and the schemas of the Parquet ``files``
    (their footers; paths of ``filesystem``, local without), without schema-level metadata
    (Spark's own schema key would outrank the merged one)."""
    import pyarrow.parquet as pq

    schema = start
    for f in files:
        schema = merge(schema, pq.read_schema(str(f), filesystem=filesystem).remove_metadata(), where)
    return schema


def summarize(data: Iterable[str], staged: str, where: str, partition_column: str | None,
              there: Callable[[str], Any], filesystem: Any = None) -> list[str]:
    """Write ``_common_metadata`` into each folder of the Parquet files ``data`` (paths relative
    to the staging folder ``staged``, of ``filesystem``): the merged schema of the files already
    in OUT's folder of that name (``there(folder)``: a schema, or None) and of this run's.
    Returns the written files, relative to ``staged``. ``where`` (OUT) names the folder in the
    :class:`~kbatch.errors.TableError` of a column no reader could merge."""
    by_folder: dict[str, list[str]] = {}
    for rel in data:
        by_folder.setdefault(posixpath.dirname(rel), []).append(rel)
    written = []
    for folder, names in sorted(by_folder.items()):
        named = f"{where}/{folder}" if folder else where
        schema = folder_schema([f"{staged}/{n}" for n in names], named, there(folder), filesystem)
        write_common_metadata(f"{staged}/{folder}" if folder else staged, schema, partition_column, filesystem)
        written.append(posixpath.join(folder, COMMON_METADATA))
    return written


def read_common_metadata(path: str | os.PathLike[str], partition_column: str | None, filesystem: Any = None) -> Any:
    """The schema a ``_common_metadata`` at ``path`` holds, without ``partition_column`` (the
    files' own columns, as :func:`folder_schema` gives them)."""
    import pyarrow.parquet as pq

    schema = pq.read_schema(str(path), filesystem=filesystem).remove_metadata()
    if partition_column and partition_column in schema.names:
        schema = schema.remove(schema.get_field_index(partition_column))
    return schema


def write_common_metadata(folder: str | os.PathLike[str], schema: Any, partition_column: str | None,
                          filesystem: Any = None) -> None:
    """``folder/_common_metadata`` holding ``schema`` (and ``partition_column`` as a string column
    after it, the hive folder's name read back as a column; left out if the files have it)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if partition_column and partition_column not in schema.names:
        schema = schema.append(pa.field(partition_column, pa.string()))
    pq.write_metadata(schema.remove_metadata(), f"{folder}/{COMMON_METADATA}", filesystem=filesystem)


#: How each reader reads one folder of a Parquet OUT with its ``_common_metadata``: Python over the
#: names ``out`` (OUT) and ``folder`` (``f"{out}/topic=<topic>"``, or OUT when not partitioned by
#: topic). The convert summary prints them; docs/GUIDE.md runs the same text.
READERS = {
    "pyarrow": ('ds.dataset(folder, schema=pq.read_schema(f"{folder}/_common_metadata"), partitioning="hive", '
                'partition_base_dir=out)'),
    "polars": ('pl.scan_parquet(f"{folder}/*.parquet", schema=pl.read_parquet_schema(f"{folder}/_common_metadata"), '
               'hive_partitioning=True, cast_options=pl.ScanCastOptions(missing_struct_fields="insert"))'),
    "duckdb": ("duckdb.sql(f\"SELECT * FROM read_parquet('{folder}/*.parquet', union_by_name = true, "
               "hive_partitioning = true)\")"),
    "spark": 'spark.read.option("basePath", out).parquet(folder)',
}


def read_recipe(out: str, partition_by_topic: bool) -> list[str]:
    """The lines of the convert summary that say how to read the Parquet folder ``out``
    (:data:`READERS`, with ``out`` and ``folder`` set)."""
    folder = 'f"{out}/topic=<topic>"' if partition_by_topic else "out"
    head = (f"read each topic as one dataset with its folder's schema (docs/GUIDE.md, Read what convert wrote): "
            f"out = {str(out)!r}; folder = {folder}")
    return [head, *(f"  {name}: {text}" for name, text in READERS.items())]
