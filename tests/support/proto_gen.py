"""Protobuf test helpers: message classes generated at test time by grpc_tools from .proto text."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any


def generate(tmp: Path, name: str, text: str) -> Any:
    """Write ``<name>.proto`` under ``tmp``, run grpc_tools' protoc on it and import the module."""
    from grpc_tools import protoc

    (tmp / f"{name}.proto").write_text(text)
    wkt = Path(protoc.__file__).resolve().parent / "_proto"
    code = protoc.main(["protoc", f"-I{tmp}", f"-I{wkt}", f"--python_out={tmp}", str(tmp / f"{name}.proto")])
    assert code == 0, f"protoc failed on {name}.proto"
    sys.path.insert(0, str(tmp))
    try:
        sys.modules.pop(f"{name}_pb2", None)
        return importlib.import_module(f"{name}_pb2")
    finally:
        sys.path.remove(str(tmp))
