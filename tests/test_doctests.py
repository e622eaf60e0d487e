"""Run the docstring examples of every kbatch module (the compiled ones included).

The modules are found by walking the package, so a new module's examples run without being
listed here. A module that imports an optional dependency this environment lacks is skipped.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import kbatch

NAMES = ["kbatch", *sorted(m.name for m in pkgutil.walk_packages(kbatch.__path__, "kbatch."))]
#: Compiled modules (no source for the finder to read): each must have examples that ran.
COMPILED = {"kbatch.codec._core", "kbatch.protocol._kernel"}


@pytest.mark.parametrize("name", NAMES)
def test_docstring_examples(name: str) -> None:
    try:
        module = importlib.import_module(name)
    except ImportError as exc:  # an optional dependency (pyspark, polars, duckdb) not installed
        pytest.skip(str(exc))
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.IGNORE_EXCEPTION_DETAIL
    result = doctest.testmod(module, extraglobs={"kbatch": kbatch}, optionflags=flags)
    assert result.failed == 0
    if name in COMPILED or name == "kbatch":
        assert result.attempted > 0
