"""Ctrl-C under ``kbatch convert --engine spark``: one line, "kbatch convert: interrupted", status 130
as under the arrow engine, no traceback of PySpark's signal handler or Py4J (issue 35 item 9)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kbatch.cli._sample import write_sample

REPO = str(Path(__file__).resolve().parents[2])


def test_ctrl_c_while_the_job_runs_is_one_line(tmp_path) -> None:
    pytest.importorskip("pyspark")
    from kbatch.spark._session import JavaError, java_home

    try:
        java_home()
    except JavaError as exc:
        pytest.skip(str(exc))
    root = tmp_path / "root"
    write_sample(root, records=30000)  # a job of several seconds on one core
    # this checkout first, then what the environment has (the oldest-Spark run's PySpark)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]),
           "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kbatch", "convert", str(root), str(tmp_path / "out"), "--engine", "spark",
         "--master", "local[1]", "--progress", "always"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert proc.stderr is not None
    said = b""
    # the progress line is drawn once a stage of the write job is active: the main thread is then
    # waiting in Py4J's call to Spark's write, where PySpark's own handler went wrong
    while b"to start)\n" not in said or b"\r" not in said.split(b"to start)\n", 1)[1]:
        byte = proc.stderr.read(1)
        if not byte:
            proc.wait()
            pytest.fail(said.decode())
        said += byte
    proc.send_signal(signal.SIGINT)
    out, rest = proc.communicate(timeout=300)
    err = (said + rest).decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "ERROR" not in err, err
    assert err.split("\x1b[K")[-1].strip().splitlines() == ["kbatch convert: interrupted"], err  # progress aside
    assert out == b"" and not (tmp_path / "out").exists()


def test_py4j_records_print_nothing_after_the_handler_is_installed() -> None:
    """Py4J logs a cut connection both on the root logger and on its own ``py4j.*`` loggers; after
    ``_plain_interrupts`` neither prints (a child process: the logging set-up is global)."""
    code = (
        "import logging\n"
        "from kbatch.convert._spark_engine import _plain_interrupts\n"
        "_plain_interrupts()\n"
        "try:\n"
        "    raise BrokenPipeError(32, 'Broken pipe')\n"
        "except BrokenPipeError:\n"
        "    logging.getLogger('py4j.clientserver').exception('Exception occurred while shutting down connection')\n"
        "    logging.getLogger('py4j.java_gateway').error('cut')\n"
        "logging.getLogger('someone.else').warning('kept')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": REPO})
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == "kept", done.stderr
