"""The public API as a checked-in file: a change to any public name, signature or CLI flag shows
up as a diff of ``tests/api_surface.txt`` (``tests/support/api_surface.py`` says how to write it
anew after a deliberate change)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest
from support import api_surface

SURFACE_FILE = Path(__file__).with_name("api_surface.txt")


def test_public_surface_is_the_checked_in_one() -> None:
    pytest.importorskip("pyspark")  # kbatch.spark and pyspark_kbatch are part of the surface
    pytest.importorskip("polars")
    pytest.importorskip("duckdb")
    expected = SURFACE_FILE.read_text()
    actual = api_surface.surface()
    if actual != expected:
        diff = "".join(difflib.unified_diff(expected.splitlines(True), actual.splitlines(True),
                                            "tests/api_surface.txt", "the code now", n=1))
        pytest.fail("the public surface changed; if that is meant, write the file anew "
                    "(PYTHONPATH=tests python -m support.api_surface > tests/api_surface.txt):\n" + diff)


def test_surface_sees_a_changed_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison is not blind: a public function given another parameter changes the text."""
    import kbatch

    before = "\n".join(api_surface.module_lines("kbatch"))

    def decode(buffer: object, verify_crc: bool = True, extra: int = 0) -> None: ...

    monkeypatch.setattr(kbatch, "decode", decode)
    after = "\n".join(api_surface.module_lines("kbatch"))
    assert before != after
    assert "def decode(buffer: 'object', verify_crc: 'bool' = True, extra: 'int' = 0) -> 'None'" in after


def test_surface_lists_every_subcommand_flag() -> None:
    lines = list(api_surface.cli_lines())
    assert "[kbatch convert]" in lines
    assert any(line.strip().startswith("--format choices=") for line in lines)
