"""Run the docstring examples of kbatch.protocol."""

from __future__ import annotations

import doctest
import importlib
from types import ModuleType

import pytest

MODULES = ["kbatch.protocol", "kbatch.protocol._message", "kbatch.protocol._schema",
           "kbatch.protocol._records", "kbatch.protocol._compile", "kbatch.protocol._connection",
           "kbatch.protocol._errors", "kbatch.protocol._keyed", "kbatch.protocol._kernel"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module: ModuleType = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags)
    assert result.failed == 0
    if name in ("kbatch.protocol", "kbatch.protocol._message", "kbatch.protocol._schema",
                "kbatch.protocol._keyed", "kbatch.protocol._kernel"):
        assert result.attempted > 0
