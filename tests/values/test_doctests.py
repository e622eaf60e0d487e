"""Run the docstring examples of kbatch.values' modules."""

import doctest
import importlib

import pytest

MODULES = ["kbatch.values", "kbatch.values._schema", "kbatch.values._store", "kbatch.values._files",
           "kbatch.values._dead_letter", "kbatch.values._json_schema", "kbatch.values._json_decode",
           "kbatch.values._json_infer", "kbatch.values._reader"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags)
    assert result.failed == 0 and result.attempted > 0
