"""Shared fixtures: the conformance vectors and real broker logs from ../shared."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

SHARED = Path(os.environ.get("KBATCH_SHARED", Path(__file__).resolve().parents[2] / "shared"))
VECTORS = SHARED / "vectors"
REAL_LOGS = SHARED / "real-logs"


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

