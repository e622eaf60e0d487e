"""Run the docstring examples of the public modules (the compiled one included)."""

import doctest

import pytest

import kbatch
import kbatch._core
import kbatch._table
import kbatch.errors


@pytest.mark.parametrize("module", [kbatch, kbatch._core, kbatch._table, kbatch.errors], ids=lambda m: m.__name__)
def test_docstring_examples(module):
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.IGNORE_EXCEPTION_DETAIL
    result = doctest.testmod(module, extraglobs={"kbatch": kbatch}, optionflags=flags)
    assert result.failed == 0
    if module in (kbatch, kbatch._core):
        assert result.attempted > 0
