"""Parquet files another writer made (Spark's executors), registered into an Iceberg table:
:func:`append_files`.

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

__all__ = ["NULL_FOLDER", "append_files"]

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


def append_files(txn: Any, io: Any, files: Sequence[tuple[str, Mapping[str, str]]],
                 properties: Mapping[str, str]) -> None:
    """Append ``files`` (``(uri, folder values by partition field name)``) to ``txn``'s table in
    one snapshot with ``properties`` in its summary; the files must hold the table's columns."""
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import (
        compute_statistics_plan,
        data_file_statistics_from_parquet_metadata,
        parquet_path_to_id_mapping,
    )
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.table import TableProperties

    metadata = txn.table_metadata
    if metadata.name_mapping() is None:  # the files carry no field ids: readers map columns by name
        txn.set_properties(**{TableProperties.DEFAULT_NAME_MAPPING:
                              metadata.schema().name_mapping.model_dump_json()})
        metadata = txn.table_metadata
    schema = metadata.schema()
    plan = compute_statistics_plan(schema, metadata.properties)
    mapping = parquet_path_to_id_mapping(schema)
    with txn.update_snapshot(snapshot_properties=dict(properties)).fast_append() as append:
        for uri, folders in files:
            source = io.new_input(uri)
            with source.open() as f:
                meta = pq.read_metadata(f)
            stats = data_file_statistics_from_parquet_metadata(meta, plan, mapping)
            append.append_data_file(DataFile.from_args(
                content=DataFileContent.DATA, file_path=uri, file_format=FileFormat.PARQUET,
                partition=_partition(metadata, stats, folders, uri), file_size_in_bytes=len(source),
                sort_order_id=None, spec_id=metadata.default_spec_id, equality_ids=None, key_metadata=None,
                **stats.to_serialized_dict()))
