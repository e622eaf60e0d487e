"""Iceberg data files written by kbatch, registered into a table: :func:`write_files` (the arrow
engine's rows) and :func:`append_files` (those files, or the Parquet Spark's executors staged).

Both engines write the Parquet themselves and the table only commits the files: pyiceberg's own
``append`` rewrites the rows to the table's schema and turns a null list (``headers``, a nullable
array of records in a value) into an empty one in the files, where kbatch's writer keeps them as
they are. The files carry no field ids; the table's name mapping (``schema.name-mapping.default``,
set at the first commit, kept in step by every schema change) maps their columns by name.

pyiceberg's ``add_files`` finds each file's partition from its column statistics (the lower
and upper bound under the transform must agree), which only order-preserving transforms allow
(identity, year, month, day, hour, truncate). A ``bucket`` value cannot be read from bounds: the
writer split the files by it (a ``kbatch_<field>=<value>`` folder, see
:meth:`IcebergSink.file_partitions <kbatch.tables.IcebergSink.file_partitions>`), and that
folder's value is the file's partition value. The other fields still come from the statistics,
checked as ``add_files`` checks them, so a file split wrongly is refused, not misfiled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kbatch.errors import TableError

__all__ = ["NULL_FOLDER", "append_files", "write_files"]

#: The folder value Hive-style writers (Spark) give a null partition value.
NULL_FOLDER = "__HIVE_DEFAULT_PARTITION__"


def _partition(metadata: Any, stats: Any, folders: Mapping[str, str], path: str) -> Any:
    """The partition ``Record`` of one file: bucket fields from ``folders`` (by partition field
    name), the others from the file's statistics."""
    from pyiceberg.partitioning import partition_record_value
    from pyiceberg.typedef import Record

    schema = metadata.schema()
    values = []
    for field in metadata.spec().fields:
        if not field.transform.preserves_order:
            if field.name not in folders:
                raise TableError(f"{path}: no {field.name}=<value> folder to take the {field.transform} "
                                 "partition value from")
            raw = folders[field.name]
            values.append(None if raw == NULL_FOLDER else int(raw))
            continue
        agg = stats.column_aggregates.get(field.source_id)
        if agg is None:  # only nulls (or no statistics): a null partition value, as add_files does
            values.append(None)
            continue
        fn = field.transform.transform(schema.find_field(field.source_id).field_type)
        low, high = (fn(partition_record_value(field, v, schema)) for v in (agg.current_min, agg.current_max))
        if low != high:
            raise TableError(f"{path}: rows of more than one {field.name} partition ({low} to {high}): "
                             "the writer did not split its files by it")
        values.append(low)
    return Record(*values)


def write_files(metadata: Any, io: Any, rows: Any, name: str, compression: str) -> list[tuple[str, Any]]:
    """Write ``rows`` (a ``pyarrow.Table`` of the table's columns, or some of them) as Parquet into
    the ``data`` folder of the table ``metadata`` describes, one file per partition of its spec,
    each file named ``<name>-<n>.parquet``; ``(uri, the partition Record)`` of each, for
    :func:`append_files`. The rows are written as they are (their nulls kept, at any depth)."""
    import functools
    import operator

    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.partitioning import PartitionFieldValue, PartitionKey

    spec, schema = metadata.spec(), metadata.schema()
    names = [f"kbatch_partition_{i}" for i in range(len(spec.fields))]
    keyed = rows
    for field, column in zip(spec.fields, names, strict=True):
        path = str(schema.find_column_name(field.source_id))
        source = rows.column(path.split(".")[0])
        for part in path.split(".")[1:]:  # a field of a struct column
            source = pc.struct_field(source, part)
        transform = field.transform.pyarrow_transform(schema.find_field(field.source_id).field_type)
        keyed = keyed.append_column(column, transform(source))
    keys = keyed.select(names).group_by(names, use_threads=False).aggregate([]).to_pylist() if names else [{}]
    location = metadata.location.rstrip("/")
    out = []
    for n, key in enumerate(keys):
        part = rows
        if names:
            where = functools.reduce(operator.and_, [pc.field(c) == key[c] if key[c] is not None
                                                     else pc.field(c).is_null() for c in names])
            part = keyed.filter(where).select(rows.column_names)
        pkey = PartitionKey(field_values=[PartitionFieldValue(field=f, value=key[c])
                                          for f, c in zip(spec.fields, names, strict=True)],
                            partition_spec=spec, schema=schema)
        folder = f"{location}/data/{pkey.to_path()}" if names else f"{location}/data"
        uri = f"{folder}/{name}-{n:05d}.parquet"
        with io.new_output(uri).create(overwrite=False) as f:
            pq.write_table(part, f, compression=compression)
        out.append((uri, pkey.partition))
    return out


def append_files(txn: Any, io: Any, files: Sequence[tuple[str, Any]], properties: Mapping[str, str],
                 replaced: Sequence[Any] = ()) -> None:
    """Append ``files`` to ``txn``'s table in one snapshot with ``properties`` in its summary (a
    snapshot of no files when there are none); each is ``(uri, its partition)``: the ``Record``
    :func:`write_files` gave, or the folder values by partition field name another writer split
    it by. The files must hold the table's columns. ``replaced``: data files of the table
    (``DataFile``) the same snapshot removes (an overwrite: the rows kept of them are in ``files``)."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.table import TableProperties
    from pyiceberg.typedef import Record

    metadata = txn.table_metadata
    if metadata.name_mapping() is None:  # the files carry no field ids: readers map columns by name
        txn.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                              metadata.schema().name_mapping.model_dump_json()})
        metadata = txn.table_metadata
    schema = metadata.schema()
    plan = compute_statistics_plan(schema, metadata.properties)
    mapping = parquet_path_to_id_mapping(schema)
    update = txn.update_snapshot(snapshot_properties=dict(properties))
    with update.overwrite() if replaced else update.fast_append() as append:
        for old in replaced:
            append.delete_data_file(old)
        for uri, folders in files:
            source = io.new_input(uri)
            with source.open() as f:
                meta = pq.read_metadata(f)
            stats = data_file_statistics_from_parquet_metadata(meta, plan, mapping)
            append.append_data_file(DataFile.from_args(
                content=DataFileContent.DATA, file_path=uri, file_format=FileFormat.PARQUET,
                partition=folders if isinstance(folders, Record) else _partition(metadata, stats, folders, uri),
                file_size_in_bytes=len(source),
                sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None,
                **stats.to_serialized_dict()))
