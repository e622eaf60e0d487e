"""Fixtures of the table tests: the sample root (once per module), and a copy of it that grows."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.tables import write_log

from kbatch.cli._sample import write_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    write_sample(root)
    return root


@pytest.fixture
def root(sample, tmp_path) -> Path:
    """A copy of the sample root with a topic 'events' of 50 records that the tests grow."""
    r = tmp_path / "root"
    shutil.copytree(sample, r)
    return write_log(r, "events", 0, 50)
