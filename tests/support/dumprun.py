"""``kbatch dump`` run in this process, for the dump tests."""

from __future__ import annotations

import argparse
import io

from kbatch.cli import _dump


def dump(*argv: str) -> tuple[int, list[str], list[str]]:
    """Run ``kbatch dump ARGV``; return its status and its stdout and stderr lines."""
    parser = argparse.ArgumentParser()
    _dump.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    rc = _dump.run(parser.parse_args(list(argv)), out, err)
    return rc, out.getvalue().splitlines(), err.getvalue().splitlines()
