"""Tables that ``kbatch convert`` writes and keeps up to date, exactly once: Parquet folders,
Iceberg tables (pyiceberg) and Delta tables (deltalake).

- :class:`Ledger` / :class:`OffsetRange`: per source partition, the offsets a table holds;
  every format stores it with each commit (:mod:`kbatch.tables._ledger`).
- :class:`Sink`: the one interface the engines call (open, write Arrow batches, commit with
  the ledger, abort); :func:`open_sink` picks the implementation for a ``--format``.
- :func:`resume`: the ranges an append converts, and the gaps retention left.
- :class:`RemoteFolderSink`: a Parquet folder on S3 with its ledger (S3's conditional write is
  the commit point); Iceberg and Delta tables take ``s3://`` too (:mod:`kbatch.tables._remote`
  passes ``--storage-option`` to pyiceberg and deltalake).
"""

from __future__ import annotations

from kbatch.tables._delta import DeltaSink
from kbatch.tables._folder import FolderSink, read_ledger
from kbatch.tables._folderschema import READERS, read_recipe
from kbatch.tables._iceberg import IcebergSink, default_catalog
from kbatch.tables._ledger import LEDGER_KEY, Gap, Ledger, OffsetRange, minus, resume
from kbatch.tables._open import TABLE_FORMATS, open_sink
from kbatch.tables._partition import Transform
from kbatch.tables._remote import is_s3
from kbatch.tables._remotefolder import RemoteFolderSink
from kbatch.tables._sink import EndOnError, Sink, TableCommit

__all__ = [
    "LEDGER_KEY",
    "TABLE_FORMATS",
    "EndOnError",
    "DeltaSink",
    "FolderSink",
    "IcebergSink",
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
