"""Files of the source checkout that some tests read (README, docs, setup.py).

The packaging proof runs the suite against the installed wheel from a folder holding only
``tests/``: there these files are not there, and the tests that check them are skipped (they
ran against the checkout already).
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def source_file(relative: str) -> Path:
    """``ROOT / relative``, or skip the test when the suite runs outside a source checkout."""
    path = ROOT / relative
    if not path.exists():
        pytest.skip(f"{relative} is not here: the suite runs outside a source checkout")
    return path
