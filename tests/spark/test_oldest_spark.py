"""The Spark tests again, on the oldest Spark kbatch supports (``OLDEST``, a 4.0.x).

The suite itself runs on the PySpark the environment has (``pyspark>=4.0`` resolves to the
newest 4.x). This module installs PySpark ``OLDEST`` into a directory of its own (pip
``--target``, no other package changes) and runs the other modules of ``tests/spark`` in a child
pytest with that directory first on ``PYTHONPATH``. The child's Spark workers inherit the
path, and ``test_source.py::test_spark_is_the_expected_version`` checks there that the session
really is ``OLDEST``.

It downloads and builds PySpark (a 430 MB sdist: about a minute, then pip's cache) and starts
the JVM a few times, so it runs when ``KBATCH_TEST_OLDEST_SPARK=1`` or when ``CI`` is set
(unless ``KBATCH_TEST_OLDEST_SPARK=0``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.switches import enabled

OLDEST = "4.0.1"
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not enabled("KBATCH_TEST_OLDEST_SPARK"),
        reason=f"Spark {OLDEST} run: set KBATCH_TEST_OLDEST_SPARK=1 (CI runs it)",
    ),
    # the child run is this module's test: not again inside it
    pytest.mark.skipif(bool(os.environ.get("KBATCH_EXPECT_SPARK")), reason="inside the child run"),
]


def test_spark_suite_on_the_oldest_supported_spark(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    target = tmp_path / "pyspark-oldest"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", "--target", str(target), f"pyspark=={OLDEST}"], check=True, timeout=1200)
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), str(ROOT), *paths]), KBATCH_EXPECT_SPARK=OLDEST)
    env.pop("SPARK_HOME", None)  # pyspark then runs the jars it was installed with
    modules = sorted(str(p) for p in HERE.glob("test_*.py") if p.name != Path(__file__).name)
    child = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", *modules],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    report = child.stdout[-4000:] + child.stderr[-2000:]
    assert child.returncode == 0, report
    assert "PASSED tests/spark/test_source.py::test_spark_is_the_expected_version" in child.stdout, report
