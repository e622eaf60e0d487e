"""Kill trials (issue 39): conversions killed at the sinks' stages and at random moments, then a
rerun; what OUT and its parent hold afterwards, and the rows the table gives back."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from support.tables import REPO, rows_of_root, rows_of_table, write_log

#: The topics the trials convert.
TOPICS = ["events", "orders"]

#: The stages each trial kills at (kbatch.tables._hooks), then a kill at a random moment.
STAGES = ("mid-write", "before-commit", "mid-commit")


def convert(root: str, out: str, *argv: str, engine: str = "arrow", stage: str | None = None,
            kill_after: float | None = None) -> int:
    """``kbatch convert ROOT OUT ARGV --engine ENGINE`` in its own process group; killed (SIGKILL
    to the group: the driver and its JVM, as a scheduler's kill) at ``stage`` or after
    ``kill_after`` seconds. Its exit status (negative: the signal)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if stage:
        env["KBATCH_TEST_KILL_AT"] = stage
    proc = subprocess.Popen([sys.executable, "-m", "kbatch", "convert", root, out, *argv, "--engine", engine,
                             "--quiet"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=kill_after)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return -9
    if stage and proc.returncode == -9:
        with_group_gone(proc.pid)
    assert proc.returncode in (0, -9), err.decode()
    return int(proc.returncode)


def with_group_gone(pgid: int) -> None:
    """SIGKILL what is left of a killed driver's process group (Spark's JVM)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    for _ in range(100):  # the JVM is reaped by init: wait until the group is empty
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def random_kill(seed: int, most: float) -> float:
    """A moment to kill at (seconds), from ``seed``."""
    return random.Random(seed).uniform(0.3, most)


def tree(folder: Path) -> list[str]:
    """Every file and every empty folder under ``folder`` (folders end with ``/``), relative."""
    out = []
    for dirpath, dirs, files in os.walk(folder):
        rel = Path(dirpath).relative_to(folder)
        out += [(rel / f).as_posix() for f in files]
        if not dirs and not files and rel != Path("."):
            out.append(rel.as_posix() + "/")
    return sorted(out)


def table_rows(out: Path, fmt: str) -> list[tuple]:
    if fmt == "parquet":
        import pyarrow.dataset as pads

        return rows_of_table(pads.dataset(out, format="parquet", partitioning="hive").to_table())
    if fmt == "delta":
        from deltalake import DeltaTable

        return sorted((r for t in TOPICS for r in rows_of_table(DeltaTable(out / t).to_pyarrow_table())),
                      key=lambda r: r[:3])
    from kbatch.tables import default_catalog

    catalog = default_catalog(out)
    return sorted((r for t in TOPICS for r in rows_of_table(catalog.load_table(f"kafka.{t}").scan().to_arrow())),
                  key=lambda r: r[:3])


def only_the_table(out: Path, fmt: str) -> list[str]:
    """The files under OUT that are not its table's (what a killed run left)."""
    files = tree(out)
    if fmt == "parquet":
        table = r"topic=[^/]+/part-[^/]+\.parquet|topic=[^/]+/_common_metadata|_kbatch_ledger/\d{20}\.json"
        spark = r"topic=[^/]+/\.part-[^/]+\.parquet\.crc|_SUCCESS|\._SUCCESS\.crc"  # Hadoop's, with the files
        return [f for f in files if not re.fullmatch(f"{table}|{spark}", f)]
    if fmt == "delta":
        from deltalake import DeltaTable

        named = set()
        for t in TOPICS:
            named |= {f"{t}/{u.rsplit(f'/{t}/', 1)[-1]}" for u in DeltaTable(out / t).file_uris()}
        return [f for f in files if f not in named and not re.fullmatch(r"[^/]+/_delta_log/\d{20}\.json", f)]
    from kbatch.tables import default_catalog

    catalog = default_catalog(out)
    named = {"catalog.db"}
    for t in TOPICS:
        table = catalog.load_table(f"kafka.{t}")
        uris = {table.metadata_location, *(e.metadata_file for e in table.metadata.metadata_log),
                *(s.manifest_list for s in table.metadata.snapshots),
                *table.inspect.all_manifests().column("path").to_pylist(),
                *table.inspect.all_files().column("file_path").to_pylist()}
        named |= {Path(u.removeprefix("file://")).resolve().relative_to(out.resolve()).as_posix() for u in uris}
    return [f for f in files if f not in named]


def trial(sample: Path, tmp_path: Path, fmt: str, engine: str, kills: list[str | float]) -> None:
    root, out = tmp_path / "root", tmp_path / "outs" / "out"
    shutil.copytree(sample, root)
    write_log(root, "events", 0, 50)
    args = ["--format", fmt, "--subscribe", ",".join(TOPICS), "--mode", "append"]  # as a scheduler runs it
    for k, kill in enumerate(kills):
        if isinstance(kill, str):
            convert(str(root), str(out), *args, engine=engine, stage=kill)
        else:
            convert(str(root), str(out), *args, engine=engine, kill_after=kill)
        if k == len(kills) // 2:
            write_log(root, "events", 0, 120)  # new segments: the later kills are appends
    assert convert(str(root), str(out), *args, engine=engine) == 0
    if fmt == "iceberg":  # files with pyiceberg's (or Spark's) names, no commit names: kbatch clean's
        done = subprocess.run([sys.executable, "-m", "kbatch", "clean", str(out), "--older-than", "0s"],
                              capture_output=True, text=True, env={"PYTHONPATH": str(REPO)}, check=False)
        assert done.returncode == 0, done.stderr
    beside = sorted(p.name for p in out.parent.iterdir())
    assert beside == ["out"], beside
    left = only_the_table(out, fmt)
    assert left == [], left
    assert table_rows(out, fmt) == rows_of_root(root, TOPICS), "not every record once"
