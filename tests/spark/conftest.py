"""A real local SparkSession per test module (``local[2]``), or a clean skip without pyspark/Java."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = str(Path(__file__).resolve().parents[2])


def _session():
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("Spark needs Java (17+) and none is installed")
    # Spark's Python workers are new processes: they must import this checkout's kbatch.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if REPO not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([REPO, *paths])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kbatch-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@pytest.fixture(scope="module")
def spark():
    """One SparkSession for the whole module, stopped at its end."""
    session = _session()
    import kbatch.spark

    kbatch.spark.register(session)
    yield session
    session.stop()
