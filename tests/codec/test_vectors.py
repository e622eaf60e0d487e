"""Tier 1: conformance vectors lifted from other Kafka implementations' suites.

Read from ../shared/vectors when it exists (never copied into this repo).
"""

from __future__ import annotations

import pytest
from conftest import vector_params
from support.expect import check_table

import kbatch


@pytest.mark.parametrize("vector", vector_params())
def test_vector(vector):
    data = bytes.fromhex(vector["hex"])
    expect = vector["expect"]
    verify = vector["decode_options"]["check_crc"]
    if not expect["ok"]:
        with pytest.raises(kbatch.CorruptRecordError) as info:
            kbatch.decode(data, verify_crc=verify)
        assert expect["must_mention"].lower() in str(info.value).lower()
        assert info.value.position >= 0 and info.value.batch_index >= 0
        return
    table = kbatch.decode(data, verify_crc=verify)
    check_table(table, expect)
    # Every input type the docs promise decodes to the same columns.
    for kind in (bytearray, memoryview, lambda b: __import__("numpy").frombuffer(b, dtype="u1")):
        other = kbatch.decode(kind(data), verify_crc=verify)
        assert (other.records == table.records).all()
        assert (other.batches == table.batches).all()


@pytest.mark.parametrize(
    "vector",
    vector_params(lambda v: any(b.get("crc_valid") is False for b in v["expect"].get("batches", []))),
)
def test_bad_crc_vector_raises_when_verifying(vector):
    with pytest.raises(kbatch.CRCError) as info:
        kbatch.decode(bytes.fromhex(vector["hex"]), verify_crc=True)
    assert info.value.field == "crc"
    assert info.value.stored == vector["expect"]["batches"][0]["crc"]
