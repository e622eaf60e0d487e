"""``kbatch convert --engine arrow`` and the CLI's errors, without Spark (issue 16).

Loses nothing (topics starting with ``_``, internal topics when subscribed), leaves no partial
output after a failure in any mode, says what it found when there is nothing to convert, and
reports real counts per partition.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REAL_LOGS

import kbatch
from kbatch.log import LogWriter, open_logs

pa = pytest.importorskip("pyarrow")
import pyarrow.dataset as ds  # noqa: E402

from kbatch.__main__ import main  # noqa: E402
from kbatch.cli._sample import write_sample  # noqa: E402
from kbatch.convert import _arguments, _arrow_engine, _plan, _spark_engine, _summary  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
REAL_ROOTS = sorted(p for p in REAL_LOGS.glob("*") if p.is_dir()) if REAL_LOGS.is_dir() else []


def expected_rows(root: Path, topics=None) -> list[tuple]:
    """What LogDir.read gives for every partition: (topic, partition, offset, key, value)."""
    out = []
    for d in open_logs(root):
        if (topics is None and d.topic.startswith("__")) or (topics is not None and d.topic not in topics):
            continue
        t = d.read()
        out += [(d.topic, d.partition, o, k, v) for o, k, v in
                zip(t.records["offset"].tolist(), t.keys(), t.values(), strict=True)]
    return sorted(out, key=lambda r: r[:3])


def read_back(out: Path, fmt: str = "parquet") -> list[tuple]:
    t = ds.dataset(str(out), format=fmt, partitioning="hive").to_table()
    return sorted(
        ((r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in t.to_pylist()), key=lambda r: r[:3]
    )


def convert(*argv: str, capsys=None) -> tuple[int, dict]:
    status = main(["convert", *argv, "--engine", "arrow", "--json-summary"])
    summary = {}
    if capsys is not None:
        out = capsys.readouterr().out.strip()
        summary = json.loads(out.splitlines()[-1]) if status == 0 and out else {}
    return status, summary


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    write_sample(root)
    return root


def corrupt_root(root: Path) -> Path:
    """orders-1 with a flipped byte in its 14th batch (a CRC error mid-partition), and a good topic."""
    with LogWriter(root, "a-good", 0) as w:
        w.append(kbatch.encode([b"x"] * 5))
    with LogWriter(root, "orders", 1) as w:
        for i in range(30):
            w.append(kbatch.encode([b"value-%d" % j for j in range(10)], base_offset=i * 10))
    path = root / "orders-1" / "00000000000000000000.log"
    data = bytearray(path.read_bytes())
    data[2770] ^= 0xFF
    path.write_bytes(bytes(data))
    return root


@pytest.mark.skipif(not REAL_ROOTS, reason=f"no real broker logs at {REAL_LOGS}")
@pytest.mark.parametrize("root", REAL_ROOTS, ids=lambda p: p.name)
def test_real_logs_every_row_back_including_underscore_topics(root, tmp_path, capsys):
    status, summary = convert(str(root), str(tmp_path / "out"), capsys=capsys)
    assert status == 0
    want = expected_rows(root)
    assert read_back(tmp_path / "out") == want
    assert summary["records"] == len(want)
    assert summary["left_out"] == {"__consumer_offsets": 1}
    # internal topics too, when subscribed
    topics = sorted({d.topic for d in open_logs(root)})
    status, summary = convert(str(root), str(tmp_path / "all"), "--subscribe", ",".join(topics), capsys=capsys)
    assert status == 0 and summary["left_out"] == {}
    assert read_back(tmp_path / "all") == expected_rows(root, topics)
    hidden = [p.relative_to(tmp_path / "all") for p in (tmp_path / "all").rglob("*") if p.name.startswith(("_", "."))]
    # the offsets ledger and each topic folder's merged schema, no temporary files
    assert sorted(str(p) for p in hidden if p.name != "_common_metadata") == ["_kbatch_ledger"]
    assert {p.parent for p in hidden if p.name == "_common_metadata"} == \
        {p.parent.relative_to(tmp_path / "all") for p in (tmp_path / "all").glob("topic=*/*.parquet")}


def test_sample_counts_and_reasons(sample, tmp_path, capsys):
    status, summary = convert(str(sample), str(tmp_path / "out"), capsys=capsys)
    assert status == 0
    assert read_back(tmp_path / "out") == expected_rows(sample)
    per = {f"{p['topic']}-{p['partition']}": p for p in summary["per_partition"]}
    assert per["payments-0"]["control_markers"] == 23
    assert per["payments-0"]["records"] + 23 == per["payments-0"]["end"] - per["payments-0"]["start"]
    users = per["users-0"]
    assert users["records"] + users["compacted_offsets"] == users["end"] - users["start"]
    assert per["orders-0"]["why"] == ""
    status, summary = convert(str(sample), str(tmp_path / "rc"), "--subscribe", "payments",
                              "--isolation-level", "read_committed", capsys=capsys)
    p = summary["per_partition"][0]
    assert p["aborted_records"] > 0
    assert p["records"] + p["aborted_records"] + p["control_markers"] + p["compacted_offsets"] == p["end"] - p["start"]
    assert len(read_back(tmp_path / "rc")) == p["records"]


def test_failure_leaves_no_output_in_any_mode(tmp_path, capsys):
    root = corrupt_root(tmp_path / "root")
    out = tmp_path / "out"
    assert main(["convert", str(root), str(out), "--engine", "arrow"]) == 1
    err = capsys.readouterr().err
    assert "crc32c mismatch" in err and "orders-1/00000000000000000000.log" in err and err.count("\n") <= 2
    assert not out.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["root"]  # no temporary folder left
    # append and overwrite: the existing data stays as it was
    good = tmp_path / "good"
    with LogWriter(good, "t", 0) as w:
        w.append(kbatch.encode([b"a", b"b"]))
    assert main(["convert", str(good), str(out), "--engine", "arrow", "-q"]) == 0
    before = sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file())
    for mode in ("append", "overwrite"):
        assert main(["convert", str(root), str(out), "--engine", "arrow", "--mode", mode, "-q"]) == 1
        assert sorted((p.relative_to(out), p.read_bytes()) for p in out.rglob("*") if p.is_file()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good", "out", "root"]


def test_append_counts_and_adds(sample, tmp_path, capsys):
    out = tmp_path / "out"
    status, first = convert(str(sample), str(out), "--subscribe", "orders", capsys=capsys)
    status, second = convert(str(sample), str(out), "--subscribe", "orders", "--mode", "append", capsys=capsys)
    assert status == 0 and first["records"] == 900 and second["records"] == 0  # the ledger: nothing new
    assert len(read_back(out)) == 900
    status, second = convert(str(sample), str(out), "--subscribe", "orders,users", "--mode", "append", capsys=capsys)
    assert status == 0 and second["records"] == 147 and len(read_back(out)) == 1047
    status, third = convert(str(sample), str(out), "--subscribe", "users", "--mode", "overwrite", capsys=capsys)
    assert status == 0 and len(read_back(out)) == third["records"] == 147


def test_options_reach_the_files(sample, tmp_path, capsys):
    import pyarrow.parquet as pq

    out = tmp_path / "out"
    status, _ = convert(str(sample), str(out), "--subscribe", "orders", "--compression", "zstd",
                        "--max-rows-per-file", "400", "--row-group-rows", "100", capsys=capsys)
    assert status == 0
    files = sorted(out.rglob("*.parquet"))
    assert len(files) == 3  # 900 rows, 400 per file
    meta = pq.ParquetFile(files[0]).metadata
    assert meta.row_group(0).column(0).compression == "ZSTD" and meta.row_group(0).num_rows == 100
    status, _ = convert(str(sample), str(tmp_path / "orc"), "--format", "orc", "--no-partition-by-topic",
                        capsys=capsys)
    assert status == 0
    assert len(ds.dataset(str(tmp_path / "orc"), format="orc").to_table()) == 1602


def test_nothing_selected_says_what_was_found(tmp_path, sample, capsys):
    deep = tmp_path / "backup" / "kafka" / "data"
    with LogWriter(deep, "t", 0) as w:
        w.append(kbatch.encode([b"a"]))
    with LogWriter(tmp_path / "internal", "__consumer_offsets", 0) as w:
        w.append(kbatch.encode([b"a"]))
    LogWriter(tmp_path / "internal", "__consumer_offsets", 1).close()
    cases = [
        (tmp_path / "backup", (f"no partition directories in {tmp_path / 'backup'}; found Kafka logs under {deep}: "
                              f"pass that folder, or --recursive to read every log below {tmp_path / 'backup'}")),
        (tmp_path / "internal",
         "only internal topics (__consumer_offsets: 2 partitions); pass --include-internal (or --subscribe)"),
        (tmp_path / "nope", "no such log directory"),
        (sample / "orders-0" / "00000000000000000000.log", f"did you mean its log.dirs root {sample}?"),
    ]
    for root, message in cases:
        assert main(["convert", str(root), str(tmp_path / "out"), "--engine", "arrow"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err
        assert not (tmp_path / "out").exists()
    assert main(["convert", str(sample), str(tmp_path / "o"), "--engine", "arrow", "--subscribe", "nope"]) == 2
    assert "found legacy: 1 partition, orders: 3 partitions" in capsys.readouterr().err


def test_empty_range_writes_nothing(sample, tmp_path, capsys):
    status, summary = convert(str(sample), str(tmp_path / "out"), "--subscribe", "orders",
                              "--starting-offsets", '{"orders": {"0": 300, "1": 300, "2": 300}}', capsys=capsys)
    assert status == 0 and summary["records"] == 0 and summary["written"] is False
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["convert", "{sample}", "{out}", "--engine", "arrow", "--format", "json"], "use --engine spark for json"),
        (["convert", "{sample}", "{out}", "--engine", "arrow", "--where", "offset > 1"], "--where needs"),
        (["convert", "{sample}", "{out}", "--max-rows-per-file", "0"], "--max-rows-per-file must be >= 1"),
        (["convert", "{sample}", "{sample}"], "overlap"),
        (["convert", "{sample}/orders-0", "{sample}/orders-1"], "already exists and is not empty"),
        (["convert", "{sample}", "{out}", "--starting-offsets", "{{bad"], "not valid JSON"),
        (["convert", "{sample}", "{out}", "--conf", "novalue"], "--conf needs KEY=VALUE"),
        (["convert", "{sample}", "{sample}/..", "--mode", "overwrite"], "overlap: write the output elsewhere"),
        (["convert", "{sample}/users-0/00000000000000000000.index", "{out}"], "is a file"),
        (["sample", "{sample}/orders-0/00000000000000000000.log"], "exists and is not a directory"),
    ],
)
def test_user_mistakes_are_one_line_status_2(sample, tmp_path, argv, message):
    """Through the real entry point (a new process): one line on stderr, status 2, no JVM started."""
    argv = [a.format(sample=sample, out=tmp_path / "out") for a in argv]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "kbatch", *argv], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert not (tmp_path / "out").exists()


def test_spark_error_line_finds_kbatch_message():
    text = (
        "An error occurred while calling o55.save.\n: org.apache.spark.SparkException: Job aborted due to stage "
        "failure: Task 1 in stage 0.0 failed 1 times\norg.apache.spark.api.python.PythonException: Traceback "
        "(most recent call last):\n  File \"/x/_plan.py\", line 470, in read_slice\n"
        "kbatch.errors.CRCError: crc32c mismatch in orders-1/000.log (byte 2770, batch 4, field crc)\n\n"
        "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(...)\n"
    )
    assert _spark_engine.spark_error_line(RuntimeError(text)) == (
        "crc32c mismatch in orders-1/000.log (byte 2770, batch 4, field crc)"
    )
    assert _spark_engine.spark_error_line(RuntimeError("[PATH_NOT_FOUND] no\nmore")) == "[PATH_NOT_FOUND] no"


def test_spark_tasks_one_per_core_counting_open_costs(tmp_path):
    """Four equal partitions on 2 cores make 2 Spark tasks, as Spark's file source would split
    four equal files: the per-core target counts each segment's opening cost, as the packing does
    (counting bytes alone made the target one open cost short of two slices: 4 tasks)."""
    import argparse

    for p in range(4):
        with LogWriter(tmp_path / "root", "events", p) as w:
            for _ in range(20):
                w.append(kbatch.encode([b"x" * 1000] * 100), assign_offsets=True)
    parser = argparse.ArgumentParser()
    _arguments.add_arguments(parser)
    planned = _plan.plan(parser.parse_args([str(tmp_path / "root"), str(tmp_path / "out")]))
    try:
        for cores, n in ((1, 1), (2, 2), (4, 4), (8, 8)):
            tasks, opts = _spark_engine.spark_tasks(planned, cores)
            assert len(tasks) == n, (cores, tasks)
            assert sorted({s.partition for t in tasks for s in t}) == [0, 1, 2, 3]
        tasks, opts = _spark_engine.spark_tasks(_plan.plan(parser.parse_args(
            [str(tmp_path / "root"), str(tmp_path / "o2"), "--min-partitions", "8"])), 2)
        assert len(tasks) >= 8 and opts.min_partitions == 8
    finally:
        planned.close()


def test_progress_draws_in_place_only_when_enabled(tmp_path, sample, capsys):
    import io

    from kbatch._progress import Progress

    buf = io.StringIO()
    Progress(100, enabled=False, stream=buf).update(50)
    assert buf.getvalue() == ""
    clock = iter([0.0, 1.0, 2.0, 3.0]).__next__
    p = Progress(100, enabled=True, stream=buf, clock=clock)
    p.update(50, records=1)
    p.update(100, records=2, force=True)
    p.close()
    frames = buf.getvalue().split("\r")
    assert " 50% 50 B of 100 B, 1 record" in frames[1] and "100% 100 B of 100 B, 2 records" in frames[2]
    assert frames[-1] == "\x1b[K"
    assert main(["convert", str(sample), str(tmp_path / "o"), "--engine", "arrow", "--progress", "always"]) == 0
    err = capsys.readouterr().err
    assert "\r" in err and "% " in err and "records" in err
    assert main(["convert", str(sample), str(tmp_path / "q"), "--engine", "arrow", "-q", "--progress", "always"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and captured.out == ""


def test_convert_starts_at_the_checkpointed_log_start(tmp_path, capsys):
    """After DeleteRecords the broker's log-start-offset-checkpoint says where the log starts."""
    w = LogWriter(tmp_path / "root", "repartition", 0, segment_bytes=200)
    for i in range(10):
        w.append(kbatch.encode([b"v%d" % i], base_offset=i))
    w.delete_records(6)
    w.close()
    status, summary = convert(str(tmp_path / "root"), str(tmp_path / "out"), capsys=capsys)
    assert status == 0 and summary["records"] == 4
    assert [r[2] for r in read_back(tmp_path / "out")] == [6, 7, 8, 9]
    p = summary["per_partition"][0]
    assert (p["start"], p["end"], p["log_start_offset"], p["why"]) == (6, 10, 6, "")


def test_skipped_corruption_is_counted_per_partition(tmp_path, capsys):
    root = corrupt_root(tmp_path / "root")
    status, summary = convert(str(root), str(tmp_path / "out"), "--no-fail-on-data-loss", capsys=capsys)
    assert status == 0 and summary["records"] == 295
    p = {x["topic"]: x for x in summary["per_partition"]}["orders"]
    assert (p["records"], p["unread"], p["skipped_bytes"] > 0) == (290, 10, True)
    assert "10 unread records (corrupt batches skipped)" in p["why"]


def _cut_after_planning(monkeypatch, root: Path) -> Path:
    """Three segments of 100 records; the second is cut to half between planning and reading
    (as a retention or a copy running beside the job would)."""
    with LogWriter(root, "t", 0, segment_bytes=200) as w:  # one batch per segment
        for i in range(3):
            w.append(kbatch.encode([b"v%d" % j for j in range(100)], base_offset=100 * i))
    victim = sorted((root / "t-0").glob("*.log"))[1]
    planned = _plan.plan

    def plan_then_cut(args):
        p = planned(args)
        with open(victim, "r+b") as f:
            f.truncate(victim.stat().st_size // 2)
        return p

    monkeypatch.setattr(_arrow_engine, "plan", plan_then_cut)  # where convert_arrow finds it
    return victim


def test_segment_cut_after_planning_is_an_error_naming_it(tmp_path, monkeypatch, capsys):
    victim = _cut_after_planning(monkeypatch, tmp_path / "root")
    status, _ = convert(str(tmp_path / "root"), str(tmp_path / "out"))
    err = capsys.readouterr().err
    assert status == 1 and victim.name in err and "cut or rewritten" in err
    assert not (tmp_path / "out").exists()


def test_segment_cut_after_planning_is_reported_without_fail_on_data_loss(tmp_path, monkeypatch, capsys):
    victim = _cut_after_planning(monkeypatch, tmp_path / "root")
    status, summary = convert(str(tmp_path / "root"), str(tmp_path / "out"), "--no-fail-on-data-loss", capsys=capsys)
    assert status == 0 and summary["records"] == 100  # the first segment; the log stops at the cut one
    (p,) = summary["per_partition"]
    assert victim.name in p["lost"] and "the rest not read" in p["why"]
    assert len(read_back(tmp_path / "out")) == 100
    # the ledger holds what was read, not the planned range: an append goes on from offset 100
    from kbatch.tables import read_ledger

    assert [(r.start, r.end) for r in read_ledger(tmp_path / "out")[0]] == [(0, 100)]


def test_read_committed_says_what_waits_for_an_open_transaction(tmp_path, capsys):
    # issue 40 item 3: the range stops at the open transaction; the line says why and where next
    with LogWriter(tmp_path / "root", "t", 0) as w:
        w.append(kbatch.encode([b"c%d" % i for i in range(17)]))
        w.append(kbatch.encode([b"open"], base_offset=17, producer_id=1, producer_epoch=0, transactional=True))
        w.append(kbatch.encode([b"x", b"y"], base_offset=18))
    status, summary = convert(str(tmp_path / "root"), str(tmp_path / "out"), "--isolation-level", "read_committed",
                              capsys=capsys)
    (p,) = summary["per_partition"]
    assert status == 0 and (p["records"], p["end"], p["waiting"]) == (17, 17, 3)
    assert ("offsets 17..19 wait for an open transaction's marker (read_committed): a --mode append run "
            "continues from offset 17") in p["why"]
    assert main(["convert", str(tmp_path / "root"), str(tmp_path / "out2"), "--engine", "arrow",
                 "--isolation-level", "read_committed"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("  t-0:"))
    assert line.startswith("  t-0: 17 records, offsets 0..16 (offsets 17..19 wait for an open transaction's marker")


def test_a_copy_shorter_than_its_checkpoints_says_what_it_lacks_once(tmp_path, capsys):
    # issue 40 item 6: the recovery point past the copy's end is said in the partition's line (how
    # many offsets the copy lacks, not converted), not as a note beside a line of other offsets
    with LogWriter(tmp_path / "root", "t", 0, segment_bytes=300) as w:
        for i in range(0, 40, 4):
            w.append(kbatch.encode([b"v%d" % j for j in range(i, i + 4)], base_offset=i))
    for seg in sorted((tmp_path / "root" / "t-0").glob("*.log"))[-2:]:  # the copy lost its last segments
        seg.unlink()
    (tmp_path / "root" / "recovery-point-offset-checkpoint").write_text("0\n1\nt 0 40\n")
    end = open_logs(tmp_path / "root")[0].next_offset
    assert end < 40
    assert main(["convert", str(tmp_path / "root"), str(tmp_path / "out"), "--engine", "arrow"]) == 0
    out = capsys.readouterr().out
    assert out.count("recovery_point 40") == 1  # said once, in the partition's line
    line = next(x for x in out.splitlines() if x.startswith("  t-0:"))
    assert line == (f"  t-0: {end} records, offsets 0..{end - 1} (this copy lacks {40 - end} offsets the broker had "
                    f"(recovery_point 40 is past the copy's end {end}): not converted)")


def test_kraft_control_records_are_named_not_counted_as_transaction_markers(tmp_path, capsys):
    """Issue 35 item 8: a __cluster_metadata-0 (LeaderChange, KRaftVersion, KRaftVoters control
    batches between metadata records) is summarised with each control type by Kafka's
    ControlRecordType name; transaction markers of another topic are still markers."""
    from support.control_batches import KRAFT_VERSION, LEADER_CHANGE, control_batch

    root = tmp_path / "root"
    with LogWriter(root, "__cluster_metadata", 0) as w:
        w.append(control_batch([(2, LEADER_CHANGE)], 0))
        w.append(control_batch([(5, KRAFT_VERSION)], 1))
        w.append(control_batch([(6, b"\x00\x00\x01\x00")], 2))
        w.append(kbatch.encode([b"\x01\x02", b"\x01\x03"], base_offset=3, timestamps=[60, 61]))
        w.append(control_batch([(2, LEADER_CHANGE)], 5))
    with LogWriter(root, "payments", 0) as w:
        w.append(kbatch.encode([b"a", b"b"], base_offset=0, producer_id=7, producer_epoch=0, base_sequence=0,
                               transactional=True, timestamps=[1, 2]))
        w.append(kbatch.encode_control("commit", 7, 0, base_offset=2, timestamp=3))
    assert main(["convert", str(root), str(tmp_path / "out"), "--engine", "arrow", "--include-internal",
                 "--json-summary"]) == 0
    parts = {p["topic"]: p for p in json.loads(capsys.readouterr().out)["per_partition"]}
    meta = parts["__cluster_metadata"]
    assert meta["records"] == 2 and meta["control_types"] == {"LEADER_CHANGE": 2, "KRAFT_VERSION": 1,
                                                              "KRAFT_VOTERS": 1}
    assert meta["why"] == "4 KRaft control records (KRAFT_VERSION 1, KRAFT_VOTERS 1, LEADER_CHANGE 2)"
    assert parts["payments"]["why"] == "1 transaction marker" and parts["payments"]["control_types"] == {}


def test_the_default_engine_is_one_rule_said_in_help_and_summary(sample, tmp_path, capsys):
    """Issue 35 item 10c: without --engine, typed values run the arrow engine and the summary
    says so and why; --help states the same rule."""
    assert main(["convert", str(sample), str(tmp_path / "out"), "--values", "json", "--subscribe", "orders"]) == 0
    time_line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("time "))
    assert time_line.endswith(", engine arrow (the default for --values)"), time_line
    assert main(["convert", str(sample), str(tmp_path / "o2"), "--engine", "arrow", "--json-summary"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["engine"] == "arrow" and summary["engine_default"] == ""
    assert main(["convert", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "the default for parquet, orc and json" in text and "the default for iceberg, delta and --values" in text


def test_the_summary_says_what_it_did_to_out_and_lists_partitions_in_order(sample, tmp_path, capsys):
    """Issue 35 item 10f: a run writing nothing says OUT was not created when it was not there;
    the "... more partitions" line follows the partitions it continues, before the table line."""
    empty = ["--subscribe", "orders", "--starting-offsets", '{"orders": {"0": 300, "1": 300, "2": 300}}']
    assert main(["convert", str(sample), str(tmp_path / "none"), "--engine", "arrow", *empty]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.endswith(f"nothing written: {tmp_path / 'none'} not created"), first
    assert not (tmp_path / "none").exists()
    (tmp_path / "there").mkdir()
    assert main(["convert", str(sample), str(tmp_path / "there"), "--engine", "arrow", "--mode", "overwrite",
                 *empty]) == 0
    assert capsys.readouterr().out.splitlines()[0].endswith(f"nothing written: {tmp_path / 'there'} left as it was")
    root = tmp_path / "many"
    for p in range(_summary.SHOWN + 3):
        with LogWriter(root, "t", p) as w:
            w.append(kbatch.encode([b"v"], timestamps=[1]))
    assert main(["convert", str(root), str(tmp_path / "out"), "--engine", "arrow"]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  ... "))
    assert lines[at] == "  ... 3 more partitions (--json-summary)"
    assert all(line.startswith("  t-") for line in lines[at - _summary.SHOWN:at])
    assert lines[at + 1].startswith(f"table {tmp_path / 'out'}: commit 1")
