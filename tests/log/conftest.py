"""Fixtures of the lazy scans' tests: a root of typed values and its registry."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def typed_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root of :func:`support.typed_scan_root.write_typed_scan_root` (topics avro, proto, json)."""
    pytest.importorskip("grpc_tools")  # the Protobuf schema is compiled by protoc
    from support.typed_scan_root import write_typed_scan_root

    return write_typed_scan_root(tmp_path_factory.mktemp("typed"))


@pytest.fixture(scope="module")
def registry(typed_root: Path):
    """The registry of ``typed_root``'s own ``_schemas`` topic."""
    from kbatch.values import Registry

    return Registry.from_log_dirs(typed_root)
