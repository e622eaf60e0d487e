"""``kbatch convert ROOT OUT``: a Kafka ``log.dirs`` root to Parquet, ORC or JSON, with Spark or in-process with Arrow.

``python -m kbatch.convert ROOT OUT ...`` runs the job as ``kbatch convert`` does (:func:`main`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ._arguments import add_arguments
from ._run import run

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m kbatch.convert ROOT OUT ...`` (the same as ``kbatch convert``)."""
    import gc

    parser = argparse.ArgumentParser(prog="kbatch convert", description=__doc__.splitlines()[0])
    add_arguments(parser)
    try:
        return run(parser.parse_args(argv))
    finally:
        gc.collect()  # as kbatch.__main__.main: cycles freed before the interpreter exits


if __name__ == "__main__":
    sys.exit(main())
