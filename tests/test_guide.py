"""docs/GUIDE.md stays true: its examples run, in order, against a fresh sample root.

``console`` blocks: each ``$ kbatch ...`` line runs through the command line in this process and
what the block shows under it must match what it prints on stdout (``...`` stands for any text, as in
doctest). ``python`` blocks with ``>>>`` run as doctests. ``/tmp/kbatch-sample`` and
``/tmp/kbatch-parquet`` and ``/tmp/kbatch-tables`` become folders of the test's own; commands that name other places (a
backup, a bucket, a cluster) are examples of form and are not run.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import re
import shlex
from pathlib import Path

import pytest
from support.tree import source_file

from kbatch.__main__ import main

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
PLACES = ("/tmp/kbatch-sample", "/tmp/kbatch-parquet", "/tmp/kbatch-tables")

pytest.importorskip("pyarrow")
pytest.importorskip("pandas")


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(source_file("docs/GUIDE.md").read_text())]


def _commands(text: str) -> list[tuple[str, str]]:
    """(command, the output shown under it) for each ``$ `` line of a console block."""
    out: list[tuple[str, str]] = []
    for line in text.splitlines():
        if line.startswith("$ "):
            out.append((line[2:].split("  #")[0].strip(), ""))
        elif out:
            out[-1] = (out[-1][0], out[-1][1] + line + "\n")
    return out


def _runnable(command: str) -> bool:
    return command.startswith("kbatch ") and not re.search(r"/backup|s3://|spark://", command)


def test_the_guide_has_examples_of_every_kind() -> None:
    kinds = [k for k, _ in _blocks()]
    assert kinds.count("console") >= 3 and kinds.count("python") >= 4
    assert sum(_runnable(c) for k, t in _blocks() if k == "console" for c, _ in _commands(t)) >= 3


def test_every_example_runs_as_shown(tmp_path: Path) -> None:
    places = {p: str(tmp_path / Path(p).name) for p in PLACES}

    def here(text: str) -> str:
        for old, new in places.items():
            text = text.replace(old, new)
        return text

    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    globs: dict[str, object] = {}
    ran = 0
    for kind, text in _blocks():
        if kind == "console":
            for command, shown in _commands(text):
                if not _runnable(command):
                    continue
                out, err = io.StringIO(), io.StringIO()
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                    status = main(shlex.split(here(command))[1:])
                printed = out.getvalue()
                assert status == 0, f"{command}: exit {status}\n{printed}{err.getvalue()}"
                if shown.strip():
                    assert checker.check_output(here(shown), printed, flags), \
                        f"{command}\n--- the guide shows:\n{shown}--- it printed:\n{printed}"
                ran += 1
        elif kind == "python" and ">>>" in text:
            test = doctest.DocTestParser().get_doctest(here(text), globs, "GUIDE.md", "docs/GUIDE.md", 0)
            runner = doctest.DocTestRunner(optionflags=flags)
            report = io.StringIO()
            runner.run(test, out=report.write, clear_globs=False)
            globs = test.globs  # the next block goes on from this one's names
            assert runner.failures == 0, report.getvalue()
            ran += 1
    assert ran >= 6
