"""Write the seed corpora of the harnesses: ``python fuzz/make_seeds.py [OUT_DIR]``.

Seeds are generated, not committed: ``OUT_DIR/<harness>/`` (``decode``, ``stamps``, ``logdir``,
``protocol``, ``internal``, ``sidefiles``, ``values``, ``avro_evolution``, ``protobuf``,
``schemas_replay``) gets valid inputs in that
harness's input layout (see each ``fuzz_*.py``):

* decode: every codec with magic 2, every codec but zstd with magic 0 and 1, control batches,
  transactions with ABORT and COMMIT markers, LogAppendTime, empty keys and values; each
  with CRC checks on and off, a small ``max_decompressed_size`` and read_committed;
* stamps: the decode buffers, with CRC checks on and off and a small ``max_decompressed_size``;
* logdir: each file of the fixture partition directory (every ``.log``, ``.index``,
  ``.timeindex``, ``.txnindex``) as it is, under each ``kbatch dump`` mode;
* protocol: a sample of every shipped message at every valid version (every field set,
  arrays of two), and a whole request with its header for every request API and version;
* internal: every internal record type of every family at every version (every field set),
  and records that make sense together, for each function that reads that family, plainly
  and with one of history, ``on_unknown="raw"``, one batch per record, an offset;
* sidefiles: each side file of the fixture root as it is;
* avro_evolution: 32 schema pairs (every shape: plain, optional collections of records,
  recursive; both mappings), their values valid and edited;
* protobuf: 24 schemas, their messages under each re-encoding alone and all at once, some edited;
* schemas_replay: 16 byte strings of 32-256 bytes (the harness reads records out of any bytes).

The default OUT_DIR is ``$TMPDIR/kbatch-fuzz/seeds`` (outside the repository).
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

from kbatch import protocol

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fixtures

__all__ = ["main", "write_seeds"]

# (flags, limit) pairs of fuzz_decode's header: CRC off, CRC on, small limit, read_committed x2
DECODE_FLAGS = ((0, 0), (1, 0), (2, 4), (4 | 1, 0), (8 | 16, 0))


def _put(out: Path, name: str, data: bytes) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}-{hashlib.sha1(data).hexdigest()[:8]}").write_bytes(data)


def write_seeds(root: Path) -> dict[str, int]:
    """Write every harness's seeds under ``root``; return the number written per harness."""
    counts: dict[str, int] = {}
    n = 0
    for name, data in fixtures.record_buffers().items():
        for flags, limit in DECODE_FLAGS:
            _put(root / "decode", f"{name}-f{flags}", bytes([flags, limit]) + data)
            n += 1
    counts["decode"] = n
    n = 0
    for name, data in fixtures.record_buffers().items():  # fuzz_stamps: flags bits 0 and 1 of decode's
        for flags, limit in DECODE_FLAGS[:3]:
            _put(root / "stamps", f"{name}-f{flags}", bytes([flags, limit]) + data)
            n += 1
    counts["stamps"] = n

    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        part = fixtures.partition_dir(tmp)
        stems = sorted({p.stem for p in part.iterdir() if p.suffix == ".log"})
        suffixes = (".log", ".index", ".timeindex", ".txnindex")
        for s, stem in enumerate(stems):
            for k, suffix in enumerate(suffixes):
                path = part / (stem + suffix)
                body = path.read_bytes() if path.exists() else b""
                for mode in range(4):
                    select = k | s << 2 | mode << 4
                    _put(root / "logdir", f"{stem}{suffix}-m{mode}", bytes([select, 5 + 7 * s, 15 + mode]) + body)
                    n += 1
    counts["logdir"] = n

    n = 0
    schema = protocol.default_schema()
    names = sorted(m.name for m in schema)
    for i, name in enumerate(names):
        msg = schema[name]
        for j, version in enumerate(msg.versions):
            body = msg.encode(fixtures.sample_message(msg, version), version)
            _put(root / "protocol", f"{name}-v{version}", bytes([i, j]) + body)
            n += 1
            if msg.type == "request":
                request = protocol.encode_request(schema, msg.api_key, version, fixtures.sample_message(msg, version),
                                                  correlation_id=j, client_id="fz", framed=False)
                _put(root / "protocol", f"{name}-v{version}-framed", bytes([0x80, 0]) + request)
                n += 1
    counts["protocol"] = n

    n = 0
    targets = {"group": (0, 1), "transaction": (2,), "metadata": (3,)}
    for i, (name, (family, pairs)) in enumerate(fixtures.internal_records().items()):
        body = fixtures.record_list(pairs)
        family_bits = fixtures.FAMILY_ORDER.index(family) << 4
        for target in (*targets.get(family, ()), 4):
            for flags in (0, (1, 2, 4, 8)[i % 4]):  # plain, and one option in turn
                _put(root / "internal", f"{name}-t{target}-f{flags}", bytes([target, flags | family_bits]) + body)
                n += 1
    counts["internal"] = n

    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(fixtures.side_files(fixtures.side_root(tmp))):
            _put(root / "sidefiles", path.name, bytes([i]) + path.read_bytes())
            n += 1
    counts["sidefiles"] = n

    # fuzz_values: (which, bodies split at 0xF1): valid values of each fixed pair, random schemas
    order = b"\x02\x02\x00\x00\x00\x00" + b"\x11" * 16 + b"\x00"
    bodies = {0: order, 1: order, 2: b"\x06abc", 3: b"\x02\x0a", 4: b"\x02\x02a\x02\x00\x00\x80\x3f\x00\x00"}
    n = 0
    for which, body in bodies.items():
        _put(root / "values", f"pair{which}", bytes([which]) + body + b"\xf1" + body)
        n += 1
    for seed in range(8):
        _put(root / "values", f"random{seed}", bytes([0x80]) + seed.to_bytes(4, "little") + bytes(range(seed, 40)))
        n += 1
    json_bodies = {0xF0: b'{"id": 1, "s": "x", "f": 2.5, "at": "2026-01-01T00:00:00Z", "day": "2026-01-01", '
                         b'"xs": [{"b": true, "n": 3}]}',
                   0xF1: b'{"m": {"a": 1, "b": null}, "k": "v"}'}
    for which, body in json_bodies.items():  # JSON values of each fixed JSON Schema
        _put(root / "values", f"json{which:x}", bytes([which]) + body + b"\xf1" + body.replace(b" ", b"\n"))
        n += 1
    counts["values"] = n

    n = 0  # fuzz_avro_evolution: (pair seed, flags, value seed, projection, edits): every pair shape, valid
    for seed in range(32):  # and edited, projected walking the tail and not
        edits = b"" if seed % 2 == 0 else bytes([seed, 3 * seed, 0xFF, 0x80 | seed, seed, 0x7F])
        proj = (seed * 31) | (0x8000 if seed % 4 >= 2 else 0)
        _put(root / "avro_evolution", f"pair{seed}", seed.to_bytes(2, "little") + bytes([seed % 8])
             + (seed * 7919).to_bytes(4, "little") + proj.to_bytes(2, "little") + edits)
        n += 1
    counts["avro_evolution"] = n

    n = 0  # fuzz_protobuf: (schema seed, flags, message seed, projection, edits): each re-encoding alone,
    # then all at once
    for seed in range(24):
        flags = (1 << (seed % 6)) if seed < 18 else 0x3F | (seed % 4) << 6
        edits = b"" if seed % 3 else bytes([seed, 5 * seed, 0x01])
        _put(root / "protobuf", f"schema{seed}", seed.to_bytes(2, "little") + bytes([flags])
             + (seed * 104729).to_bytes(4, "little") + (seed * 37).to_bytes(2, "little") + edits)
        n += 1
    counts["protobuf"] = n

    n = 0  # fuzz_schemas_replay: FuzzedDataProvider bytes (any bytes are records)
    for seed in range(16):
        _put(root / "schemas_replay", f"records{seed}",
             b"".join(hashlib.sha256(bytes([seed, k])).digest() for k in range(1 + seed % 8)))
        n += 1
    counts["schemas_replay"] = n
    return counts


def main(argv: list[str]) -> int:
    root = Path(argv[0]) if argv else Path(tempfile.gettempdir()) / "kbatch-fuzz" / "seeds"
    counts = write_seeds(root)
    print(f"make_seeds: {root}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

