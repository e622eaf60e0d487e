"""``kbatch sql ROOT "SELECT ..."``: ask a backup a question in SQL (DuckDB) without converting it.

Every topic of ROOT is a view named after it (``SELECT count(*) FROM orders``; a name with a
dot or a dash, or a reserved word, in double quotes: ``"orders.eu"``), over the lazy scan of
:func:`kbatch.duckdb.register`: the query's filters on ``topic``, ``partition``, ``offset`` and
``timestamp`` and the columns it uses reach the scan where DuckDB hands them over (DuckDB 2.0
on; before, DuckDB filters a stream of every record itself). Kafka's state is there too:
``consumer_offsets``, ``consumer_groups``, ``transactions``, ``producer_snapshots``,
``cluster_metadata.topics``, ... (:mod:`kbatch.cli._sql_views` says which and how they are
named); ``kbatch sql ROOT --list`` lists the views.

Values are typed where a registry has the topic's subjects: the root's own ``_schemas`` topic,
or ``--registry URL|PATH``; the other topics stay binary (a note on stderr says which);
``--raw`` keeps every topic binary; ``--errors null`` turns a value that does not decode into a
null with ``value_error`` saying why (``raise``, the default, fails the query on it).

Output: DuckDB's table on the terminal (``--max-rows``), ``--json`` (one JSON object per row,
as DuckDB's ``to_json`` writes it: a blob as text with ``\\xNN`` escapes, so ``decode(value)``
for UTF-8 text), or ``--output FILE.parquet|.csv|.json`` (DuckDB's ``COPY``, replacing FILE).
Several statements separated by ``;`` run in order; the last one's rows are the output.
Timestamps are shown in UTC (``SET TimeZone = 'Europe/Paris'; SELECT ...`` shows them in another zone).
``--stats`` says on stderr what the topic views' scans read and skipped. A typed view decodes
only the value fields the query reads (:mod:`kbatch.cli._sql_fields`; a query DuckDB then
cannot bind runs again with every field), and DuckDB 2 hands a filter on value fields to the
scan, which judges it on a decode of those fields alone.

Status 0; 2 for a user mistake (a query DuckDB cannot parse or bind, a view that does not
exist, no such ROOT, a folder that is not a root), 1 when the data fails the query (a corrupt
batch, a value that does not decode), each said in one line.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any

from kbatch.errors import KBatchError, LayoutError
from kbatch.log import ScanStats, logs_deeper, open_logs

from ._sql_fields import value_fields
from ._sql_views import View, register_views

__all__ = ["OUTPUT_FORMATS", "add_arguments", "run", "scan_error"]

#: ``--output`` suffix -> DuckDB's ``COPY`` options.
OUTPUT_FORMATS = {".parquet": "FORMAT parquet", ".csv": "FORMAT csv, HEADER", ".json": "FORMAT json",
                  ".jsonl": "FORMAT json", ".ndjson": "FORMAT json"}
#: the temporary view of the query's result that ``--output`` copies
_RESULT = "__kbatch_sql_result"


class _Usage(Exception):
    """A user mistake: said in one line, status 2."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``kbatch sql``'s arguments to ``parser``."""
    parser.add_argument("root", help="a log.dirs root, a backup (with --recursive), or a URL")
    parser.add_argument("query", nargs="?",
                        help="the SQL: each topic is a view named after it (--list lists them)")
    parser.add_argument("--list", action="store_true", help="list the views (with --json: as one JSON document)")
    parser.add_argument("--recursive", action="store_true",
                        help="search ROOT at any depth (a backup of several brokers)")
    parser.add_argument("--registry", default=None, metavar="URL|PATH",
                        help="the schema registry typing the values: a URL, a log.dirs root or backup with its "
                             "_schemas topic, or a directory of schema files (default: ROOT's own _schemas)")
    parser.add_argument("--raw", action="store_true", help="keep every topic's keys and values binary")
    parser.add_argument("--errors", choices=["raise", "null"], default="raise",
                        help="a value that does not decode fails the query (raise), or is null with value_error "
                             "saying why (null)")
    parser.add_argument("--isolation-level", choices=["read_committed", "read_uncommitted"],
                        default="read_uncommitted", help="read_committed leaves out aborted transactions")
    parser.add_argument("--output", default=None, metavar="FILE",
                        help="write the rows to FILE (.parquet, .csv, .json: JSON lines) instead of printing them")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON lines")
    parser.add_argument("--max-rows", type=int, default=40, metavar="N",
                        help="rows of the table printed on the terminal (default 40)")
    parser.add_argument("--stats", action="store_true",
                        help="say on stderr what the topics' scans read and skipped")


def _say(kind: str, text: str) -> None:
    print(f"kbatch sql: {kind}: {text}", file=sys.stderr)


def _check(args: argparse.Namespace) -> str | None:
    """The ``COPY`` options of ``--output`` (None: no file); a usage mistake raises."""
    if args.list == (args.query is not None):
        raise _Usage("give a QUERY, or --list to list the views" if not args.list else "--list takes no QUERY")
    if args.output is not None and args.json:
        raise _Usage("--output writes a file, --json prints the rows: give one")
    if args.raw and args.registry is not None:
        raise _Usage("--raw keeps the values binary, --registry types them: give one")
    if args.max_rows < 1:
        raise _Usage(f"--max-rows {args.max_rows}: at least 1")
    if args.output is None:
        return None
    suffix = os.path.splitext(args.output)[1].lower()
    if suffix not in OUTPUT_FORMATS:
        raise _Usage(f"--output {args.output}: its suffix says the format, one of {', '.join(OUTPUT_FORMATS)}")
    return OUTPUT_FORMATS[suffix]


def _registry(args: argparse.Namespace, topics: set[str], notes: list[str]) -> tuple[Any, str]:
    """The registry typing the values (None: binary) and its own topic's name."""
    from kbatch.values import DEFAULT_TOPIC, Registry, RegistryError  # defers pyarrow

    if args.raw:
        return None, DEFAULT_TOPIC
    where = args.registry
    if where is not None and where.startswith(("http://", "https://")):
        return Registry(where), DEFAULT_TOPIC
    if where is not None:
        try:
            return Registry.from_path(where, recursive=args.recursive), DEFAULT_TOPIC
        except RegistryError as exc:
            raise _Usage(f"--registry {where}: {exc}") from None
    if DEFAULT_TOPIC not in topics:
        return None, DEFAULT_TOPIC
    try:
        return Registry.from_log_dirs(args.root, recursive=args.recursive), DEFAULT_TOPIC
    except (RegistryError, KBatchError) as exc:  # an unreadable _schemas: the values stay binary
        notes.append(f"{DEFAULT_TOPIC} cannot be read ({exc}): every topic stays binary")
        return None, DEFAULT_TOPIC


def _open(args: argparse.Namespace, notes: list[str]) -> list[Any]:
    try:
        return open_logs(args.root, recursive=args.recursive, notes=notes)
    except FileNotFoundError as exc:
        raise _Usage(str(exc)) from None
    except LayoutError as exc:
        raise _Usage(str(logs_deeper(exc.url, exc.deeper, "--recursive") if exc.deeper else exc)) from None


def _list(views: list[View], args: argparse.Namespace) -> None:
    if args.json:
        import json

        print(json.dumps({"root": str(args.root), "views": [
            {"name": v.name, "reads": v.reads, "typed": v.typed or None} for v in views]}, indent=2))
        return
    if not views:
        print(f"no topics in {args.root}")
        return
    width = max(len("VIEW"), *(len(v.name) for v in views))
    reads = max(len("READS"), *(len(v.reads) for v in views))
    print(f"{'VIEW':<{width}}  {'READS':<{reads}}  TYPED")
    for v in views:
        print(f"{v.name:<{width}}  {v.reads:<{reads}}  {v.typed or '-'}".rstrip())


def _print(con: Any, rel: Any, args: argparse.Namespace, copy: str | None) -> None:
    """The result ``rel`` as a table, JSON lines, or a file."""
    if copy is None and not args.json:
        rel.show(max_rows=args.max_rows)
        return
    con.register(_RESULT, rel)  # the query, run once by what reads it
    if copy is not None:
        target = args.output.replace("'", "''")
        (rows,) = con.execute(f"COPY (SELECT * FROM {_RESULT}) TO '{target}' ({copy})").fetchone()
        _say("note", f"{rows:,} row{'' if rows == 1 else 's'} written to {args.output}")
        return
    lines = con.execute(f"SELECT to_json(r)::VARCHAR FROM {_RESULT} AS r")
    write = sys.stdout.write
    while chunk := lines.fetchmany(10_000):
        write("".join(line + "\n" for (line,) in chunk))


def scan_error(text: str) -> str | None:
    """What a kbatch scan raised, from the text of the DuckDB error that carries it (DuckDB keeps
    only the text), or None when the error is DuckDB's own.

    DuckDB 2 says ``... registered as 'orders' failed: CRCError: why``; DuckDB 1 ends its
    message with the traceback, whose last line is ``kbatch.errors.CRCError: why``.

    >>> scan_error("Invalid Input Error: exporting a stream from the object registered as 't' failed: CRCError: bad")
    'bad'
    >>> scan_error("Invalid Input Error: arrow_scan: get_next failed(): Invalid: bad. Detail: Python exception: "
    ...            "Traceback (most recent call last):\\n  File \\"x.py\\", line 1\\nkbatch.errors.CRCError: bad\\n")
    'bad'
    >>> scan_error('Binder Error: Referenced column "x" not found') is None
    True
    """
    if "Python exception" in text:
        tail = text.split("Python exception", 1)[1]
        found = re.findall(r"^[A-Za-z_][\w.]*: (.+)$", tail, re.MULTILINE)
        if found:
            last: str = found[-1]
            return last.strip()
        return text.split("Detail:", 1)[0].split("failed():", 1)[-1].replace("Invalid: ", "").strip()
    m = re.search(r"registered as '.*?' failed: (?:[A-Za-z_][\w.]*: )?(.+)", text, re.DOTALL)
    return " ".join(m.group(1).split()) if m else None


def _one_line(text: str) -> str:
    """A DuckDB error in one line: its lines joined, the query's echo (``LINE 1: ...``, the caret) left out."""
    lines = []
    for line in text.splitlines():
        if line.startswith("LINE ") or not line.strip() or set(line.strip()) == {"^"}:
            continue
        lines.append(line.strip())
    return " ".join(lines)


def _failed(exc: Exception) -> int:
    """Say what a query raised in one line; 1 when a scan failed on the data, 2 for the query's mistake."""
    import duckdb

    if os.environ.get("KBATCH_DEBUG"):
        raise exc
    text = str(exc)
    why = scan_error(text)
    if why is not None:
        _say("error", why)
        return 1
    line = _one_line(text)
    if isinstance(exc, duckdb.CatalogException) and "does not exist" in line:
        line += " (kbatch sql ROOT --list lists the views)"
    _say("error", line)
    return 1 if isinstance(exc, duckdb.InternalException) else 2


def _stats_line(stats: ScanStats) -> str:
    return (f"scans read {stats.logs - stats.logs_skipped} of {stats.logs} partitions, "
            f"{stats.segments - stats.segments_skipped} of {stats.segments} segments, decoded "
            f"{stats.batches_decoded} of {stats.batches_framed} batches ({stats.bytes_decoded:,} bytes), walked "
            f"{stats.batches_walked} ({stats.bytes_walked:,} bytes); {stats.rows:,} rows")


def run(args: argparse.Namespace) -> int:
    """Run the query (or list the views); return the exit status."""
    notes: list[str] = []
    try:
        copy = _check(args)
        try:
            import duckdb
            import polars  # noqa: F401  (the views' scans)
            import pyarrow  # noqa: F401
        except ImportError as exc:
            raise _Usage(f"needs duckdb, polars and pyarrow ({exc}): pip install 'kbatch[sql]'") from None
        logs = _open(args, notes)
        registry, registry_topic = _registry(args, {log.topic for log in logs}, notes)
    except _Usage as exc:
        _say("error", str(exc))
        return 2
    stats = ScanStats()
    con = duckdb.connect()
    try:
        con.execute("SET TimeZone = 'UTC'")  # timestamps shown as Kafka keeps them (a statement may change it)
        read = None if args.list or registry is None else value_fields(con, args.query)

        def views_of(fields: frozenset[str] | None, said: list[str]) -> list[View]:
            return register_views(con, logs, registry=registry, registry_topic=registry_topic, errors=args.errors,
                                  isolation_level=args.isolation_level, stats=stats, notes=said, fields=fields)

        views = views_of(read, notes)
        for note in notes:
            _say("note", note)
        if args.list:
            _list(views, args)
            return 0
        try:
            try:
                rel: Any = con.sql(args.query)  # None for a statement without rows (duckdb's stubs say otherwise)
            except duckdb.BinderException:
                if not read:
                    raise
                views_of(None, [])  # (a use of the value the fields missed: every field, as the user wrote it)
                rel = con.sql(args.query)
            if rel is None:  # a statement without rows (CREATE, SET, ...)
                if copy is not None:
                    _say("error", "the query gives no rows to write to --output")
                    return 2
            else:
                _print(con, rel, args, copy)
        except duckdb.Error as exc:
            return _failed(exc)
        if args.stats:
            _say("stats", _stats_line(stats))
        return 0
    finally:
        con.close()
        for log in logs:
            log.close()
