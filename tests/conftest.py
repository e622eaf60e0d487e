"""Shared fixtures: the conformance vectors and real broker logs from ../shared; the scans' time
index files in a folder of the session's (never the user's cache)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("KBATCH_SHARED", Path(__file__).resolve().parents[2] / "shared"))
VECTORS = SHARED / "vectors"
REAL_LOGS = SHARED / "real-logs"


@pytest.fixture(scope="session", autouse=True)
def _time_index_dir(tmp_path_factory: pytest.TempPathFactory):
    """``KBATCH_INDEX_DIR``: the session's folder, for scans and their subprocesses."""
    old = os.environ.get("KBATCH_INDEX_DIR")
    os.environ["KBATCH_INDEX_DIR"] = str(tmp_path_factory.mktemp("kbatch-index"))
    yield
    if old is None:
        os.environ.pop("KBATCH_INDEX_DIR", None)
    else:
        os.environ["KBATCH_INDEX_DIR"] = old


def load_vectors() -> list[dict]:
    """Every conformance vector, or [] when ../shared/vectors is absent."""
    if not VECTORS.is_dir():
        return []
    return [json.loads(p.read_text()) for p in sorted(VECTORS.glob("*.json"))]


def vector_params(select=lambda v: True):
    vectors = [v for v in load_vectors() if select(v)]
    if not vectors:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"no vectors at {VECTORS}"))]
    return [pytest.param(v, id=v["id"]) for v in vectors]

