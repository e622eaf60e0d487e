"""Fuzz kbatch with another Python thread rewriting its input while it reads it (issue 15, 3 and 4).

A user mutating a ``bytearray`` while it is decoded, a list while it is encoded, or a table's
rows while it is converted to Arrow, has a bug; it must never become memory corruption. Each
input picks a workload and a set of edits; a second thread applies the edits and undoes them,
over and over, while this thread runs the workload a few times (or, in "hook" mode, the edits
land deterministically between decode's counting and filling of the batches, through
``skip_batches``' ``__array__``).

Input layout (any bytes are valid)::

    mode    uint8   % 6: 0 decode (one thread), 1 decode split (two threads),
                    2 decode of compressed batches (the codec from ``flags``), 3 legacy v0/v1
                    (uncompressed and gzip wrappers), 4 encode from lists, 5 to_arrow
    flags   uint8   bit 0 verify_crc; bit 1 hook mode (decode modes); bits 2-4 the codec
                    (mode 2: lz4, zstd, gzip, snappy) or the encode options (mode 4: bit 2
                    compressed, bit 3 headers, bits 4 and 7 both set: large, >= 4 MiB on two
                    threads; a quarter of the encodes, as each costs as much as ~40 others)
    edits   6 bytes each: batch uint16 (mod the batch count), field uint8, value 3 bytes
            field % 6: 0 batchLength, 1 recordCount, 2 the first record's length varint,
            3 the payload's 8th byte on (an LZ4 block size word), 4 attributes,
            5 an offset in the batch (the value's first byte) written with the rest

Oracle: nothing but kbatch errors (decode), ValueError (to_arrow) escapes; every span of a
decoded table lies inside its data; every value encode writes is one its item held (a whole
version of it, never freed memory); every Arrow table returned validates in full. Memory
errors are AddressSanitizer's to find (``bash fuzz/run.sh`` runs this under it).

Run ``python fuzz/fuzz_mutation.py CORPUS_DIR [libFuzzer flags]`` (atheris: coverage guides
the choice of workload and edits; the interleaving itself is the scheduler's), or
``python fuzz/fuzz_mutation.py --seconds N [--seed S]`` for a plain randomized loop with the
same harness, no atheris needed.
"""

from __future__ import annotations

import random
import sys
import threading
import time
from typing import Any

try:
    import atheris
except ImportError:  # the plain loop needs no atheris
    atheris = None

if atheris is not None and "--seconds" not in sys.argv:
    with atheris.instrument_imports(include=["kbatch"]):
        import kbatch
        import kbatch.arrow
        from kbatch.codec import _arrow_columns, _core
        from kbatch.errors import KBatchError
else:
    import kbatch
    import kbatch.arrow
    from kbatch.codec import _arrow_columns, _core
    from kbatch.errors import KBatchError

import numpy as np

ROUNDS = 3  # workload runs per input, the mutating thread busy all along

# Small inputs take the threaded paths, as tests/support/twocores.py sets them up: 16 KiB chunks
# (a compressed input of a few of them is a two-thread pipeline), uncompressed input parsed from
# both ends from 16 KiB on, to_arrow on threads from 256 records. The bases below can then be
# ~100 KB instead of over 1 MiB: many more inputs per second, the same code paths.
_core._CHUNK_BYTES = _core._CHUNK_BYTES_MAX = 1 << 14
_core._SPLIT_BYTES = 1 << 14
_arrow_columns._THREAD_CHUNK = 256


class Finding(AssertionError):
    """The oracle failed."""


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Finding(what)


# ---------------------------------------------------------------------------------------------
# Base inputs, made once


def _values(n: int, width: int) -> list[bytes]:
    rng = random.Random(n)
    return [rng.randbytes(width // 2) + b"%07d" % i * (width // 14) for i in range(n)]


def _bases() -> dict[str, bytes]:
    small = _values(1000, 40)
    hdrs = [[("h", b"%d" % i)] if i % 3 else [] for i in range(1000)]
    out = {
        "v2": kbatch.encode(small, keys=[b"k%d" % i for i in range(1000)], headers=hdrs, max_batch_records=20),
        "split": kbatch.encode(_values(1200, 70), max_batch_records=30),  # ~100 KB: split at 16 KiB
        "v0": kbatch.encode(small[:500], magic=0),
        "v1gzip": b"".join(kbatch.encode(small[i:i + 50], magic=1, compression="gzip", base_offset=i)
                           for i in range(0, 1000, 50)),
    }
    for codec in ("lz4", "zstd", "gzip", "snappy"):  # several 16 KiB chunks each
        out[codec] = kbatch.encode(_values(1500, 60), compression=codec, max_batch_records=100)
    return out


BASES = _bases()
ROWS = {name: _core.scan(raw)[0] for name, raw in BASES.items()}
CODECS = ("lz4", "zstd", "gzip", "snappy")
TABLE = kbatch.decode(BASES["v2"])


def _edits(raw: bytes, rows: np.ndarray, spec: bytes) -> list[tuple[int, bytes, bytes]]:
    """(position, original, replacement) for each 6-byte edit of ``spec``."""
    out = []
    for i in range(0, len(spec) - 5, 6):
        k = int.from_bytes(spec[i:i + 2], "little") % len(rows)
        field = spec[i + 2] % 6
        value = spec[i + 3:i + 6]
        pos = int(rows["position"][k])
        end = pos + 12 + int(rows["batch_length"][k])
        if field == 0:
            at, new = pos + 8, b"\x00" + value  # big-endian int32: up to 16 MiB
        elif field == 1:
            at, new = pos + 57, b"\x00" + value
        elif field == 2:
            at, new = pos + 61, value[:1]
        elif field == 3:
            at, new = pos + 68, value + b"\x80"[: value[0] & 1]
        elif field == 4:
            at, new = pos + 21, value[:2]
        else:
            at, new = pos + value[0] % max(1, end - pos), value[1:]
        at = min(at, len(raw) - len(new))
        if at >= 0 and new:
            out.append((at, raw[at:at + len(new)], new))
    return out[:8]


class Toggler:
    """A thread writing each edit, then undoing it, until stopped."""

    def __init__(self, apply: Any, undo: Any):
        self.apply, self.undo = apply, undo
        self.stop = False
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        while not self.stop:
            self.apply()
            self.undo()

    def start(self) -> None:
        self.thread.start()

    def join(self) -> None:
        self.stop = True
        self.thread.join()


# ---------------------------------------------------------------------------------------------
# The workloads


def _check_table(table: Any) -> None:
    size = len(memoryview(table.data).cast("B"))
    rec, hdr = table.records, table.headers
    for rows in (rec, hdr):
        for f in ("key", "value"):
            start, length = rows[f"{f}_start"].astype(np.int64), rows[f"{f}_length"].astype(np.int64)
            check(bool(((length < 0) | ((start >= 0) & (start + np.maximum(length, 0) <= size))).all()),
                  f"a {f} span outside the data")
    check(bool(((rec["headers_start"] >= 0) & (rec["headers_start"] + rec["headers_count"] <= len(hdr))).all()),
          "headers outside the header rows")


class _Hook:
    """skip_batches that applies the edits when decode converts it (between its two passes)."""

    def __init__(self, apply: Any, count: int):
        self.apply, self.count = apply, count

    def __array__(self, dtype: object = None, copy: object = None) -> np.ndarray:
        self.apply()
        return np.zeros(self.count, dtype=np.bool_)


def _decode_once(buf: bytearray, hook: _Hook | None, verify_crc: bool) -> None:
    try:
        if hook is not None:
            table = _core.decode(buf, verify_crc=verify_crc, skip_batches=hook)
        else:
            table = kbatch.decode(buf, verify_crc=verify_crc)
    except KBatchError as e:
        if e.partial is not None:
            _check_table(e.partial)
        return
    _check_table(table)


def run_decode(base: str, flags: int, spec: bytes) -> None:
    raw = BASES[base]
    kbatch.set_threads(1 if base in ("v2", "v0") else 2)
    buf = bytearray(raw)
    edits = _edits(raw, ROWS[base], spec)

    def apply() -> None:
        for at, _, new in edits:
            buf[at:at + len(new)] = new

    def undo() -> None:
        for at, old, _ in edits:
            buf[at:at + len(old)] = old

    if flags & 2:  # hook: the edits land between counting and filling, every time
        count = len(ROWS[base])
        for _ in range(ROUNDS):
            _decode_once(buf, _Hook(apply, count), bool(flags & 1))
            undo()
        return
    toggler = Toggler(apply, undo)
    toggler.start()
    try:
        for _ in range(ROUNDS):
            _decode_once(buf, None, bool(flags & 1))
    finally:
        toggler.join()


def _version(i: int, v: int, width: int) -> bytes:
    return bytes([65 + v % 26]) * width + b"%d" % i


def run_encode(flags: int, spec: bytes) -> None:
    large = (flags & 0x90) == 0x90
    n = 50000 if large else 200 + int.from_bytes(spec[:2] or b"\0\0", "little") % 1500
    width = 90 if large else 1 + (spec[2] if len(spec) > 2 else 8) % 64
    compression = CODECS[(flags >> 5) % 4] if flags & 4 else None
    kbatch.set_threads(2)
    values: list[bytes | None] = [_version(i, 0, width) for i in range(n)]
    headers = [[("h", _version(i, 0, 5))] for i in range(n)] if flags & 8 else None
    step = 1 + 2 * (int.from_bytes(spec[3:5] or b"\1\0", "little") % (n // 2 or 1))
    state = {"k": 0, "v": 0}

    def apply() -> None:
        k = state["k"] = (state["k"] + step) % n
        if k < step:
            state["v"] += 1
            values[:] = [_version(i, state["v"], width) for i in range(n)]
        v = state["v"]
        values[k] = _version(k, v, width)  # a new object: the one it replaces is freed
        if headers is not None:
            headers[k] = [("h", _version(k, v, 5))]

    toggler = Toggler(apply, lambda: None)
    toggler.start()
    try:
        for _ in range(ROUNDS if not large else 1):
            out = kbatch.encode(values, headers=headers, compression=compression)
            table = kbatch.decode(out)
            got = table.values()
            check(len(got) == n, "records lost")
            step = 1 if n < 5000 else 37
            bad = next((i for i, value in zip(range(0, n, step), got[::step], strict=True)
                        if value is None or len(value) != width + len(b"%d" % i)
                        or not value.endswith(b"%d" % i) or value[:width] != value[:1] * width), None)
            check(bad is None, f"record {bad}'s value is no version of its item: {got[bad or 0]!r}")
            if headers is not None:
                for i in range(0, n, 97):
                    ((key, hv),) = table.headers(i)
                    check(key == "h" and hv is not None and hv.endswith(b"%d" % i), f"record {i}'s header garbled")
    finally:
        toggler.join()


def run_arrow(flags: int, spec: bytes) -> None:
    import pyarrow as pa

    kbatch.set_threads(2)
    table = kbatch.decode(BASES["v2"])
    rec, hdr = table.records, table.headers.view(np.ndarray)
    fields = [("key_start", rec), ("key_length", rec), ("value_start", rec), ("value_length", rec),
              ("headers_start", rec), ("headers_count", rec), ("key_length", hdr), ("value_start", hdr)]
    edits = []
    for i in range(0, len(spec) - 5, 6):
        name, rows = fields[spec[i + 2] % len(fields)]
        k = int.from_bytes(spec[i:i + 2], "little") % len(rows)
        edits.append((rows, name, k, int(rows[name][k]), int.from_bytes(spec[i + 3:i + 6], "little", signed=True)))

    def apply() -> None:
        for rows, name, k, _, new in edits:
            rows[name][k] = new

    def undo() -> None:
        for rows, name, k, old, _ in edits:
            rows[name][k] = old

    toggler = Toggler(apply, undo)
    toggler.start()
    try:
        for r in range(ROUNDS):
            binary = ("binary", "large_binary", "binary_view")[(flags + r) % 3]
            try:
                out = table.to_arrow(binary=binary)
            except ValueError:
                continue
            try:
                out.validate(full=True)
            except pa.ArrowInvalid as e:
                raise Finding(f"to_arrow returned an invalid table: {e}") from e
    finally:
        toggler.join()


def TestOneInput(data: bytes) -> None:
    if len(data) < 2:
        return
    mode, flags, spec = data[0] % 6, data[1], data[2:]
    if mode == 0:
        run_decode("v2", flags, spec)
    elif mode == 1:
        run_decode("split", flags, spec)
    elif mode == 2:
        run_decode(CODECS[(flags >> 2) % 4], flags, spec)
    elif mode == 3:
        run_decode("v1gzip" if flags & 4 else "v0", flags, spec)
    elif mode == 4:
        run_encode(flags, spec)
    else:
        run_arrow(flags, spec)


def _loop(seconds: float, seed: int) -> None:
    """The plain randomized loop: random inputs in the same layout until time is up."""
    rng = random.Random(seed)
    end = time.monotonic() + seconds
    runs = 0
    per_mode = [0] * 6
    while time.monotonic() < end:
        mode = rng.randrange(6)
        flags = rng.randrange(256)
        if mode == 4 and (flags & 0x90) == 0x90 and rng.random() < 0.8:
            flags &= ~16  # the large encode is slow: one in twenty
        spec = bytes([mode, flags]) + rng.randbytes(6 * rng.randrange(1, 9))
        TestOneInput(spec)
        runs += 1
        per_mode[mode] += 1
    print(f"fuzz_mutation: {runs} runs in {seconds:.0f} s (seed {seed}); by mode {per_mode}; nothing found")
    print(f"stat::number_of_executed_units: {runs}")


def _seed(corpus: str) -> None:
    """Give an empty corpus directory a few inputs of every mode (libFuzzer starts from 1 byte)."""
    import os

    if not os.path.isdir(corpus) or os.listdir(corpus):
        return
    rng = random.Random(15)
    for mode in range(6):
        for flags in (0, 1, 2, 3, 4, 8, 12, 20, 36, 68, 148):
            edits = b"".join(rng.randrange(4).to_bytes(2, "little") + bytes([field]) + rng.randbytes(3)
                             for field in (rng.randrange(6), rng.randrange(6)))
            with open(os.path.join(corpus, f"seed-{mode}-{flags}"), "wb") as f:
                f.write(bytes([mode, flags]) + edits)


def main() -> None:
    if "--seconds" in sys.argv:
        i = sys.argv.index("--seconds")
        seed = int(sys.argv[sys.argv.index("--seed") + 1]) if "--seed" in sys.argv else int(time.time())
        _loop(float(sys.argv[i + 1]), seed)
        return
    if atheris is None:
        sys.exit("fuzz_mutation.py: atheris is not installed (or use --seconds N for the plain loop)")
    sys.setswitchinterval(1e-5)  # hand the GIL over as often as possible
    corpora = [a for a in sys.argv[1:] if not a.startswith("-")]
    if corpora:
        _seed(corpora[0])
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    if "--seconds" in sys.argv:
        sys.setswitchinterval(1e-5)
    main()
