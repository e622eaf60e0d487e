"""``kbatch compact`` after many small appends (issue 38): the file count and the read speed of a
compacted table against one written by a single conversion.

Root: ``KBATCH_BENCH_COMPACT_RECORDS`` workload records (default 5,000,000, the issue's figure) in
the 4 partitions of topic ``events`` (:func:`test_bench_arrow.build_root`). Two OUTs per format
(``KBATCH_BENCH_COMPACT_FORMATS``, default ``parquet,delta,iceberg``), with the arrow engine in this
process:

``single``
    one ``kbatch convert ROOT OUT --format F``: every record in one run.
``appended``
    ``KBATCH_BENCH_COMPACT_APPENDS`` (default 200) runs of ``--mode append``, each converting the
    next 1/200 of every partition (``--ending-offsets``): 0.5% of the table a run, each run's
    files a commit of their own; then ``kbatch compact OUT`` (``compact_out``, default target
    128 MiB).

Reported: data files of ``single``, of ``appended`` before and after the compaction (target: after
it, the single run's count +-10%), the seconds of the compaction, and a full-table read of each
OUT with DuckDB (``count(*)``, ``sum(octet_length(value))``: every row and value read) and Polars
(``scan_parquet`` / ``scan_delta`` / ``scan_iceberg`` through pyiceberg, the same aggregate),
best of 3 interleaved (target: the compacted table within 1.2x of the single run's). Both OUTs
hold every record once (checked by the counts).

Run: ``PYTHONPATH=. python bench/test_bench_compact.py`` prints the table; under pytest each target
is reported beside its figure (a miss is a ``TargetMissed`` warning, not a failure). It takes a
while: 200 conversions per format.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pl = pytest.importorskip("polars")
duckdb = pytest.importorskip("duckdb")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.duckdb_readers import connect  # noqa: E402  (DuckDB's own Iceberg and Delta readers, from PyPI)
from test_bench_arrow import SPARK_PARTITIONS, build_root  # noqa: E402
from workload import best_interleaved, machine, report  # noqa: E402

from kbatch.cli import main  # noqa: E402
from kbatch.tables import DEFAULT_TARGET, compact_out, hold, release  # noqa: E402

RECORDS = int(os.environ.get("KBATCH_BENCH_COMPACT_RECORDS", "5000000"))
APPENDS = int(os.environ.get("KBATCH_BENCH_COMPACT_APPENDS", "200"))
FORMATS = os.environ.get("KBATCH_BENCH_COMPACT_FORMATS", "parquet,delta,iceberg").split(",")
ROUNDS = 3


def convert(root: Path, out: Path, fmt: str, *more: str) -> None:
    status = main(["convert", str(root), str(out), "--format", fmt, "--engine", "arrow", "-q", *more])
    assert status == 0, f"kbatch convert {fmt} {more}: status {status}"


def data_files(out: Path, fmt: str) -> int:
    if fmt == "parquet":
        return sum(1 for p in out.rglob("*.parquet") if not any(s.startswith(("_", ".")) for s in
                                                                 p.relative_to(out).parts))
    if fmt == "delta":
        from deltalake import DeltaTable

        return sum(len(DeltaTable(t).file_uris()) for t in out.iterdir() if (t / "_delta_log").is_dir())
    return sum(sum(1 for _ in table(out, fmt).scan().plan_files()) for _ in [0])


def table(out: Path, fmt: str) -> Any:
    """The Iceberg table of topic ``events`` (kbatch's catalog in OUT)."""
    from kbatch.tables import default_catalog

    catalog = default_catalog(str(out))
    ns = catalog.list_namespaces()[0]
    return catalog.load_table(next(t for t in catalog.list_tables(ns) if t[-1] == "events"))


def duckdb_read(out: Path, fmt: str) -> tuple[int, int]:
    con = connect(*{"parquet": (), "delta": ("delta",), "iceberg": ("avro", "iceberg")}[fmt])
    if fmt == "parquet":
        src = f"read_parquet('{out}/topic=events/*.parquet')"
    elif fmt == "delta":
        src = f"delta_scan('{out}/events')"
    else:
        src = f"iceberg_scan('{table(out, fmt).metadata_location}')"
    n, v = con.sql(f"SELECT count(*), sum(octet_length(value)) FROM {src}").fetchone()
    return int(n), int(v)


def polars_read(out: Path, fmt: str) -> tuple[int, int]:
    if fmt == "parquet":
        lf = pl.scan_parquet(f"{out}/topic=events/*.parquet")
    elif fmt == "delta":
        lf = pl.scan_delta(str(out / "events"))
    else:
        lf = pl.scan_iceberg(table(out, fmt))
    row = lf.select(pl.len(), pl.col("value").bin.size().sum()).collect().row(0)
    return int(row[0]), int(row[1])


def measure(work: Path, root: Path, fmt: str) -> dict[str, Any]:
    single, appended = work / f"{fmt}-single", work / f"{fmt}-appended"
    convert(root, single, fmt)
    per_part = RECORDS // SPARK_PARTITIONS
    t0 = time.perf_counter()
    for k in range(1, APPENDS + 1):
        end = per_part * k // APPENDS
        ending = json.dumps({"events": {str(p): end for p in range(SPARK_PARTITIONS)}})
        convert(root, appended, fmt, "--mode", "append", "--ending-offsets", ending)
    appends = time.perf_counter() - t0
    before = data_files(appended, fmt)
    hold(str(appended))
    try:
        t0 = time.perf_counter()
        compact_out(str(appended), DEFAULT_TARGET)
        compact = time.perf_counter() - t0
    finally:
        release(str(appended))
    out = {"single_files": data_files(single, fmt), "before": before, "after": data_files(appended, fmt),
           "appends": appends, "compact": compact}
    answers = {(reader.__name__, name): reader(path, fmt) for reader in (duckdb_read, polars_read)
               for name, path in (("single", single), ("compacted", appended))}
    assert len(set(answers.values())) == 1 and next(iter(answers.values()))[0] == RECORDS, answers
    best = best_interleaved({f"{reader.__name__} {name}": (lambda r=reader, p=path: r(p, fmt))
                             for reader in (duckdb_read, polars_read)
                             for name, path in (("single", single), ("compacted", appended))}, ROUNDS)
    out["reads"] = best
    return out


def lines(fmt: str, m: dict[str, Any]) -> list[str]:
    r = m["reads"]
    return [(f"| {fmt} | {m['single_files']} | {m['before']} | {m['after']} | {m['compact']:.1f} | "
             f"{r['duckdb_read single']:.3f} / {r['duckdb_read compacted']:.3f} | "
             f"{r['polars_read single']:.3f} / {r['polars_read compacted']:.3f} |")]


def run_all() -> dict[str, dict[str, Any]]:
    work = Path(tempfile.mkdtemp(prefix="kbatch-bench-compact-"))
    try:
        root = build_root(work / "root", RECORDS)
        return {fmt: measure(work, root, fmt) for fmt in FORMATS}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def table_text(results: dict[str, dict[str, Any]]) -> str:
    out = [machine(), (f"{RECORDS:,} records, 4 partitions; {APPENDS} appends of {100 / APPENDS:.2g}% each, "
                       "then kbatch compact (128 MiB target)"), "",
           ("| format | files, one conversion | files after the appends | files after compact | compact s | "
            "DuckDB full read s, single / compacted | Polars full read s, single / compacted |"),
           "|---|---:|---:|---:|---:|---:|---:|"]
    for fmt, m in results.items():
        out += lines(fmt, m)
    return "\n".join(out)


def test_compact_bench() -> None:
    results = run_all()
    print("\n" + table_text(results))
    for fmt, m in results.items():
        ratio = m["after"] / m["single_files"]
        report(f"{fmt}: {m['after']} files after compact, {m['single_files']} from one conversion ({ratio:.2f}x)",
               "within 10%", abs(ratio - 1) <= 0.10)
        for reader in ("duckdb_read", "polars_read"):
            slow = m["reads"][f"{reader} compacted"] / m["reads"][f"{reader} single"]
            report(f"{fmt}: {reader} of the compacted table {slow:.2f}x the single conversion's", "<= 1.2x",
                   slow <= 1.2)


if __name__ == "__main__":
    print(table_text(run_all()))
