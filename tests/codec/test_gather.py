"""The encoder's gathering of values, keys and headers: from Python lists (snapshots that Python code
run meanwhile cannot free, the plain fast path equal to the general one) and from Arrow columns on two
threads (the same bytes, the same first bad record named)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from support.twocores import (
    PLAN_RECORDS,
    make_records,
    with_cpus,
)

import kbatch
from kbatch.codec import _core as core


def test_python_code_run_while_gathering_cannot_free_an_item() -> None:
    values = [bytes([65 + i % 26]) * 200 for i in range(3000)]
    expect = list(values)

    class Stamp:
        # Runs while record 2500 is gathered: empties the caller's list, which
        # would free every value gathered so far without the snapshot.
        def __int__(self) -> int:
            values.clear()
            gc.collect()
            return 1_700_000_000_000

    timestamps: list[object] = [1_700_000_000_000] * 3000
    timestamps[2500] = Stamp()
    data = kbatch.encode(values, timestamps=timestamps)
    assert values == []
    assert kbatch.decode(data).values() == expect


def test_plain_gather_edge_items_match_the_general_path() -> None:
    # Items the borrowed-pointer gather takes itself (non-ASCII str keys, None header
    # values, tuples) give the same bytes as the general path (forced by a bytearray).
    values = [b"v%d" % i for i in range(50)]
    headers = [(("clé", None), (b"k", b"x")) if i % 2 else [("ключ", b"y")] for i in range(50)]
    plain = kbatch.encode(values, timestamps=list(range(50)), headers=headers)
    forced = kbatch.encode([*values[:-1], bytearray(values[-1])], timestamps=list(range(50)), headers=headers)
    assert plain == forced
    t = kbatch.decode(plain)
    assert t.record(1).headers == [("clé", None), ("k", b"x")]


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"timestamps": [2**63]}, OverflowError),
        ({"headers": [[("\udc80", b"x")]]}, UnicodeEncodeError),
        ({"headers": [[(1, b"x")]]}, TypeError),
        ({"headers": [[("k", "str value")]]}, TypeError),
    ],
)
def test_plain_gather_leaves_errors_to_the_general_path(kwargs: dict, error: type) -> None:  # type: ignore[type-arg]
    with pytest.raises(error):
        kbatch.encode([b"v"], **kwargs)


def _arrow_columns(n: int) -> dict:  # type: ignore[type-arg]
    pa = pytest.importorskip("pyarrow")
    values, keys, timestamps, headers = make_records(n)
    return {
        "value": pa.array(values, pa.binary()),
        "key": pa.array(keys, pa.binary()),
        "timestamp": pa.array(timestamps, pa.timestamp("ms", tz="UTC")),
        "headers": pa.array(
            [[{"key": k, "value": v} for k, v in h] or None for h in headers],
            pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
        ),
    }


def test_arrow_columns_gathered_on_two_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    from kbatch.arrow import encode_arrow

    cols = _arrow_columns(PLAN_RECORDS)
    one = with_cpus(monkeypatch, 1, encode_arrow, cols, max_batch_records=500)
    two = with_cpus(monkeypatch, 2, encode_arrow, cols, max_batch_records=500)
    assert one == two
    values, keys, timestamps, headers = make_records(PLAN_RECORDS)
    assert one == kbatch.encode(values, keys, timestamps=timestamps, headers=headers, max_batch_records=500)


@pytest.mark.parametrize("where", ["value", "key", "hkey", "hval", "header"])
@pytest.mark.parametrize("record", [5, 30_000])  # in the front half, in the back half
def test_bad_column_offsets_name_the_same_record_on_two_threads(
    monkeypatch: pytest.MonkeyPatch, where: str, record: int
) -> None:
    from kbatch.arrow import from_arrow

    cols = from_arrow(_arrow_columns(PLAN_RECORDS))
    header = int(cols["header_offsets"][record])
    name, at = {
        "value": ("value_offsets", record + 1),
        "key": ("key_offsets", record + 1),
        "hkey": ("hkey_offsets", header + 1),
        "hval": ("hval_offsets", header + 1),
        "header": ("header_offsets", record + 1),
    }[where]
    bad = np.array(cols[name], dtype=np.int64)  # (a copy: int64 whatever the Arrow width)
    bad[at] = bad[at - 1] - 1  # decreases at ``at``
    cols[name] = bad
    if where in ("hkey", "hval") and cols["header_offsets"][record + 1] == header:
        cols["header_offsets"] = np.array(cols["header_offsets"], dtype=np.int64)
        cols["header_offsets"][record + 1 :] += 1  # give the record a header to read
    args = [cols.pop(k) for k in ("value_offsets", "value_data", "value_valid", "key_offsets", "key_data",
                                  "key_valid", "timestamps")]  # fmt: skip
    messages = []
    for cpus in (1, 2):
        with pytest.raises(ValueError, match=f"record {record}: ") as e:
            with_cpus(monkeypatch, cpus, core.encode_arrays, *args, **cols, max_batch_records=500)
        messages.append(str(e.value))
    assert messages[0] == messages[1]


def test_the_first_bad_record_wins_across_the_two_halves(monkeypatch: pytest.MonkeyPatch) -> None:
    from kbatch.arrow import from_arrow

    cols = from_arrow(_arrow_columns(PLAN_RECORDS))
    bad = np.array(cols["value_offsets"], dtype=np.int64)
    bad[30_001] = -1  # back half: before the data
    bad[9] = bad[10] + 1  # front half: decreases at entry 10, so record 9 is the first bad one
    for cpus in (1, 2):
        with pytest.raises(ValueError, match="record 9: its value offsets"):
            with_cpus(monkeypatch, cpus, core.encode_arrays, bad, cols["value_data"])


def test_arrow_columns_bytes_are_pinned_while_the_writers_run() -> None:
    # Code run during the call (NumPy converting the timestamps) tries to resize the
    # bytearray the values point into; the encoder holds it exported, so it cannot.
    n = 50
    data = bytearray(b"abcdefgh" * n)
    offsets = np.arange(0, 8 * n + 1, 8, dtype=np.int64)
    seen: list[str] = []

    class Stamps:
        def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
            try:
                data.extend(b"x" * (1 << 20))
                seen.append("resized")
            except BufferError:
                seen.append("refused")
            return np.arange(n, dtype=np.int64)

    out = core.encode_arrays(offsets, data, timestamps=Stamps())
    assert seen == ["refused"]
    assert kbatch.decode(out).values() == [b"abcdefgh"] * n
