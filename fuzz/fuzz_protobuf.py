"""Fuzz Protobuf values: random ``.proto`` files, random messages built with upb, re-encoded
non-canonically, decoded by ``kbatch.values.decode`` and compared to upb's parse of the same bytes.

Each schema is made from a 16-bit seed (``schema``): a random proto3 file
(``tests/support/proto_gen.random_proto_rng``: scalars of every kind, an enum, repeated, map and
message fields over up to three messages), compiled once by grpc_tools' protoc into upb message
classes (``message_classes``) and by kbatch (its own cache); the last 16 are kept, so an input
costs its messages, not a compilation.

Input layout::

    schema  uint16 LE   the schema's seed
    flags   uint8       the re-encodings (``rewrite``) applied to every message:
                        bit 0 over-long varints (zero continuation bytes), bit 1 garbage in the
                        high 32 bits of 32-bit varint fields, bit 2 packed repeated fields
                        unpacked or split (packed and unpacked mixed), bit 3 fields out of
                        order, bit 4 unknown fields, bit 5 singular fields repeated (the last
                        one wins; a message field merges); bits 6-7: number of messages - 1
    seed    uint32 LE   the messages' seed (``proto_gen.random_message``)
    proj    uint16 LE   the projection's seed: ``fields`` for a second, projected decode, one to
                        four of the root message's top-level fields (``projection.draw_fields``)
    edits   3 bytes each, applied to copies of the re-encoded bodies (``fixtures.edit_copies``)

Every body is framed with schema id 1 and the root message's index. Oracle: the column
validates, one row per body, each error row names ``value``; a body upb parses decodes to upb's
message (``proto_gen.upb_row``: Spark's defaults, unsigned as signed bits, enums by name, maps
as sorted pairs), whether re-encoded or edited; a re-encoded body (which upb always parses) is
never an error row; a body upb refuses is an error row. Where upb is not the reference: a map
entry holding an unknown field (upb moves the whole entry to the message's unknown fields;
protobuf-java and kbatch read it), so no re-encoding puts one there and an edited body's row may
hold map entries upb's lacks, at any depth; and a map entry an edit left without its message
value (upb: the type's empty default instance; kbatch: null, as any absent singular message)
(``_edited_alike``). No crash, no sanitizer report.

The bodies decode again with ``fields=`` (``check_projection``): its column validates; a body the
whole decode reads, the projection reads, to the whole row cut to ``fields`` (compared as Arrow);
a body the whole decode refuses may be an error (naming ``value``) or a value (the fault may lie
in a field left out, whose contents are not decoded: a skipped string's UTF-8, a skipped
message's own bytes). Such a value must equal upb's parse of the body's kept top-level fields
alone (``kept_fields``: the same bytes with the others cut out; upb gets no chance to refuse
what kbatch skips), and upb refusing those is a finding; a body whose top level ends inside a
field must be an error. (Not checked: a body with a top-level group, tag 0, a wire type 6 or 7
or a tag over 32 bits, which ``kept_fields`` does not walk.)

Run ``python fuzz/fuzz_protobuf.py CORPUS_DIR [libFuzzer flags]``, or ``bash fuzz/run.sh``.
"""

from __future__ import annotations

import functools
import random
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["kbatch"]):
    from kbatch import values

import fixtures
import oracle
import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.avro_values import framed
from support.projection import draw_fields, same, select
from support.proto_gen import kbatch_row, message_classes, random_message, random_proto_rng, upb_row, varint

CACHED_SCHEMAS = 16
_VARINT = {"int32", "int64", "uint32", "uint64", "sint32", "sint64", "bool", "E"}
_FIXED32 = {"fixed32", "sfixed32", "float"}
_FIXED64 = {"fixed64", "sfixed64", "double"}
_SMALL = {"int32", "uint32", "sint32", "E"}  # 32-bit varints: parsers drop bits 32-63
_TMP = tempfile.TemporaryDirectory(prefix="kbatch-fuzz-proto-")


@dataclass(frozen=True)
class Proto:
    spec: list[list[tuple[str, str, str]]]
    root: int
    classes: dict[str, Any]  # upb message classes by short name
    registry: Any
    options: Any
    indexes: bytes  # Confluent's message indexes of the root


@functools.lru_cache(maxsize=CACHED_SCHEMAS)
def schema(seed: int) -> Proto:
    """The proto file of ``seed``, its upb classes and a registry holding it."""
    text, spec = random_proto_rng(random.Random(seed), "fz")
    tmp = Path(_TMP.name) / f"s{seed}"
    tmp.mkdir(exist_ok=True)
    classes = message_classes(tmp, text)
    root = len(spec) - 1
    return Proto(spec, root, classes, values.Registry({1: values.Schema(text, "PROTOBUF", id=1)}),
                 values.ProtoOptions(message=f"fz.M{root}"), bytes([2, 2 * root]) if root else b"\x00")


# ---------------------------------------------------------------- the wire, re-encoded

def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        b = data[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v & (2**64 - 1), pos


def _fields(data: bytes) -> Iterator[tuple[int, int, Any, int, int]]:
    """Each field of a message: number, wire type, payload (an int, or the bytes), its tag's
    length and value. IndexError when the bytes end inside a field, ValueError at a group's
    or an unknown wire type."""
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = _read_varint(data, pos)
        tag_length = pos - start
        number, wire = key >> 3, key & 7
        if wire == 0:
            v, pos = _read_varint(data, pos)
        elif wire == 2:
            n, pos = _read_varint(data, pos)
            v, pos = data[pos:pos + n], pos + n
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            v, pos = data[pos:pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, v, tag_length, key


def _entries(data: bytes) -> list[tuple[int, int, Any]]:
    """A canonical message's (field number, wire type, payload)."""
    return [(number, wire, v) for number, wire, v, _, _ in _fields(data)]


def _split_packed(t: str, payload: bytes) -> list[Any]:
    if t in _VARINT:
        items, pos = [], 0
        while pos < len(payload):
            v, pos = _read_varint(payload, pos)
            items.append(v)
        return items
    size = 4 if t in _FIXED32 else 8
    return [payload[k:k + size] for k in range(0, len(payload), size)]


def rewrite(data: bytes, fields: list[tuple[str, str, str]], spec: list[Any], flags: int, rng: random.Random) -> bytes:
    """A message's bytes encoded another way upb reads (see the module's ``flags``), recursively
    into message fields and map entries."""
    out: list[tuple[int, int, Any]] = []
    for number, wire, v in _entries(data):
        if not 1 <= number <= len(fields):
            out.append((number, wire, v))
            continue
        _, label, t = fields[number - 1]
        if label == "map" and wire == 2:
            key, value = t.split(",")
            # no unknown field in a map entry: upb then keeps the whole entry as an unknown field of
            # the message (the map loses it), where protobuf-java and kbatch read the entry
            v = rewrite(v, [("key", "", key), ("value", "", value)], spec, flags & ~16, rng)
        elif t.startswith("M") and wire == 2:
            v = rewrite(v, spec[int(t[1:])], spec, flags, rng)
        elif label == "repeated" and wire == 2 and t not in ("string", "bytes") and flags & 4:
            items = _split_packed(t, v)
            cut = rng.randint(0, len(items))
            wire_of = 0 if t in _VARINT else 5 if t in _FIXED32 else 1
            for item in items[:cut]:  # these unpacked, the rest packed
                out.append((number, wire_of, item))
            rest = items[cut:]
            v = b"".join(varint(x, rng.randint(0, 3) if flags & 1 else 0) if wire_of == 0 else x for x in rest)
            if not rest:
                continue
        elif wire == 0 and flags & 2 and t in _SMALL:
            v |= rng.getrandbits(32) << 32
        out.append((number, wire, v))
        if flags & 32 and label == "" and rng.random() < 0.5:  # the same field again before it
            if t.startswith("M"):
                out.insert(len(out) - 1, (number, wire, v))  # a message field twice: merged
            elif wire == 0:
                out.insert(len(out) - 1, (number, 0, rng.getrandbits(rng.choice([1, 7, 32, 64]))))
    if flags & 8:
        rng.shuffle(out)
    if flags & 16:
        for _ in range(rng.randint(1, 3)):
            wire = rng.choice([0, 1, 2, 5])
            v = rng.getrandbits(64) if wire == 0 else rng.randbytes({1: 8, 2: rng.randint(0, 5), 5: 4}[wire])
            out.insert(rng.randint(0, len(out)), (len(fields) + rng.randint(1, 40), wire, v))
    extra = 3 if flags & 1 else 0
    body = bytearray()
    for number, wire, v in out:
        body += varint(number << 3 | wire)
        if wire == 0:
            body += varint(v, rng.randint(0, extra))
        elif wire == 2:
            body += varint(len(v), rng.randint(0, extra)) + v
        else:
            body += v
    return bytes(body)


# ---------------------------------------------------------------- the harness

def upb_reading(p: Proto, body: bytes) -> Any:
    """upb's parse of ``body`` as kbatch's row of it; None when upb refuses it."""
    try:
        msg = p.classes[f"M{p.root}"].FromString(body)
    except Exception:  # noqa: BLE001 (DecodeError, and whatever else upb refuses with)
        return None
    return upb_row(msg, p.spec, p.root)


#: ``kept_fields`` met what it does not walk (a group, a tag it doubts): no reference
_UNWALKED = b"unwalked"


def kept_fields(body: bytes, numbers: set[int]) -> bytes | None:
    """The top-level fields of ``body`` whose numbers are in ``numbers``, their bytes as they are,
    in their order; None when the bytes end inside a field; ``_UNWALKED`` at a group, a wire type
    6 or 7, a tag 0 or one over 32 bits (what kbatch may refuse or skip its own way)."""
    out = bytearray()
    pos = 0
    try:
        while pos < len(body):
            start = pos
            key, pos = _read_varint(body, pos)
            number, wire = key >> 3, key & 7
            if number == 0 or key >= 1 << 32 or wire not in (0, 1, 2, 5):
                return _UNWALKED
            if wire == 0:
                _, pos = _read_varint(body, pos)
            elif wire == 2:
                n, pos = _read_varint(body, pos)
                pos += n
            else:
                pos += 8 if wire == 1 else 4
            if pos > len(body):
                return None
            if number in numbers:
                out += body[start:pos]
    except IndexError:
        return None
    return bytes(out)


def check_projection(p: Proto, fields: list[str], table: pa.Table, bodies: list[bytes], whole: pa.Table) -> None:
    """The projected decode of ``table`` against the whole one (``whole``) and upb (see the
    module)."""
    out = values.decode(table, p.registry, errors="null", protobuf=p.options, fields=fields)
    oracle.check(out.num_rows == len(bodies), "projected: one row per value")
    column = out.column("value").combine_chunks()
    column.validate(full=True)
    errors = out.column("value_error").to_pylist()
    whole_errors = whole.column("value_error").to_pylist()
    for i, (w, e) in enumerate(zip(whole_errors, errors, strict=True)):
        oracle.check(e is None or " - at value" in e, f"projected ({fields}): an error without its place: {e!r}")
        oracle.check(w is not None or e is None,
                     f"projected ({fields}): body {i} ({bodies[i].hex()}) decodes whole but not projected: {e}")
    whole_cut = select(whole.column("value"), fields)
    oracle.check(column.type == whole_cut.type,
                 f"projected ({fields}): type {column.type} != the whole's cut {whole_cut.type}")
    ok = pa.array([e is None for e in whole_errors])
    oracle.check(same(column.filter(ok), whole_cut.filter(ok)),
                 f"projected ({fields}): rows differ from the whole decode's cut to the fields")
    numbers = {k for k, (name, _, _) in enumerate(p.spec[p.root], 1) if name in fields}
    spec = [*p.spec[:p.root], [f for f in p.spec[p.root] if f[0] in fields], *p.spec[p.root + 1:]]
    rows = None
    for i, (w, e) in enumerate(zip(whole_errors, errors, strict=True)):
        if w is None or e is not None:
            continue
        kept = kept_fields(bodies[i], numbers)
        oracle.check(kept is not None, f"projected ({fields}): body {i} ({bodies[i].hex()}): its top level "
                                       f"cannot be walked, yet decoded")
        assert kept is not None
        if kept is _UNWALKED:
            continue
        try:
            msg = p.classes[f"M{p.root}"].FromString(kept)
        except Exception:  # noqa: BLE001 - upb refuses the kept fields: kbatch then must too
            raise oracle.Finding(f"projected ({fields}): body {i} ({bodies[i].hex()}): upb refuses its kept "
                                 f"fields ({kept.hex()}), kbatch decoded them") from None
        rows = rows if rows is not None else column.to_pylist()
        expect = {k: v for k, v in upb_row(msg, p.spec, p.root).items() if k in fields}
        got = kbatch_row(rows[i], spec, p.root)
        oracle.check(oracle.same(got, expect) or _edited_alike(got, expect),
                     f"projected ({fields}): body {i} ({bodies[i].hex()}): kbatch {got!r} != upb {expect!r} "
                     f"(kept fields {kept.hex()}; whole decode: {w})")


def TestOneInput(raw: bytes) -> None:
    if len(raw) < 9:
        return
    p = schema(int.from_bytes(raw[:2], "little"))
    flags = raw[2]
    rng = random.Random(int.from_bytes(raw[3:7], "little"))
    messages = [random_message(rng, p.spec, p.classes, p.root) for _ in range(1 + (flags >> 6))]
    rewritten = [rewrite(m.SerializeToString(), p.spec[p.root], p.spec, flags, rng) for m in messages]
    bodies = rewritten + fixtures.edit_copies(rewritten, raw[9:])
    table = pa.table({"value": pa.array([framed(1, p.indexes + b) for b in bodies], pa.binary())})
    out = values.decode(table, p.registry, errors="null", protobuf=p.options)
    oracle.check(out.num_rows == len(bodies), "one row per value")
    column = out.column("value").combine_chunks()
    column.validate(full=True)
    errors = out.column("value_error").to_pylist()
    rows = column.to_pylist()
    for i, (body, error, row) in enumerate(zip(bodies, errors, rows, strict=True)):
        oracle.check(error is None or " - at value" in error, f"an error without its place: {error!r}")
        expect = upb_reading(p, body)
        kind = "re-encoded" if i < len(rewritten) else "edited"
        if expect is None:
            oracle.check(error is not None, f"{kind} body {i} ({body.hex()}): upb refuses it, kbatch read {row!r}")
            continue
        oracle.check(error is None, f"{kind} body {i} ({body.hex()}): upb reads {expect!r}, kbatch: {error}")
        got = kbatch_row(row, p.spec, p.root)
        oracle.check(oracle.same(got, expect) or (kind == "edited" and _edited_alike(got, expect)),
                     f"{kind} body {i} ({body.hex()}): kbatch {got!r} != upb {expect!r}")
    names = [name for name, _, _ in p.spec[p.root]]
    if names:
        check_projection(p, draw_fields(random.Random(int.from_bytes(raw[7:9], "little")), names), table, bodies,
                         out)


def _empty(x: Any) -> bool:
    """Whether ``x`` is a message with no field set (upb's default instance, as a dict)."""
    return isinstance(x, dict) and all(v is None or v == [] or _empty(v) for v in x.values())


def _edited_alike(got: Any, expect: Any) -> bool:
    """Whether kbatch's row ``got`` of an edited body is upb's ``expect`` but where upb is not the
    reference, at any depth (maps inside map values included):

    - map entries upb left out: upb keeps a map entry holding an unknown field (an edit may make
      one) as an unknown field of the message, where protobuf-java and kbatch read its key and
      value (``expect``'s entries are then a subsequence of ``got``'s);
    - a map entry an edit left without its message value: upb gives the type's default instance,
      an empty message; kbatch reads an absent message as null, over its whole subtree, as any
      absent singular message field (the kernel's ``_absent``).
    """
    if isinstance(got, dict) and isinstance(expect, dict):
        return got.keys() == expect.keys() and all(_edited_alike(got[k], expect[k]) for k in got)
    if isinstance(got, tuple) and isinstance(expect, tuple) and len(got) == len(expect) == 2:  # a map entry
        return oracle.same(got[0], expect[0]) and ((got[1] is None and _empty(expect[1]))
                                                    or _edited_alike(got[1], expect[1]))
    if isinstance(got, list) and isinstance(expect, list) and got and isinstance(got[0], tuple):  # a map
        rest = iter(got)
        return all(any(_edited_alike(g, e) for g in rest) for e in expect)
    if isinstance(got, list) and isinstance(expect, list):
        return len(got) == len(expect) and all(_edited_alike(g, e) for g, e in zip(got, expect, strict=True))
    return oracle.same(got, expect)


if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
