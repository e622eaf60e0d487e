"""The spare-block allocator: a freed table's arena pages are taken by the next decode, never shared
with a live table, and the spare kept is the largest."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from support.twocores import (
    Records,
    encode_records,
    make_records,
)

import kbatch
from kbatch.codec import _core as core


@pytest.fixture(scope="module")
def records() -> Records:
    return make_records()


@pytest.fixture(scope="module")
def encoded(records: Records) -> dict[str, bytes]:
    return encode_records(records)


def test_arena_pages_are_reused_but_never_shared(encoded: dict[str, bytes], records) -> None:  # type: ignore[no-untyped-def]
    # Earlier tests may have left spares that fit, and garbage holding arenas: collected
    # by the ``gc.collect()`` below, four of those would push this test's freed arena
    # (the smallest spare) out of the pool. Both go first.
    gc.collect()
    core._release_spare()
    data = encoded["lz4"]
    first = kbatch.decode(data)
    kept = np.array(first.data, copy=True)
    second = kbatch.decode(data)  # ``first`` still alive: its arena is not the spare
    assert np.shares_memory(np.asarray(first.data), np.asarray(second.data)) is False
    addr = np.asarray(first.data).ctypes.data
    del first
    gc.collect()
    third = kbatch.decode(data)  # takes the freed arena's pages
    assert np.asarray(third.data).ctypes.data == addr
    assert np.array_equal(np.asarray(third.data), kept)
    assert third.values() == records[0] == second.values()
    core._release_spare()


def test_spare_blocks_keep_the_largest() -> None:
    # Arenas of three decodes in turn (as a benchmark decoding gzip, snappy, then lz4
    # does): the newest, largest one must be kept even past the 256 MiB of spares, the
    # smaller ones making room, or every later decode would fault in fresh pages.
    core._release_spare()
    mib = 1 << 20
    for size in (70 * mib, 112 * mib, 113 * mib):
        block = core._arena_block(size)  # (untouched: no page is mapped)
        del block  # back to the spares
    assert core._spare_sizes() == [113 * mib, 112 * mib]  # 70 + 112 + 113 MiB > 256 MiB
    again = core._arena_block(100 * mib)  # the smallest spare that fits
    assert core._spare_sizes() == [113 * mib]
    del again
    core._arena_block(300 * mib)  # over the limit itself: freed, the spares kept
    assert core._spare_sizes() == [113 * mib, 112 * mib]
    core._release_spare()
    live = [core._arena_block(size * mib) for size in (1, 2, 3, 4, 5)]
    del live  # at most four spares: the smallest goes
    assert core._spare_sizes() == [5 * mib, 4 * mib, 3 * mib, 2 * mib]
    core._release_spare()
    assert core._spare_sizes() == []
