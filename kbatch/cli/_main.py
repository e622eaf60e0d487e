"""The ``kbatch`` command line's entry: the parser of every subcommand and :func:`main`.

Each subcommand lives in a module of its own that provides ``add_arguments(parser)`` and
``run(args) -> int`` (the exit status); :data:`SUBCOMMANDS` names them, and a new one is one line
there. The modules import only the standard library and kbatch at the top, so ``kbatch --version``
and ``--help`` work without the optional dependencies (pyspark, pyarrow).

>>> main(["--version"])  # doctest: +ELLIPSIS
kbatch ...
0
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from kbatch._version import __version__
from kbatch.errors import KBatchError

__all__ = ["SUBCOMMANDS", "build_parser", "main"]

#: Subcommand name -> module providing ``add_arguments(parser)`` and ``run(args) -> int``.
SUBCOMMANDS: dict[str, str] = {
    "dump": "kbatch.cli._dump",
    "sample": "kbatch.cli._sample",
    "convert": "kbatch.convert",
    "clean": "kbatch.cli._clean",
    "compact": "kbatch.cli._compact",
    "schemas": "kbatch.cli._schemas",
    "index": "kbatch.cli._index",
    "sql": "kbatch.cli._sql",
}

#: What a subcommand's handler looks like: parsed arguments in, exit status out.
Handler = Callable[[argparse.Namespace], int]


def _summary(doc: str | None) -> str | None:
    """The first line of a module docstring, without its ``kbatch NAME``: label or RST quotes."""
    if not doc:
        return None
    line = doc.strip().splitlines()[0]
    if line.startswith("``kbatch") and "``: " in line:
        line = line.split("``: ", 1)[1]
    return line.replace("``", "")


def build_parser() -> argparse.ArgumentParser:
    """Return the ``kbatch`` argument parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="kbatch",
        description="Decode, inspect and convert Apache Kafka record batches.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"kbatch {__version__}",
        help="print the version and exit",
    )
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="COMMAND")
    for name, module_name in SUBCOMMANDS.items():
        module = importlib.import_module(module_name)
        summary = _summary(module.__doc__)
        sub = subparsers.add_parser(name, help=summary, description=summary)
        module.add_arguments(sub)
        sub.set_defaults(handler=module.run, subparser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name.

    Returns
    -------
    int
        The subcommand's status; 0 for ``--version``/``--help``, 2 for a usage error (as argparse
        does).
    """
    parser = build_parser()
    try:
        args, extra = parser.parse_known_args(argv)
        if extra:  # reported by the subcommand's parser, so the usage shown is the subcommand's
            getattr(args, "subparser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    except SystemExit as exc:  # --version, --help and usage errors: report, don't exit
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return handler(args)
    except BrokenPipeError:  # `kbatch dump ... | head`: stop quietly, as other tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"kbatch {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # one line, never a traceback (KBATCH_DEBUG=1 shows it)
        if os.environ.get("KBATCH_DEBUG"):
            raise
        return _one_line(args.command, exc)
    finally:
        # what a failed run left in reference cycles (a writer's generators and readers, held by
        # the error's frames) is freed now, while pyarrow's and the table libraries' threads and
        # pools still run: freed at interpreter exit it can abort the process (status 134)
        gc.collect()


def _one_line(command: str, exc: Exception) -> int:
    """Print what a subcommand raised as one line; return 1 for bad data, 2 for a user mistake.

    Subcommands report their own errors; this is the net under them. A kbatch error
    (corrupt data, :class:`kbatch.errors.KBatchError`) is a failure (1); a missing or
    unreadable file, a bad value (``OSError``, ``ValueError``) is the user's input (2);
    anything else is a bug, reported as one line with its type (1).
    """
    if isinstance(exc, KBatchError):
        print(f"kbatch {command}: error: {exc}", file=sys.stderr)
        return 1
    if isinstance(exc, OSError) and exc.filename is not None:
        print(f"kbatch {command}: error: {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if isinstance(exc, (OSError, ValueError)):
        print(f"kbatch {command}: error: {exc}", file=sys.stderr)
        return 2
    print(f"kbatch {command}: internal error: {type(exc).__name__}: {exc} (KBATCH_DEBUG=1 shows the traceback)",
          file=sys.stderr)
    return 1
