"""Tables that ``kbatch convert`` writes and keeps up to date, exactly once: Parquet folders,
Iceberg tables (pyiceberg) and Delta tables (deltalake).

- :class:`Ledger` / :class:`OffsetRange`: per source partition, the offsets a table holds;
  every format stores it with each commit (:mod:`kbatch.tables._ledger`).
- :class:`Sink`: the one interface the engines call (open, write Arrow batches, commit with
  the ledger, abort); :func:`open_sink` picks the implementation for a ``--format``.
- :func:`resume`: the ranges an append converts, and the gaps retention left.
- ``compact_folder`` / ``compact_iceberg`` / ``compact_delta``: small files rewritten into
  large ones in one commit that keeps the ledger (:mod:`kbatch.tables._compact`,
  :mod:`kbatch.tables._compact_iceberg`); ``compact_out`` / ``compact_after``: every table of an
  OUT, as ``kbatch compact`` and ``kbatch convert --compact-after`` run them
  (:mod:`kbatch.tables._maintenance`).
- :class:`RemoteFolderSink`: a Parquet folder on S3 with its ledger (S3's conditional write is
  the commit point); Iceberg and Delta tables take ``s3://`` too (:mod:`kbatch.tables._remote`
  passes ``--storage-option`` to pyiceberg and deltalake).
"""

from __future__ import annotations

from ._bucket import iceberg_bucket as iceberg_bucket
from ._compact import DEFAULT_TARGET as DEFAULT_TARGET
from ._compact import compact_delta as compact_delta
from ._compact import compact_folder as compact_folder
from ._compact_iceberg import compact_iceberg as compact_iceberg
from ._delta import DeltaSink
from ._folder import FolderSink, read_ledger
from ._folderschema import READERS, read_recipe
from ._hooks import reached as reached
from ._iceberg import IcebergSink, default_catalog
from ._ledger import LEDGER_KEY, Gap, Ledger, OffsetRange, minus, resume
from ._leftovers import Store as Store
from ._leftovers import hold as hold
from ._leftovers import recover as recover
from ._leftovers import release as release
from ._maintenance import compact_after as compact_after
from ._maintenance import compact_out as compact_out
from ._maintenance import table_format as table_format
from ._open import TABLE_FORMATS, open_sink
from ._partition import Transform
from ._remote import delta_options as delta_options
from ._remote import iceberg_properties as iceberg_properties
from ._remote import is_s3
from ._remotefolder import RemoteFolderSink
from ._sink import ROUTE as ROUTE
from ._sink import EndOnError, Sink, TableCommit
from ._sink import by_topic as by_topic
from ._staging import MODES as MODES
from ._staging import check_target as check_target
from ._staging import has_data_files as has_data_files
from ._upsert import Keyed

__all__ = [
    "LEDGER_KEY",
    "TABLE_FORMATS",
    "EndOnError",
    "DeltaSink",
    "FolderSink",
    "IcebergSink",
    "Keyed",
    "Gap",
    "Ledger",
    "OffsetRange",
    "READERS",
    "RemoteFolderSink",
    "Sink",
    "TableCommit",
    "Transform",
    "default_catalog",
    "is_s3",
    "minus",
    "open_sink",
    "read_ledger",
    "read_recipe",
    "resume",
]
