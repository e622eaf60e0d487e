"""Make ``bench/`` importable (``from workload import core_workload``) under pytest.

pytest runs with ``--import-mode=importlib``, which leaves ``sys.path`` alone; run as a
script (``python bench/test_bench_codecs.py``) the directory is on it already.
"""

from __future__ import annotations

import sys
from pathlib import Path

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
