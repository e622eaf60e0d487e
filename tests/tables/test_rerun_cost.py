"""A rerun with nothing new (issue 28's speed: under 2 s plus planning) imports nothing it does not
use: not ``pyarrow.dataset``, which imports pandas (about half a second of a new process)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.tables import REPO, convert_cli, summary_of

pytest.importorskip("pyarrow")

_RERUN = """
import sys
from kbatch.convert.__main__ import main
assert main([sys.argv[1], sys.argv[2], "--format", sys.argv[3], "--engine", "arrow", "--mode", "append",
             "--subscribe", "orders", "-q"]) == 0
print(sorted(m for m in ("pyarrow.dataset", "pandas") if m in sys.modules))
"""


@pytest.mark.parametrize("fmt", ["parquet", "delta"])
def test_a_rerun_with_nothing_new_imports_no_dataset_writer(sample, tmp_path, fmt):
    if fmt == "delta":
        pytest.importorskip("deltalake")
    out = tmp_path / "out"
    assert summary_of(convert_cli(str(sample), str(out), "--format", fmt, "--subscribe", "orders"))["records"] == 900
    done = subprocess.run([sys.executable, "-c", _RERUN, str(sample), str(out), fmt], capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": ""}, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
