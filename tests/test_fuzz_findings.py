"""Defects the fuzz harnesses (``fuzz/``) found, each as a minimal reproducer.

Each test states the behaviour kbatch's standards require and is marked
``xfail(strict=True)`` while the defect is open: when a fix lands the test passes, strict
xfail turns that into a failure, and the fix removes the mark (and the defect's name from
``KBATCH_FUZZ_KNOWN`` in ``.ci/run``; see ``fuzz/oracle.py``). The defects listed in issue 15
(index trust, concurrent mutation, the memory bound, ``client_id``) have their regression
tests with their fixes, not here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import kbatch
from kbatch import protocol
from kbatch.log import LogWriter, open_log


def test_last_stable_offset_keeps_every_record_below_it_when_offsets_go_back() -> None:
    # found by fuzz/fuzz_decode.py: a batch at offsets 10-11, then one at offset 0
    data = (kbatch.encode([b"a", b"b"], base_offset=10, timestamps=[1, 1])
            + kbatch.encode([b"c"], base_offset=0, timestamps=[1]))
    assert kbatch.decode(data).records["offset"].tolist() == [10, 11, 0]
    try:
        t = kbatch.decode(data, isolation_level="read_committed", last_stable_offset=11)
    except kbatch.KBatchError as err:  # refusing offsets that go back is fine too, with a position
        assert err.position >= 0
        return
    # offset 0 is below the last stable offset: nothing may drop it silently, and the batch
    # rows may only point at records that exist
    assert t.records["offset"].tolist() == [10, 0]
    assert (t.batches["first_record"] + np.where(t.batches["is_control"], 0, t.batches["record_count"])
            <= len(t.records)).all()


def _aborted_log(root: Path) -> Path:
    with LogWriter(root, "t", 0) as w:
        w.append(kbatch.encode([b"a1", b"a2"], producer_id=7, producer_epoch=0, transactional=True,
                               timestamps=[1, 1]))
        w.append(kbatch.encode_control("abort", 7, 0, base_offset=2, timestamp=2))
        w.append(kbatch.encode([b"c"], base_offset=3, timestamps=[3]))
    return root / "t-0"


@pytest.mark.parametrize(
    "txnindex",
    [
        # an entry for an ABORT marker that is not there (offset 1 holds data)
        bytes.fromhex("0000" "0000000000000007" "0000000000000000" "0000000000000001" "0000000000000003")
        + bytes.fromhex("0000" "0000000000000007" "0000000000000000" "0000000000000002" "0000000000000003"),
        b"",  # emptied (its entry lost)
        # the entry with its firstOffset moved past the log (one byte changed, as the fuzzer did)
        bytes.fromhex("0000" "0000000000000007" "3a00000000000000" "0000000000000002" "0000000000000003"),
    ],
    ids=["extra-entry", "empty", "first-offset-moved"],
)
def test_a_lying_txnindex_does_not_return_aborted_records(tmp_path: Path, txnindex: bytes) -> None:
    part = _aborted_log(tmp_path)
    index = part / "00000000000000000000.txnindex"
    assert index.read_bytes() == bytes.fromhex(
        "0000" "0000000000000007" "0000000000000000" "0000000000000002" "0000000000000003")
    honest = open_log(part)
    assert honest.read(isolation_level="read_committed").values() == [b"c"]
    assert not [n for n in honest.notes if ".txnindex" in n]
    index.write_bytes(txnindex)
    # the ABORT marker is still in the .log: a read_committed read must still leave a1, a2 out,
    # as it does with the .txnindex deleted, and say that the .txnindex does not match
    log = open_log(part)
    assert log.read(isolation_level="read_committed").values() == [b"c"]
    assert [n for n in log.notes if ".txnindex" in n and "producer 7" in n]


def test_decode_request_with_an_unknown_version_says_where() -> None:
    # found by fuzz/fuzz_protocol.py: a Produce request header with version 0 (Produce has 3-13)
    data = bytes.fromhex("0000" "0000" "00000001" "0000")
    with pytest.raises(protocol.ProtocolError) as info:
        protocol.decode_request(protocol.default_schema(), data)
    assert info.value.position == 2  # request_api_version
    assert "request_api_version" in info.value.path
