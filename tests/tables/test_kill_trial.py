"""Kill trials on a local OUT (issue 39.2, 35.4), arrow engine: conversions killed at each sink
stage and at random moments, several times, then a rerun: OUT and its parent hold exactly the
table, and the table holds every record once (Spark's: tests/spark/test_kill_trial_spark.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.kills import STAGES, random_kill, trial

from kbatch.cli._sample import write_sample


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    write_sample(root)
    return root


@pytest.mark.slow  # many runs killed or failed on purpose: once, not again in the wheel run
@pytest.mark.parametrize("fmt", ["parquet", "delta", "iceberg"])
def test_arrow_kill_trial(sample, tmp_path, fmt):
    kills: list[str | float] = ["before-commit", random_kill(len(fmt), 2.0), "mid-write", *STAGES,
                                random_kill(7, 2.5)]
    trial(sample, tmp_path, fmt, "arrow", kills)
