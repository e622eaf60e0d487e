"""Kill trials (issue 39): conversions killed at the sinks' stages and at random moments, then a
rerun; what OUT and its parent hold afterwards, and the rows the table gives back."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.tables import REPO

#: The stages each trial kills at (kbatch.tables._hooks), then a kill at a random moment.
STAGES = ("mid-write", "before-commit", "mid-commit")


def convert(root: str, out: str, *argv: str, engine: str = "arrow", stage: str | None = None,
            kill_after: float | None = None) -> int:
    """``kbatch convert ROOT OUT ARGV --engine ENGINE`` in its own process group; killed (SIGKILL
    to the group: the driver and its JVM, as a scheduler's kill) at ``stage`` or after
    ``kill_after`` seconds. Its exit status (negative: the signal)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if stage:
        env["KBATCH_TEST_KILL_AT"] = stage
    proc = subprocess.Popen([sys.executable, "-m", "kbatch", "convert", root, out, *argv, "--engine", engine,
                             "--quiet"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return -9
    if stage and proc.returncode == -9:
        with_group_gone(proc.pid)
    assert proc.returncode in (0, -9), err.decode()
    return int(proc.returncode)


def with_group_gone(pgid: int) -> None:
    """SIGKILL what is left of a killed driver's process group (Spark's JVM)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(100):  # the JVM is reaped by init: wait until the group is empty
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def random_kill(seed: int, most: float) -> float:
    """A moment to kill at (seconds), from ``seed``."""
    return random.Random(seed).uniform(0.3, most)


def tree(folder: Path) -> list[str]:
    """Every file and every empty folder under ``folder`` (folders end with ``/``), relative."""
    out = []
    for dirpath, dirs, files in os.walk(folder):
        rel = Path(dirpath).relative_to(folder)
        out += [(rel / f).as_posix() for f in files]
        if not dirs and not files and rel != Path("."):
            out.append(rel.as_posix() + "/")
    return sorted(out)
