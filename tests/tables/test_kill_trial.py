"""Kill trials on a local OUT (issue 39.2, 35.4): conversions killed at each sink stage and at a
random moment, several times, then a rerun: OUT and its parent hold exactly the table, and the
table holds every record once. Both engines (Spark's fewest: a JVM each)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.kills import STAGES, convert, random_kill, tree
from support.tables import REPO, rows_of_root, rows_of_table, write_log

from kbatch._sample import write_sample

TOPICS = ["events", "orders"]


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample")
    write_sample(root)
    return root


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
        return [f for f in files if not re.fullmatch(r"topic=[^/]+/part-[^/]+\.parquet|_kbatch_ledger/\d{20}\.json", f)]
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
    if fmt == "iceberg" and engine == "arrow":  # pyiceberg's own file names: kbatch clean's
        done = subprocess.run([sys.executable, "-m", "kbatch", "clean", str(out), "--older-than", "0s"],
                              capture_output=True, text=True, env={"PYTHONPATH": str(REPO)}, check=False)
        assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]
    assert only_the_table(out, fmt) == []
    assert table_rows(out, fmt) == rows_of_root(root, TOPICS)


@pytest.mark.parametrize("fmt", ["parquet", "delta", "iceberg"])
def test_arrow_kill_trial(sample, tmp_path, fmt):
    kills: list[str | float] = ["before-commit", random_kill(len(fmt), 2.0), "mid-write", *STAGES,
                                random_kill(7, 2.5)]
    trial(sample, tmp_path, fmt, "arrow", kills)
