"""``python -m kbatch ...``: the ``kbatch`` command line (:mod:`kbatch.cli`)."""

import sys

from kbatch.cli import SUBCOMMANDS, build_parser, main

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

if __name__ == "__main__":
    sys.exit(main())
