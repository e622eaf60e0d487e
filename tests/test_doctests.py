"""Run the docstring examples of the public modules (the compiled one included)."""

import doctest

import pytest

import kbatch
import kbatch.__main__
import kbatch._clean
import kbatch._columns
import kbatch._core
import kbatch._dump
import kbatch._dumpinternal
import kbatch._dumpvalues
import kbatch._kafkajson
import kbatch._logdir
import kbatch._logwriter
import kbatch._metaproperties
import kbatch._options
import kbatch._predicate
import kbatch._runs
import kbatch._sample
import kbatch._segment
import kbatch._sparkstart
import kbatch._table
import kbatch._txn
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
    kbatch._core,
    kbatch._table,
    kbatch.errors,
    kbatch.log,
    kbatch._segment,
    kbatch._logdir,
    kbatch._logwriter,
    kbatch._txn,
    kbatch._dump,
    kbatch._dumpinternal,
    kbatch._dumpvalues,
    kbatch._kafkajson,
    kbatch._sample,
    kbatch._columns,
    kbatch._wire,
    kbatch._options,
    kbatch._predicate,
    kbatch._metaproperties,
    kbatch._runs,
    kbatch._clean,
    kbatch.tables._sink,
    kbatch._sparkstart,
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
    if module in (kbatch, kbatch._core):
        assert result.attempted > 0
