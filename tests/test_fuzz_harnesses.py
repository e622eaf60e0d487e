"""The value fuzz harnesses (``fuzz/fuzz_avro_evolution.py``, ``fuzz_protobuf.py``,
``fuzz_schemas_replay.py``) run their test-one-input function over their seeds from
``fuzz/make_seeds.py``, without libFuzzer or a sanitizer, so the suite notices when a harness
rots (an import, a helper or a kbatch API it calls that moved) or its seeds stop reaching
kbatch. Each runs in its own interpreter: a seed that crashes kbatch fails the test, not the
suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")
pytest.importorskip("fastavro")
pytest.importorskip("grpc_tools")

ROOT = Path(__file__).resolve().parents[1]

RUN = """
import sys
from pathlib import Path
sys.path.insert(0, str(Path(sys.argv[1]) / "fuzz"))
import importlib, make_seeds
make_seeds.write_seeds(Path(sys.argv[3]))
harness = importlib.import_module("fuzz_" + sys.argv[2])
seeds = sorted((Path(sys.argv[3]) / sys.argv[2]).iterdir())
assert seeds, "no seeds"
for seed in seeds:
    harness.TestOneInput(seed.read_bytes())
print("ran", len(seeds), "seeds")
"""


@pytest.mark.parametrize("name", ["avro_evolution", "protobuf", "schemas_replay"])
def test_a_harness_runs_its_seeds(name: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KBATCH_FUZZ_KNOWN": ""}
    done = subprocess.run([sys.executable, "-c", RUN, str(ROOT), name, str(tmp_path)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    errors = "\n".join(line for line in done.stderr.splitlines() if not line.startswith("INFO: Instrumenting"))
    assert done.returncode == 0, f"exit {done.returncode}: {errors[-4000:]}"
    assert done.stdout.startswith("ran ")
