"""Another thread rewriting encode's and decode's inputs while kbatch reads them (issue 15).

Mutating a ``bytearray`` while it is decoded, or a list while it is encoded, is a bug in the
caller; it must never become memory corruption. decode may return garbage or raise a kbatch
error, but every span it returns lies inside its data; encode writes the list as it was at
some instant (one whole version of it), never freed memory.

Each case runs in a child process for a bounded number of rounds, so that a crash (the
segfault these cases found) fails one test with its exit status instead of ending the run.
Nothing is timed: a round count bounds each case. Under ``bash tools/asan.sh`` the children
inherit the AddressSanitizer runtime, which reports any read or write outside a buffer.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import random
import subprocess
import sys
import threading

import numpy as np
import pytest

import kbatch
from kbatch.codec import _core
from kbatch.errors import KBatchError

HERE = os.path.abspath(__file__)


# ---------------------------------------------------------------------------------------------
# The cases (run in the child)


class Toggler:
    """A Python thread writing each edit's replacement into ``buf``, then its original, until stopped."""

    def __init__(self, buf: memoryview, edits: list[tuple[int, bytes, bytes]]):
        self.buf = buf
        self.edits = edits  # (position, original bytes, replacement of the same size)
        self.stop = False
        self.rounds = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        buf, edits = self.buf, self.edits
        while not self.stop:
            for at, _, bad in edits:
                buf[at:at + len(bad)] = bad
            for at, good, _ in edits:
                buf[at:at + len(good)] = good
            self.rounds += 1

    def start(self) -> None:
        self.thread.start()

    def join(self) -> None:
        self.stop = True
        self.thread.join()


def guarded(raw: bytes) -> memoryview:
    """A writable copy of ``raw`` that ends where an inaccessible page begins, so that a read
    past its end crashes even without AddressSanitizer (kept mapped until the process ends)."""
    page = mmap.PAGESIZE
    pages = (len(raw) + page - 1) // page + 1
    mm = mmap.mmap(-1, pages * page)
    _KEEP.append(mm)
    base = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    if libc.mprotect(ctypes.c_void_p(base + (pages - 1) * page), page, 0) != 0:  # PROT_NONE
        raise OSError(ctypes.get_errno(), "mprotect")
    start = (pages - 1) * page - len(raw)
    view = memoryview(mm)[start:start + len(raw)]
    view[:] = raw
    return view


_KEEP: list[object] = []


def check_table(table: kbatch.RecordTable) -> None:
    """Every span a table gives lies inside its data."""
    size = len(memoryview(table.data).cast("B"))
    rec = table.records
    for field in ("key", "value"):
        start, length = rec[f"{field}_start"], rec[f"{field}_length"]
        inside = (length < 0) | ((start >= 0) & (start + np.maximum(length, 0) <= size))
        assert inside.all(), f"a {field} span reaches outside the data"
    hdr = table.headers
    for field in ("key", "value"):
        start, length = hdr[f"{field}_start"], hdr[f"{field}_length"]
        assert ((length < 0) | ((start >= 0) & (start + np.maximum(length, 0) <= size))).all()
    assert (rec["headers_start"] >= 0).all()
    assert (rec["headers_start"] + rec["headers_count"] <= len(hdr)).all()


def decode_rounds(buf: memoryview, edits: list[tuple[int, bytes, bytes]], rounds: int, **kwargs: object) -> str:
    seen = {"ok": 0, "error": 0}
    toggler = Toggler(buf, edits)
    toggler.start()
    try:
        for _ in range(rounds):
            try:
                table = kbatch.decode(buf, **kwargs)  # type: ignore[arg-type]
            except KBatchError as e:
                seen["error"] += 1
                if e.partial is not None:
                    check_table(e.partial)
            else:
                seen["ok"] += 1
                check_table(table)
    finally:
        toggler.join()
    return f"{seen}"


def length_edits(raw: bytes, batches: list[int]) -> list[tuple[int, bytes, bytes]]:
    """Make batch ``k``'s batchLength end its entry 5 bytes before the end of ``raw``: then
    the next entry's length would be read past the end (what _fill_batches did)."""
    rows, _, _ = _core.scan(raw)
    edits = []
    for k in batches:
        pos = int(rows["position"][k])
        bad = (len(raw) - 5 - pos - 12).to_bytes(4, "big")
        edits.append((pos + 8, raw[pos + 8:pos + 12], bad))
    return edits


class RewriteOnConvert:
    """A ``skip_batches`` argument that rewrites the buffer when decode converts it: between
    counting the batches and filling their rows, deterministically (no thread needed)."""

    def __init__(self, buf: memoryview, edits: list[tuple[int, bytes, bytes]], count: int):
        self.buf, self.edits, self.count = buf, edits, count

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        for at, _, bad in self.edits:
            self.buf[at:at + len(bad)] = bad
        return np.zeros(self.count, dtype=np.bool_)


def case_decode_fill(threads: int) -> str:
    """A batch length rewritten after the batches are counted: _fill_batches stepped by it
    and read the next length past the end of the data."""
    kbatch.set_threads(threads)
    raw = kbatch.encode([b"%07d" % i * 20 for i in range(16000)], max_batch_records=50)
    assert len(raw) >= 1 << 20  # (with two threads: the split decode)
    count = len(_core.scan(raw)[0])
    for k in (0, 1, count // 2, count - 2):
        buf = guarded(raw)
        edits = length_edits(raw, [k])
        try:
            _core.decode(buf, skip_batches=RewriteOnConvert(buf, edits, count))
        except KBatchError as e:
            assert 0 <= e.batch_index <= k + 1, e
            if e.partial is not None:
                check_table(e.partial)
        else:
            raise AssertionError(f"batch {k}: a length past the data decoded without an error")
    return "ok"


def case_decode_lengths(rounds: int) -> str:
    """One thread: batch lengths rewritten by another thread while decoding."""
    kbatch.set_threads(1)
    raw = kbatch.encode([b"v%d" % i for i in range(20000)], max_batch_records=1)
    return decode_rounds(guarded(raw), length_edits(raw, [0]), rounds)


def case_decode_split(rounds: int) -> str:
    """Two threads (the split decode of 1 MiB and more): batch lengths and the records'
    own length varints rewritten while both sides parse."""
    kbatch.set_threads(2)
    raw = kbatch.encode([b"%07d" % i * 20 for i in range(16000)], max_batch_records=50)
    assert len(raw) >= 1 << 20
    rows, _, _ = _core.scan(raw)
    edits = length_edits(raw, [len(rows) // 2])
    last = int(rows["position"][-1]) + 61  # the last batch's first record's length varint
    edits.append((last, raw[last:last + 1], b"\x7e"))
    return decode_rounds(guarded(raw), edits, rounds, verify_crc=False)


def case_decode_lz4(rounds: int) -> str:
    """LZ4 payloads decompressed in C: a block size rewritten between the bound pass and
    the decompression (a stored block of 2 GiB, then a compressed one as large)."""
    kbatch.set_threads(2)
    rng = random.Random(15)
    raw = kbatch.encode([rng.randbytes(24) + b"%07d" % i * 10 for i in range(20000)], compression="lz4",
                        max_batch_records=400)
    rows, _, _ = _core.scan(raw)
    assert len(rows) > 4
    edits = []
    for k, word in ((len(rows) // 2, 0xFFFFFFF0), (len(rows) // 2 + 1, 0x7FFFFFF0)):
        payload = int(rows["position"][k]) + 61
        assert raw[payload:payload + 4] == b"\x04\x22\x4d\x18" and raw[payload + 4] == 0x60
        at = payload + 7  # the first block's size word
        edits.append((at, raw[at:at + 4], word.to_bytes(4, "little")))
    # one edit at a time: the bound pass must see a good frame for the next pass to see a bad one
    return decode_rounds(guarded(raw), edits[:1], rounds, verify_crc=False) + decode_rounds(
        guarded(raw), edits[1:], rounds, verify_crc=False)


def case_encode_list(rounds: int, n: int, size: int, compression: str | None, headers: bool) -> str:
    """A thread replacing items of the lists while they are encoded (``values[:] = ...`` once
    a round, single items in between, each replaced item freed): every value written is
    its item's, in one version or the other, never freed memory."""
    kbatch.set_threads(2)
    versions = [[bytes([65 + v]) * size + b"%d" % i for i in range(n)] for v in range(2)]
    values = [bytes(b) for b in versions[0]]
    hdrs = [[("h", b"x" * 9)] for _ in range(n)] if headers else None
    stop = False

    def mutate() -> None:
        k = v = 0
        while not stop:
            k += 7919
            if k >= n:
                k %= n
                v ^= 1
                values[:] = [bytes(memoryview(b)) for b in versions[v]]
            values[k] = bytes(memoryview(versions[v][k]))  # a new object: the one it replaces is freed
            if hdrs is not None:
                hdrs[k] = [("h", bytes([97 + v]) * 9)]

    thread = threading.Thread(target=mutate, daemon=True)
    thread.start()
    try:
        for _ in range(rounds):
            out = kbatch.encode(values, headers=hdrs, compression=compression)
            table = kbatch.decode(out)
            got = table.values()
            assert len(got) == n
            bad = [i for i in range(n) if got[i] not in (versions[0][i], versions[1][i])]
            assert not bad, f"{len(bad)} values garbled, as record {bad[0]}: {got[bad[0]]!r}"
            if headers:
                assert {v for i in range(0, n, 97) for _, v in table.headers(i)} <= {b"x" * 9, b"a" * 9, b"b" * 9}
    finally:
        stop = True
        thread.join()
    return "ok"


def case_arrow(rounds: int) -> str:
    """A thread rewriting a table's record rows (lengths and starts) while it is converted to
    Arrow: the kernels check each row again as they copy; any table returned validates."""
    import pyarrow as pa

    kbatch.set_threads(2)
    raw = kbatch.encode([b"%07d" % i * 8 for i in range(60000)], keys=[b"k%d" % i for i in range(60000)],
                        headers=[[("h", b"%d" % i)] for i in range(60000)])
    table = kbatch.decode(raw)
    rec, hdr = table.records, table.headers.view(np.ndarray)
    size = len(table.data)
    seen = {"ok": 0, "error": 0}
    stop = False

    def mutate() -> None:
        rows = [1, 2, len(rec) // 2, len(rec) - 1]
        good = [(int(rec["key_start"][k]), int(rec["value_length"][k]), int(hdr["key_length"][k])) for k in rows]
        while not stop:
            for k in rows:
                rec["value_length"][k] = size - int(rec["value_start"][k])  # inside the data, far too long
                rec["key_start"][k] = -1
                hdr["key_length"][k] = size - int(hdr["key_start"][k])
            for k, (ks, vl, hl) in zip(rows, good, strict=True):
                rec["value_length"][k] = vl
                rec["key_start"][k] = ks
                hdr["key_length"][k] = hl

    thread = threading.Thread(target=mutate, daemon=True)
    thread.start()
    try:
        for r in range(rounds):
            try:
                out = table.to_arrow(binary=("binary", "large_binary", "binary_view")[r % 3])
            except ValueError:
                seen["error"] += 1
            else:
                seen["ok"] += 1
                out.validate(full=True)
    except pa.ArrowInvalid as e:
        raise AssertionError(f"an invalid Arrow table: {e}") from e
    finally:
        stop = True
        thread.join()
    return f"{seen}"


CASES = {
    "arrow": lambda: case_arrow(60),
    "decode_fill_1": lambda: case_decode_fill(1),
    "decode_fill_2": lambda: case_decode_fill(2),
    "decode_lengths": lambda: case_decode_lengths(200),
    "decode_split": lambda: case_decode_split(120),
    "decode_lz4": lambda: case_decode_lz4(120),
    "encode_small": lambda: case_encode_list(300, 5000, 40, None, True),
    # 4 MiB and 32,768 records on: planned and written on two threads
    "encode_large": lambda: case_encode_list(25, 50000, 100, None, False),
    "encode_zstd": lambda: case_encode_list(25, 50000, 100, "zstd", True),
}


# ---------------------------------------------------------------------------------------------
# The tests (each case in a child)


@pytest.mark.parametrize("case", sorted(CASES))
def test_mutation(case: str) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(kbatch.__file__))),
                                         env.get("PYTHONPATH", "")])
    child = subprocess.run([sys.executable, HERE, case], capture_output=True, text=True, env=env, timeout=900)
    assert child.returncode == 0, f"{case}: exit {child.returncode}\n{child.stdout}\n{child.stderr[-4000:]}"
    assert child.stdout.strip().startswith(("ok", "{")), child.stdout


def test_window_closed_between_calls() -> None:
    """The plain-list encode's window (GIL kept, GC off) never outlives a call, even one that raises."""
    import gc

    assert gc.isenabled()
    kbatch.encode([b"a"] * 10)
    with pytest.raises(TypeError):
        kbatch.encode([b"a", 1.5])
    assert not _core._window_is_open()
    assert gc.isenabled()


if __name__ == "__main__":
    sys.setswitchinterval(1e-5)  # hand the GIL over as often as possible
    print(CASES[sys.argv[1]]())
