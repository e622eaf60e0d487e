"""Kill trials with ``--engine spark`` on a local OUT (issue 39.2): the driver and its JVM killed
with files staged (Spark's task files, ``_temporary``) and at a random moment, then a rerun: OUT
and its parent hold exactly the table, every record once. Few kills: a JVM starts for each."""

from __future__ import annotations

import pytest
from support.kills import random_kill, trial

pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def java():
    from kbatch.spark._session import JavaError, java_home

    try:
        java_home()
    except JavaError as exc:
        pytest.skip(str(exc))


@pytest.mark.slow  # many runs killed or failed on purpose: once, not again in the wheel run
@pytest.mark.parametrize("fmt", ["parquet", "delta", "iceberg"])
def test_spark_kill_trial(java, tmp_path_factory, tmp_path, fmt):
    from kbatch.cli._sample import write_sample

    sample = tmp_path_factory.mktemp("sample")
    write_sample(sample)
    trial(sample, tmp_path, fmt, "spark", ["before-commit", random_kill(len(fmt), 30.0)])
