"""Run the docstring examples of the public modules (the compiled one included)."""

import doctest

import pytest

import kbatch
import kbatch.__main__
import kbatch.cli._clean
import kbatch.codec._columns
import kbatch.codec._core
import kbatch.cli._dump
import kbatch.cli._dump_internal
import kbatch.cli._dump_values
import kbatch.protocol._json
import kbatch.log._logdir
import kbatch.log._logwriter
import kbatch.log._metaproperties
import kbatch.codec._options
import kbatch.log._predicate
import kbatch.tables._runs
import kbatch.cli._sample
import kbatch.log._segment
import kbatch.spark._session
import kbatch.codec._table
import kbatch.codec._txn
import kbatch._wire
import kbatch.errors
import kbatch.log
import kbatch.tables._bucket
import kbatch.tables._ledger
import kbatch.tables._partition
import kbatch.tables._remote
import kbatch.tables._sink
import kbatch.tables._upsert

MODULES = [
    kbatch,
    kbatch.__main__,
    kbatch.codec._core,
    kbatch.codec._table,
    kbatch.errors,
    kbatch.log,
    kbatch.log._segment,
    kbatch.log._logdir,
    kbatch.log._logwriter,
    kbatch.codec._txn,
    kbatch.cli._dump,
    kbatch.cli._dump_internal,
    kbatch.cli._dump_values,
    kbatch.protocol._json,
    kbatch.cli._sample,
    kbatch.codec._columns,
    kbatch._wire,
    kbatch.codec._options,
    kbatch.log._predicate,
    kbatch.log._metaproperties,
    kbatch.tables._runs,
    kbatch.cli._clean,
    kbatch.tables._sink,
    kbatch.spark._session,
    kbatch.tables._bucket,
    kbatch.tables._ledger,
    kbatch.tables._partition,
    kbatch.tables._remote,
    kbatch.tables._upsert,
]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_docstring_examples(module):
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE | doctest.IGNORE_EXCEPTION_DETAIL
    result = doctest.testmod(module, extraglobs={"kbatch": kbatch}, optionflags=flags)
    assert result.failed == 0
    if module in (kbatch, kbatch.codec._core):
        assert result.attempted > 0
