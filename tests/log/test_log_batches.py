"""The one log -> Arrow batches loop (kbatch.log.log_batches) behind its three entry points.

``LogDir.to_arrow``, the Spark source's tasks (``kbatch.plan.read_task``, no Spark needed) and
``kbatch convert --engine arrow`` give the same rows on a root with aborted transactions,
control batches, an open transaction (last stable offset), legacy batches and a corrupt batch
skipped with ``on_corruption="skip"`` / ``failOnDataLoss=false``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402

from kbatch.__main__ import main  # noqa: E402
from kbatch.arrow import kafka_schema  # noqa: E402
from kbatch.cli._sample import write_sample  # noqa: E402
from kbatch.log import log_batches, open_log, open_logs  # noqa: E402
from kbatch.plan import Options, plan_slices, plan_tasks, read_task, resolve_range, select_logs  # noqa: E402

COLUMNS = ["topic", "partition", "offset", "key", "value", "timestamp", "timestampType", "headers"]


@pytest.fixture(scope="module")
def tricky(tmp_path_factory) -> tuple[Path, int]:
    """The sample root with a byte flipped inside a committed transactional batch of payments-0.

    Returns the root and the offset of the first record of the corrupted batch."""
    root = tmp_path_factory.mktemp("tricky")
    write_sample(root)
    log = open_log(root / "payments-0")
    heads = log.scan()
    aborted, lso = log.transactions()
    assert aborted and lso is not None and heads["is_control"].any()
    for h in heads:
        first = int(h["base_offset"])
        in_aborted = any(pid == int(h["producer_id"]) and lo <= first <= hi for pid, lo, hi in aborted)
        if h["is_transactional"] and not h["is_control"] and not in_aborted and int(h["record_count"]) > 1:
            break
    else:
        raise AssertionError("no committed transactional batch in the sample")
    log.close()
    path = root / "payments-0" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[int(h["position"]) + 61 + 10] ^= 0xFF  # inside the records: the batch's CRC fails
    path.write_bytes(bytes(data))
    return root, first


def _rows(table) -> list[dict]:
    rows = table.select(COLUMNS).to_pylist()
    return sorted(rows, key=lambda r: (r["topic"], r["partition"], r["offset"]))


def _logdir(root: Path, isolation: str):
    logs = open_logs(root)
    tables = [d.to_arrow(isolation_level=isolation, on_corruption="skip") for d in logs]
    skipped = sum(len(d.skipped) for d in logs)
    return pa.concat_tables(tables), skipped


def _source(root: Path, isolation: str):
    opts = Options.parse({"path": str(root), "isolationLevel": isolation, "failOnDataLoss": "false",
                          "includeHeaders": "true", "maxPartitionBytes": "2000"})
    logs = select_logs(opts)
    ranges = {(d.topic, d.partition): resolve_range(d, opts) for d in logs}
    tasks = plan_tasks(plan_slices(logs, ranges, opts), opts)
    assert len(tasks) > 1  # the planner cut the root: slices carry their transactions
    schema = kafka_schema(include_headers=True)
    return pa.Table.from_batches([b for t in tasks for b in read_task(t, opts)], schema=schema)


def _convert(root: Path, out: Path, isolation: str, capsys):
    status = main(["convert", str(root), str(out), "--engine", "arrow", "--json-summary",
                   "--isolation-level", isolation, "--no-fail-on-data-loss"])
    assert status == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return ds.dataset(str(out), format="parquet", partitioning="hive").to_table(), summary


@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_three_entry_points_give_the_same_rows(tricky, tmp_path, capsys, isolation):
    root, corrupt_offset = tricky
    logdir, skipped = _logdir(root, isolation)
    assert skipped == 1  # the corrupt batch was met and skipped, not read
    want = _rows(logdir)
    offsets = {r["offset"] for r in want if r["topic"] == "payments"}
    assert corrupt_offset not in offsets and offsets  # its records are left out, the rest is there
    assert _rows(_source(root, isolation)) == want
    converted, summary = _convert(root, tmp_path / "out", isolation, capsys)
    assert _rows(converted) == want
    assert summary["records"] == len(want)


def test_read_committed_leaves_out_aborted_and_stops_at_the_last_stable_offset(tricky):
    root, _ = tricky
    committed = _rows(_logdir(root, "read_committed")[0])
    uncommitted = _rows(_logdir(root, "read_uncommitted")[0])
    log = open_log(root / "payments-0")
    _, lso = log.transactions("skip")
    assert max(r["offset"] for r in committed if r["topic"] == "payments") < lso
    assert len(committed) < len(uncommitted)


def test_ranges_progress_and_lost(tricky):
    root, _ = tricky
    logs = open_logs(root)
    ranges = {(d.topic, d.partition): (0, 0) for d in logs}
    ranges[("orders", 1)] = (5, 15)
    seen: list = []
    batches = list(log_batches(logs, ranges=ranges, progress=lambda log, t: seen.append((log.topic, t is None))))
    assert sum(b.num_rows for b in batches) == 10
    assert {o for b in batches for o in b.column("offset").to_pylist()} == set(range(5, 15))
    # every log is told done, the one read also of its tables
    assert sum(done for _, done in seen) == len(logs) and ("orders", False) in seen
