"""DuckDB with its own Iceberg, Delta and Avro readers, for tests and benches that read tables back
as a DuckDB user does: the extension files the ``duckdb-extension-*`` packages install (nothing
downloaded at run time)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class MissingExtension(LookupError):
    """A ``duckdb-extension-*`` package is not installed, or not built for this DuckDB."""


def extension_path(name: str) -> Path:
    """The file of DuckDB extension ``name`` (``iceberg``, ``delta``, ``avro``) its package installed."""
    import importlib

    import duckdb

    try:
        module = importlib.import_module(f"duckdb_extension_{name}")
    except ImportError:
        raise MissingExtension(f"duckdb-extension-{name} is not installed") from None
    path = Path(module.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not path.exists():
        raise MissingExtension(f"duckdb-extension-{name} is not built for DuckDB {duckdb.__version__}")
    return path


def connect(*extensions: str) -> Any:
    """A new DuckDB connection with ``extensions`` loaded."""
    import duckdb

    con = duckdb.connect()
    for name in extensions:
        con.execute(f"LOAD '{extension_path(name)}'")
    return con


def duckdb_with(*extensions: str) -> Any:
    """:func:`connect` in a test: skipped when DuckDB or an extension is missing."""
    import pytest

    pytest.importorskip("duckdb")
    try:
        return connect(*extensions)
    except MissingExtension as exc:
        pytest.skip(str(exc))
