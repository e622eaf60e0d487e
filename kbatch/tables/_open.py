"""Which :class:`~kbatch.tables.Sink` writes a ``--format``: :func:`open_sink`."""

from __future__ import annotations

import os
from typing import Any, Final

from ._delta import DeltaSink
from ._folder import FolderSink
from ._iceberg import IcebergSink
from ._sink import Sink

__all__ = ["TABLE_FORMATS", "open_sink"]

#: The formats written through a sink, with an offsets ledger.
TABLE_FORMATS: Final = ("parquet", "iceberg", "delta")


def open_sink(format: str, out: str | os.PathLike[str], mode: str, **options: Any) -> Sink:
    """The sink of ``format`` writing to ``out`` in ``mode`` (``errorifexists``, ``overwrite``,
    ``append``); ``options`` are the format's (see each sink's parameters)."""
    if format == "parquet":
        return FolderSink(out, mode, **options)
    if format == "iceberg":
        return IcebergSink(out, mode, **options)
    if format == "delta":
        return DeltaSink(out, mode, **options)
    raise ValueError(f"no table sink for format {format!r}: one of {', '.join(TABLE_FORMATS)}")
