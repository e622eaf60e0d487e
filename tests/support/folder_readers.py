"""A typed Parquet OUT after a schema evolution, and docs/GUIDE.md's commands that read it (issue 35,
item 2): the fixture of the readers' tests (pyarrow, Polars, DuckDB; Spark in tests/spark).

:func:`typed_out` converts the root of :func:`support.avro_root.write_avro_root` in three appends:
``orders`` with reader schema V1, ``plain`` (no subject: raw bytes), then, the log grown, ``orders``
with the latest reader schema V2 (two fields more). So ``OUT/topic=orders/`` holds files of two
value schemas beside a topic whose ``value`` is binary.

:func:`guide_reads` runs the GUIDE's section "Read what convert wrote" as printed (its paths
swapped for this OUT and topic) and returns the names it bound (``table``, ``frame``, ``rows``,
``df``).
"""

from __future__ import annotations

import datetime
import doctest
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.avro_root import V1, AvroRoot, grow, write_avro_root
from support.tables import convert_cli, summary_of
from support.tree import source_file

GUIDE_OUT = "/tmp/kbatch-parquet"


@dataclass
class TypedOut:
    out: Path
    root: AvroRoot
    #: offsets of orders-0 converted with reader schema V1 (the first run)
    first_run: set[int]


def typed_out(tmp: Path) -> TypedOut:
    r = write_avro_root(tmp / "root")
    out = tmp / "out"
    common = [str(r.root), str(out), "--values", "avro", "--mode", "append"]
    summary_of(convert_cli(*common, "--subscribe", "orders", "--reader-schema", "1"))
    first = set(range(len(r.raw)))
    summary_of(convert_cli(*common, "--subscribe", "plain"))
    grow(r)
    summary_of(convert_cli(*common, "--subscribe", "orders"))
    return TypedOut(out, r, first)


def expected_values(t: TypedOut) -> dict[int, Any]:
    """offset -> the value each reader must give for the good records of orders-0: fastavro's with
    the reader schema of the run that converted it (V1's runs: V2's fields null)."""
    v1 = {f["name"] for f in V1["fields"]}
    out = {}
    for offset, value in t.root.good.items():
        if offset in t.first_run:
            value = {k: (v if k in v1 else None) for k, v in value.items()}
        out[offset] = value
    return out


def _section() -> str:
    text = source_file("docs/GUIDE.md").read_text()
    start = text.index("### Read what convert wrote")
    return text[start:text.index("\n## ", start)]


def guide_reads(out: Path, topic: str, extra: dict[str, Any] | None = None, *, spark: bool = False) -> dict[str, Any]:
    """Run the GUIDE's reading commands on ``out``'s folder of ``topic``: its doctest examples
    (outputs not compared: the caller checks the data), and with ``spark`` its Spark line."""
    globs: dict[str, Any] = dict(extra or {})

    def here(src: str) -> str:
        return src.replace(GUIDE_OUT, str(out)).replace("topic=orders", f"topic={topic}")

    for block in re.findall(r"^```python\n(.*?)^```", _section(), re.S | re.M):
        examples = doctest.DocTestParser().get_examples(block)
        if examples:
            for ex in examples:
                exec(compile(here(ex.source), "GUIDE.md", "single"), globs)
        elif spark:
            exec(compile(here(block), "GUIDE.md", "exec"), globs)
    return globs


def plain(value: Any) -> Any:
    """A reader's row value as plain Python: dicts, lists, bytes, timestamps as µs since the epoch."""
    if hasattr(value, "asDict"):
        value = value.asDict(recursive=True)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return round(value.timestamp() * 1_000_000)
    return value


def by_offset(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["offset"]: plain(r) for r in rows}


def truth(out: Path, topic: str) -> dict[int, dict[str, Any]]:
    """Every row of ``OUT/topic=<topic>``, each file read with its own footer's schema (pyarrow,
    one file at a time: nothing merged), ``topic`` added."""
    import pyarrow.parquet as pq

    rows: dict[int, dict[str, Any]] = {}
    for f in sorted((out / f"topic={topic}").glob("*.parquet")):
        for r in pq.read_table(f).to_pylist():
            rows[r["offset"]] = plain({**r, "topic": topic})
    return rows


def same_rows(got: dict[int, dict[str, Any]], want: dict[int, dict[str, Any]]) -> None:
    """``got`` holds ``want``'s rows and fields; a field ``want``'s file lacked (a later reader
    schema's) reads null."""

    def fill(w: Any, g: Any) -> Any:
        if isinstance(w, dict) and isinstance(g, dict):
            return {k: fill(w.get(k), g[k]) for k in g}
        if isinstance(w, list) and isinstance(g, list) and len(w) == len(g):
            return [fill(a, b) for a, b in zip(w, g, strict=True)]
        return w

    assert set(got) == set(want), sorted(set(got) ^ set(want))
    for offset, row in want.items():
        assert set(row) <= set(got[offset]), (offset, set(row) - set(got[offset]))
        assert fill(row, got[offset]) == got[offset], (offset, row, got[offset])
