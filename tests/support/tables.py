"""Helpers of the table tests (tests/tables/): roots that grow, the rows a root holds, a CLI run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kbatch
from kbatch.log import LogWriter, open_logs

REPO = Path(__file__).resolve().parents[2]


def write_log(root: Path, topic: str, partition: int, n: int, *, segment_bytes: int = 600) -> Path:
    """``<topic>-<partition>`` with records 0..n-1 (key ``k<i>``, value ``v<i>``), small segments;
    written again with a larger ``n`` it is the same log grown by new segments."""
    shutil.rmtree(root / f"{topic}-{partition}", ignore_errors=True)
    with LogWriter(root, topic, partition, segment_bytes=segment_bytes) as w:
        for i in range(0, n, 5):
            m = min(5, n - i)
            w.append(kbatch.encode([b"v%d" % j for j in range(i, i + m)], keys=[b"k%d" % j for j in range(i, i + m)],
                                   base_offset=i, timestamps=[1_700_000_000_000 + 1000 * j for j in range(i, i + m)]))
    return root


def rows_of_root(root: Path, topics: list[str] | None = None) -> list[tuple]:
    """``(topic, partition, offset, key, value)`` of every record ``LogDir.read`` gives (internal
    topics left out, as ``kbatch convert`` does), sorted."""
    out = []
    for d in open_logs(root):
        if d.topic.startswith("__") or (topics is not None and d.topic not in topics):
            continue
        t = d.read()
        out += [(d.topic, d.partition, o, k, v) for o, k, v in
                zip(t.records["offset"].tolist(), t.keys(), t.values(), strict=True)]
    return sorted(out, key=lambda r: r[:3])


def rows_of_table(table) -> list[tuple]:
    """The same tuples from a ``pyarrow.Table`` or a Polars ``DataFrame``."""
    rows = table.to_dicts() if hasattr(table, "to_dicts") else table.to_pylist()
    return sorted(((r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows),
                  key=lambda r: r[:3])


def convert_cli(
    *argv: str, env: dict[str, str] | None = None, json_summary: bool = True
) -> subprocess.CompletedProcess:
    """``python -m kbatch convert ... --engine arrow --json-summary`` in a subprocess (for kills)."""
    e = {**os.environ, "PYTHONPATH": str(REPO)}
    e.update(env or {})
    tail = ["--json-summary"] if json_summary else []
    return subprocess.run([sys.executable, "-m", "kbatch", "convert", *argv, "--engine", "arrow", *tail],
                          capture_output=True, text=True, env=e, timeout=300)


def summary_of(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def retention_deleted(root: Path, topic: str, partition: int, log_start: int) -> None:
    """As retention would: delete ``<topic>-<partition>``'s first segment and record ``log_start``
    in the root's ``log-start-offset-checkpoint``."""
    seg = sorted((root / f"{topic}-{partition}").glob("*.log"))[0]
    for f in (root / f"{topic}-{partition}").glob(seg.stem + ".*"):
        f.unlink()
    ckpt = root / "log-start-offset-checkpoint"
    lines = [ln for ln in ckpt.read_text().splitlines()[2:] if not ln.startswith(f"{topic} {partition} ")]
    ckpt.write_text("\n".join(["0", str(len(lines) + 1), *lines, f"{topic} {partition} {log_start}"]) + "\n")


def kafka_batch(offsets: range, topic: str = "t") -> Any:
    """A RecordBatch of the Kafka source's columns (no headers): partition 0 of ``topic`` at
    ``offsets``, values ``b"x"``, for the sinks' own tests."""
    import pyarrow as pa

    from kbatch.arrow import kafka_schema

    schema = kafka_schema(include_headers=False, extra_columns=False)
    n = len(offsets)
    cols = {"key": [None] * n, "value": [b"x"] * n, "topic": [topic] * n, "partition": [0] * n,
            "offset": list(offsets), "timestamp": [0] * n, "timestampType": [0] * n}
    return pa.RecordBatch.from_pydict(cols, schema=schema)
