"""What ``kbatch convert`` checks before any work, and the plan it then converts.

:func:`plan` checks the command line and its inputs without reading a record: the root, the
options (``--engine``'s default first: :func:`default_engine`), OUT and ``--mode``, the
selection and its offsets; a user mistake is a :class:`~kbatch.convert.UsageError` (one line,
status 2), and a root where the selection finds nothing says what it holds instead. Its
:class:`Plan` holds the partition directories, their offset ranges and what was left out; the
rows' schema (:func:`row_schema`) and a ledger's keys (:func:`ledger_keys`) follow from it.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbatch import storage
from kbatch.codec import kafka_schema
from kbatch.errors import LayoutError, ReplicasDisagreeError
from kbatch.log import describe_topics, logs_deeper, topics_in
from kbatch.plan import CLUSTER_ID_COLUMN, INTERNAL_TOPICS, ROOT_COLUMN, Options, range_key, resolve_range, select_logs
from kbatch.tables import check_target

from ._as_of import check_as_of
from ._cdc import CdcPlan, check_cdc_arguments, plan_cdc
from ._errors import UsageError
from ._sinks import has_ledger, is_remote, recover_out
from ._value_plan import check_arguments, requested

__all__ = ["Plan", "default_engine", "ledger_keys", "plan", "plan_changes", "row_schema"]

_PARTITION_DIR = re.compile(r"^(.+)-(\d+)$")


def _source_options(args: argparse.Namespace) -> dict[str, str]:
    opts: dict[str, str] = {
        "includeHeaders": "false" if args.no_headers else "true",
        "extraColumns": "true" if args.extra_columns else "false",
        "isolationLevel": args.isolation_level,
        "failOnDataLoss": "false" if args.no_fail_on_data_loss else "true",
    }
    if getattr(args, "recursive", False):
        opts["recursiveFileLookup"] = "true"
    if getattr(args, "replicas", "best") == "all":
        opts["replicas"] = "all"
    if getattr(args, "include_internal", False):
        opts["includeInternalTopics"] = "true"
    for item in getattr(args, "storage_option", None) or ():
        key, _, value = str(item).partition("=")
        opts[f"storage.{key.strip()}"] = value.strip()
    for name, value in (
        ("subscribe", args.subscribe),
        ("subscribePattern", args.subscribe_pattern),
        ("assign", args.assign),
        ("startingOffsets", args.starting_offsets),
        ("endingOffsets", args.ending_offsets),
        ("startingTimestamp", args.starting_timestamp),
        ("endingTimestamp", args.ending_timestamp),
        ("minPartitions", args.min_partitions),
    ):
        if value is not None:
            opts[name] = str(value)
    return opts


def _nothing_selected(root: Path, args: argparse.Namespace) -> str:
    """The message for a root where the selection finds no partition: what is there instead
    (logs deeper down raise from :func:`select_logs` already, in the words of ``kbatch.log._discover``)."""
    topics = topics_in(root)
    if not topics and _PARTITION_DIR.match(root.name):
        return f"{root} is named like a partition directory but holds no .log segment"
    if not topics:
        return f"no partition directories (<topic>-<partition> folders with .log segments) in {root}"
    listed = describe_topics(topics)
    unselected = args.subscribe is None and args.subscribe_pattern is None and args.assign is None
    if unselected and all(t in INTERNAL_TOPICS for t in topics):
        return f"only internal topics ({listed}); pass --include-internal (or --subscribe) to include them"
    chosen = "--subscribe" if args.subscribe else "--subscribe-pattern" if args.subscribe_pattern else "--assign"
    return f"{chosen} selects no partition in {root} (found {listed}){_internal_hint(topics, args)}"


def _internal_hint(topics: dict[str, int], args: argparse.Namespace) -> str:
    """Why a pattern left out the internal topics it matches, and what reads them."""
    if args.subscribe_pattern is None or getattr(args, "include_internal", False):
        return ""
    rx = re.compile(args.subscribe_pattern)
    refused = sorted(t for t in topics if t in INTERNAL_TOPICS and rx.fullmatch(t))
    if not refused:
        return ""
    return (f"; {', '.join(refused)} {'is an internal topic' if len(refused) == 1 else 'are internal topics'}, "
            f"which a pattern never selects (as Kafka's consumer: exclude.internal.topics): use --subscribe "
            f"{','.join(refused)} or add --include-internal")


@dataclass
class Plan:
    """The checked selection: partition directories, their offset ranges, what was left out."""

    opts: Any
    logs: list[Any]
    ranges: dict[tuple[str, int], tuple[int, int]]
    left_out: dict[str, int]
    input_bytes: int
    #: what the search said: replicas chosen, different logs named alike, disagreements
    notes: list[str] = field(default_factory=list)
    #: for some ranges, the only offsets read (an append reading again what an earlier run missed)
    pieces: dict[tuple[Any, ...], list[tuple[int, int]]] = field(default_factory=dict)

    @property
    def topics(self) -> list[str]:
        return sorted({d.topic for d in self.logs})

    def close(self) -> None:
        for d in self.logs:
            d.close()


def default_engine(args: argparse.Namespace) -> None:
    """``--engine``'s default, one rule: arrow for iceberg, delta and typed values (``--values``,
    ``--keys``), spark otherwise; ``args.engine_default`` says why, for the summary (empty when
    ``--engine`` was given)."""
    if getattr(args, "engine", None) is None:  # no JVM where none is needed
        why = f"--format {args.format}" if args.format in ("iceberg", "delta") else \
            "--values" if requested(args) else ""
        args.engine = "arrow" if why else "spark"
        args.engine_default = f"the default for {why or f'--format {args.format}'}"
    elif not hasattr(args, "engine_default"):
        args.engine_default = ""


def plan(args: argparse.Namespace) -> Plan:
    """Check everything that can be checked without reading records; raise :class:`UsageError`."""
    default_engine(args)
    check_cdc_arguments(args)
    check_as_of(args)
    check_arguments(args)
    root = Path(args.root)
    remote_root = is_remote(args.root)
    if not remote_root and not root.exists():
        raise UsageError(f"no such log directory: {root}")
    if not remote_root and root.is_file():
        hint = ""
        if _PARTITION_DIR.match(root.parent.name):
            hint = f"; did you mean its log.dirs root {root.parent.parent}?"
        raise UsageError(f"{root} is a file, not a log.dirs root or partition directory{hint}")
    for name in ("max_rows_per_file", "row_group_rows", "min_partitions"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    compact_after = getattr(args, "compact_after", None)
    if compact_after is not None:
        if compact_after < 2:
            raise UsageError(f"--compact-after must be >= 2 (the data files a table holds), got {compact_after}")
        if args.format not in ("parquet", "iceberg", "delta"):
            raise UsageError("--compact-after compacts a Parquet folder, an Iceberg or a Delta table, not "
                             f"--format {args.format}")
    if (args.catalog or args.catalog_option or args.namespace) and args.format != "iceberg":
        raise UsageError("--catalog, --catalog-option and --namespace are for --format iceberg")
    if args.partition_by and args.format not in ("iceberg", "delta"):
        raise UsageError("--partition-by is for --format iceberg or delta")
    if getattr(args, "upsert", False) and args.format not in ("iceberg", "delta"):
        raise UsageError("--upsert needs --format iceberg or delta: a folder of files has no rows to replace")
    if (getattr(args, "upsert", False) or getattr(args, "cdc", None)) and getattr(args, "where", None):
        raise UsageError("--upsert and --cdc apply every change of the offsets they convert: leave out --where "
                         "(a table with some of its changes left out is no state the source ever held)")
    if getattr(args, "upsert", False) and args.mode == "overwrite":
        raise UsageError("--upsert merges into the table: use --mode append (or a new OUT), not overwrite")
    if args.format in ("iceberg", "delta") and is_remote(args.out) and args.engine == "spark":
        raise UsageError(f"--engine spark --format {args.format} writes to a local OUT (the executors stage files "
                         f"in it): use --engine arrow for {args.out}")
    if args.engine == "arrow":
        if args.format == "json":
            raise UsageError("--engine arrow writes parquet or orc; use --engine spark for json")
        if args.where:
            raise UsageError("--where needs --engine spark")
        if args.conf or args.master or args.min_partitions:
            raise UsageError("--conf, --master and --min-partitions are for --engine spark")
    elif args.row_group_rows is not None:
        raise UsageError("--row-group-rows is for --engine arrow (Spark sizes row groups in bytes: --conf "
                         "spark.hadoop.parquet.block.size=...)")
    if args.format == "json" and args.compression not in (None, "none", "gzip"):
        raise UsageError(f"--format json takes --compression gzip or none, not {args.compression}")
    for item in args.conf:
        if "=" not in item:
            raise UsageError(f"--conf needs KEY=VALUE, got {item!r}")
    try:
        storage.parse_options(args.storage_option)
    except ValueError as exc:
        raise UsageError(f"--storage-option: {exc}") from None
    if not is_remote(args.out):
        out, src = Path(args.out).resolve(), root.resolve()
        if not remote_root and (out == src or out in src.parents or src in out.parents):
            raise UsageError(f"{args.out} and the log root {root} overlap: write the output elsewhere")
    if has_ledger(args.out):  # before OUT is looked at: what dead runs left there is gone
        recover_out(args, storage.parse_options(args.storage_option))
    if not is_remote(args.out):
        try:
            check_target(Path(args.out), args.mode)
        except (FileExistsError, PermissionError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    found: list[str] = []
    try:
        opts = Options.parse({**_source_options(args), "path": args.root})
        logs = select_logs(opts, found)
    except ReplicasDisagreeError:
        raise  # the data, not the command line: status 1
    except LayoutError as exc:
        raise UsageError(str(logs_deeper(exc.url, exc.deeper, "--recursive") if exc.deeper else exc)) from None
    except (ValueError, FileNotFoundError) as exc:
        raise UsageError(str(exc)) from None
    if not logs:
        raise UsageError(f"no partition selected under {args.root}" if remote_root else _nothing_selected(root, args))
    try:
        ranges = {range_key(d, opts): resolve_range(d, opts) for d in logs}
    except ValueError as exc:
        for d in logs:
            d.close()
        raise UsageError(str(exc)) from None
    left_out: dict[str, int] = {}
    if (not remote_root and args.subscribe is None and args.assign is None and not opts.include_internal
            and Path(logs[0].path) != root):
        left_out = {t: n for t, n in topics_in(root, opts.recursive).items() if t in INTERNAL_TOPICS}
    input_bytes = sum(s.size for d in logs for s in d.segments)
    return Plan(opts, logs, ranges, left_out, input_bytes, found)


def row_schema(p: Plan) -> Any:
    """The rows' ``pyarrow.Schema``: the Kafka source's columns (with the root columns when read)."""
    import pyarrow as pa

    schema = kafka_schema(include_headers=p.opts.include_headers, extra_columns=p.opts.extra_columns)
    if p.opts.root_columns:
        schema = schema.append(pa.field(ROOT_COLUMN, pa.string())).append(pa.field(CLUSTER_ID_COLUMN, pa.string()))
    return schema


def ledger_keys(p: Plan) -> list[tuple[str, int, str | None]]:
    """``(topic, partition, root)`` of the planned partitions (a ledger's keys)."""
    return [(d.topic, d.partition, d.root if p.opts.root_columns else None) for d in p.logs]


def plan_changes(args: argparse.Namespace, p: Plan, values: Any) -> CdcPlan | None:
    """``--cdc``, for either engine: the change streams' plan (:func:`kbatch.convert._cdc.plan_cdc`)
    set on ``values`` (a :class:`kbatch.convert._values.ValuePlan`, whose schemas become the
    tables', the after images' columns), the selected topics that are not change streams left
    out of ``p``; None without ``--cdc``."""
    cdc = plan_cdc(args, values.schemas, set(values.readers)) if values is not None else None
    if cdc is not None:
        _leave_out(p, cdc.left_out(p.topics))
        values.cdc, values.schemas = cdc, cdc.schemas
    return cdc


def _leave_out(p: Plan, topics: list[str]) -> None:
    """``topics`` taken out of the plan (``--cdc``: the internal topics a selection holds), counted
    in its ``left_out`` as the internal topics are."""
    for log in [d for d in p.logs if d.topic in topics]:
        p.logs.remove(log)
        p.left_out[log.topic] = p.left_out.get(log.topic, 0) + 1
        p.ranges = {k: v for k, v in p.ranges.items() if k[0] != log.topic}
        p.pieces = {k: v for k, v in p.pieces.items() if k[0] != log.topic}
        log.close()
    p.input_bytes = sum(s.size for d in p.logs for s in d.segments)
