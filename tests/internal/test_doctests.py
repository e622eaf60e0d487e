"""Run the docstring examples of kbatch.internal."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["kbatch.internal", "kbatch.internal._records", "kbatch.internal._iterate", "kbatch.internal._offsets",
           "kbatch.internal._groups", "kbatch.internal._transactions", "kbatch.internal._metadata",
           "kbatch.internal._producers", "kbatch.internal._arrow", "kbatch.log._producer_snapshot"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0
