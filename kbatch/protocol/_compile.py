"""Compile a message definition, for one version, into Python source.

Each (message, version) becomes one ``_decode(data, buf, pos, end)`` and one
``_encode(m, parts)`` function, generated as straight-line Python (structs and
arrays inlined, adjacent fixed-size fields read with one precompiled
``struct.Struct``), ``exec``'d once and cached by :class:`~kbatch.protocol.Message`.
``Message.source(version)`` shows the code.

Decoding checks every length against ``end`` before reading, so nothing is
read out of bounds and an array count larger than the bytes left is an error
before anything is allocated. Errors are raised at the failing site with the
field's path built from the loop indices in scope, so the fast path pays
nothing for them. Arrays of flat structs go to the C kernels
(``_kernel.pyx``) first, when decoding and when encoding (unless
``KBATCH_PROTOCOL_PURE`` is set); they hand anything unusual back to the
generated Python, which then decodes or encodes (or rejects) the same input.

Wire grammar (Kafka protocol guide)::

    INT8/16/32/64, UINT16/32, FLOAT64   big-endian, fixed size
    BOOLEAN                             one byte, 0 = false
    UUID                                16 bytes
    STRING          int16 length N (-1 = null), N bytes of UTF-8
    COMPACT_STRING  unsigned varint N+1 (0 = null), N bytes
    BYTES / RECORDS int32 length N (-1 = null), N bytes
    COMPACT_BYTES   unsigned varint N+1 (0 = null), N bytes
    ARRAY           int32 count N (-1 = null), N elements
    COMPACT_ARRAY   unsigned varint N+1 (0 = null), N elements
    nullable STRUCT int8 -1 = null, 1 = present, then the struct
    TAGGED_FIELDS   unsigned varint count, then per field (ascending tags):
                    unsigned varint tag, unsigned varint size, size bytes
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Callable
from typing import Any

from kbatch._wire import uvarint_tail as _wire_uvarint_tail

from ._errors import ProtocolError
from ._kernel import decode_struct_array, encode_struct_array
from ._keyed import KeyedList, keyed
from ._records import records_slice
from ._schema import FIXED_FORMATS, INT_RANGES, ZERO_UUID, FieldSpec

__all__ = [
    "ENCODE_KERNEL",
    "KERNEL",
    "compile_decoder",
    "compile_encoder",
    "find_encode_error",
    "literal_default",
    "uvarint_tail",
]

KERNEL: Callable[..., tuple[list[dict[str, Any]], int] | None] | None
ENCODE_KERNEL: Callable[..., bytearray | None] | None
# the C kernels for arrays of flat structs (kbatch/protocol/_kernel.pyx); the
# generated Python gives the same results (and raises the errors) without them
KERNEL, ENCODE_KERNEL = decode_struct_array, encode_struct_array
if os.environ.get("KBATCH_PROTOCOL_PURE", "") not in ("", "0"):  # test the pure-Python path
    KERNEL = ENCODE_KERNEL = None

# Arrays shorter than this are decoded (encoded) in Python even with the
# kernel (its call overhead is larger than the work).
KERNEL_MIN_COUNT = 4
ENCODE_KERNEL_MIN_COUNT = 2

_KERNEL_KINDS = {"bool": 0, "int8": 1, "int16": 2, "uint16": 3, "int32": 4, "uint32": 5, "int64": 6, "float64": 7}

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_ARRAY_STRUCTS: dict[tuple[str, int], struct.Struct] = {}


def _array_struct(fmt: str, n: int) -> struct.Struct:
    key = (fmt, n)
    s = _ARRAY_STRUCTS.get(key)
    if s is None:
        s = struct.Struct(f">{n}{fmt}")
        if len(_ARRAY_STRUCTS) < 4096:
            _ARRAY_STRUCTS[key] = s
    return s


def uvarint_tail(data: memoryview, pos: int, first: int, end: int) -> tuple[int, int]:
    """Finish an unsigned varint whose first byte (> 127) was read from ``data``.

    Returns ``(value, pos)``, or ``(-1, pos)`` when the varint is truncated or
    longer than 32 bits.

    >>> uvarint_tail(memoryview(b"\\xac\\x02"), 1, 0xAC, 2)
    (300, 2)
    """
    value, pos = _wire_uvarint_tail(data, pos, first, end)
    return (value, pos) if value <= 0xFFFFFFFF else (-1, pos)


def _write_uvarint(b: bytearray, value: int) -> None:
    while value > 0x7F:
        b.append((value & 0x7F) | 0x80)
        value >>= 7
    b.append(value)


def _write_tags(b: bytearray, known: list[tuple[int, bytes]], unknown: Any, path: str) -> None:
    """Write a tagged-field section: known fields plus unknown ones, ascending."""
    items = list(known)
    if unknown:
        if not isinstance(unknown, dict):
            raise ProtocolError(f"Expected dict of tag -> bytes, got {type(unknown).__name__}", -1,
                                path + "._unknown_tags")
        have = {t for t, _ in known}
        for tag, raw in unknown.items():
            if not isinstance(tag, int) or tag < 0 or tag > 0xFFFFFFFF:
                raise ProtocolError(f"Invalid tag {tag!r}", -1, path + "._unknown_tags")
            if tag in have:
                raise ProtocolError(f"Unknown tag {tag} collides with a known tagged field", -1,
                                    path + "._unknown_tags")
            items.append((tag, bytes(raw)))
    items.sort(key=lambda item: item[0])
    _write_uvarint(b, len(items))
    for tag, raw in items:
        _write_uvarint(b, tag)
        _write_uvarint(b, len(raw))
        b += raw


def _run_error(layout: tuple[tuple[str, int], ...], pos: int, end: int, path: str) -> ProtocolError:
    """The error for a run of fixed-size fields cut short: name the field that is cut."""
    for key, size in layout:
        if pos + size > end:
            return ProtocolError(f"Expected {size} bytes, {max(end - pos, 0)} left", pos, f"{path}.{key}")
        pos += size
    return ProtocolError("Truncated", pos, path)  # pragma: no cover


def _nbytes(v: Any) -> int:
    return memoryview(v).nbytes


def _as_view(v: Any) -> memoryview:
    view = memoryview(v)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def _is_default(value: Any, default: Any) -> bool:
    if isinstance(default, dict):
        if value is None:
            return True
        if not isinstance(value, dict):
            return False
        return all(_is_default(value.get(k, d), d) for k, d in default.items())
    if default is None:
        return value is None
    if isinstance(default, uuid.UUID):
        return value is None or value == default
    if isinstance(default, list):
        return value is not None and len(value) == 0
    if isinstance(default, bytes):
        return value is not None and len(value) == 0
    return bool(value == default)


_BASE_GLOBALS: dict[str, Any] = {
    "_E": ProtocolError,
    "_uvt": _wire_uvarint_tail,  # the range check is in the generated code
    "_arr": _array_struct,
    "_wuv": _write_uvarint,
    "_wtags": _write_tags,
    "_nbytes": _nbytes,
    "_run_error": _run_error,
    "_view": _as_view,
    "_isdef": _is_default,
    "_UUID": uuid.UUID,
    "_oset": object.__setattr__,
    "_SAFE_UNKNOWN": uuid.SafeUUID.unknown,
    "_Z": ZERO_UUID,
    "_from_bytes": int.from_bytes,
    "_rslice": records_slice,
    "_new": object.__new__,
    "_I16": _I16,
    "_I32": _I32,
    "UnicodeDecodeError": UnicodeDecodeError,
}

# Arrays of fixed-size elements shorter than this use a precompiled Struct.
SMALL_ARRAYS = 64

# Payloads at least this big are not copied into the output when encoding
# with encode_parts(); they are handed to the caller as their own buffer.
ZERO_COPY_THRESHOLD = 2048


def literal_default(f: FieldSpec, version: int, gen: _Gen) -> str:
    """Python source that builds a fresh default value for ``f``."""
    return gen.literal(f.default(version))


def _is_fixed(f: FieldSpec) -> bool:
    return not f.array and f.kind in FIXED_FORMATS


def _kernel_op(f: FieldSpec, g: _Gen, nested: Callable[[FieldSpec], Any], subs: list[Any]) -> int | None:
    """The C kernels' op byte for an untagged field, or None if they cannot handle it.

    An array of structs gets op 19 and its program (``nested(f)``) appended
    to ``subs`` when it has one, else op 17 (accepted only when empty).
    """
    v = g.version
    flags = (0x20 if g.compact(f) else 0) | (0x40 if v in f.nullable else 0)
    if not f.array:
        if f.kind in _KERNEL_KINDS:
            return _KERNEL_KINDS[f.kind]
        return {"uuid": 18, "string": 8 | flags, "records": 15 | flags, "bytes": 16 | flags}.get(f.kind)
    if f.kind in _KERNEL_KINDS and f.kind not in ("bool", "float64"):
        return (8 + _KERNEL_KINDS[f.kind]) | flags
    if f.kind == "struct":
        program = nested(f)
        if program is None:
            return 17 | flags
        subs.append(program)
        return 19 | flags
    return None


class _Gen:
    def __init__(self, version: int, flexible: bool, kernel: Any = None) -> None:
        self.version = version
        self.flexible = flexible
        self.kernel = kernel
        self.lines: list[str] = []
        self.globs: dict[str, Any] = dict(_BASE_GLOBALS)
        self.counter = 0
        self.consts: dict[int, str] = {}
        self.extra: list[list[str]] = []

    def var(self, prefix: str) -> str:
        self.counter += 1
        return f"_{prefix}{self.counter}"

    def const(self, obj: Any, prefix: str = "k") -> str:
        key = id(obj)
        name = self.consts.get(key)
        if name is None:
            name = self.var(prefix)
            self.globs[name] = obj
            self.consts[key] = name
        return name

    def small_arrays(self, fmt: str) -> str:
        key = "_AS_" + fmt.replace("?", "o")
        if key not in self.globs:
            self.globs[key] = tuple(struct.Struct(f">{n}{fmt}") for n in range(SMALL_ARRAYS))
        return key

    def struct(self, fmt: str) -> str:
        key = "_S_" + fmt.replace("?", "o")
        if key not in self.globs:
            self.globs[key] = struct.Struct(">" + fmt)
        return key

    def emit(self, ind: str, line: str) -> None:
        self.lines.append(ind + line)

    def literal(self, value: Any) -> str:
        if value is None or isinstance(value, (bool, int, float, str, bytes)):
            return repr(value)
        if isinstance(value, uuid.UUID):
            return "_Z" if value == ZERO_UUID else self.const(value, "u")
        if isinstance(value, list):
            return "[" + ", ".join(self.literal(v) for v in value) + "]"
        if isinstance(value, tuple):
            return "(" + "".join(self.literal(v) + ", " for v in value) + ")"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k!r}: {self.literal(v)}" for k, v in value.items()) + "}"
        raise TypeError(f"no literal for {value!r}")

    def compact(self, f: FieldSpec) -> bool:
        if f.flexible is not None:
            return self.version in f.flexible
        return self.flexible

    def raise_(self, ind: str, reason: str, path: str, pos: str = "pos") -> None:
        """Emit a raise; ``reason`` and ``path`` are f-string bodies."""
        self.emit(ind, f"raise _E(f{reason!r}, {pos}, f{path!r})")

    def source(self) -> str:
        out = list(self.lines)
        for block in self.extra:
            out.append("")
            out.extend(block)
        return "\n".join(out) + "\n"


def _kernel_first(g: _Gen, indent: str, name: str, call: str, n: str, min_count: int, assign: str) -> str:
    """Emit a kernel call for arrays of ``min_count`` or more items with the generated
    Python as its fallback; return the fallback branch's indent.

    ``assign`` takes the kernel's result (``None``: not for the kernel) as ``{}``.
    """
    g.globs[name] = g.kernel
    res = g.var("r")
    g.emit(indent, f"{res} = {call} if {n} >= {min_count} else None")
    g.emit(indent, f"if {res} is not None:")
    g.emit(indent, "    " + assign.format(res))
    g.emit(indent, "else:")
    return indent + "    "


def _min_size(fields: list[FieldSpec], version: int, flexible: bool, gen: _Gen) -> int:
    """Smallest number of bytes a struct can take in ``version``."""
    total = 1 if flexible else 0
    for f in fields:
        if not f.present(version) or f.is_tagged(version):
            continue
        compact = version in f.flexible if f.flexible is not None else flexible
        if f.array:
            total += 1 if compact else 4
        elif f.kind in FIXED_FORMATS:
            total += FIXED_FORMATS[f.kind][1]
        elif f.kind == "uuid":
            total += 16
        elif f.kind == "string":
            total += 1 if compact else 2
        elif f.kind in ("bytes", "records"):
            total += 1 if compact else 4
        elif f.kind == "struct":
            if version in f.nullable:
                total += 1
            else:
                total += _min_size(f.fields or [], version, flexible, gen)
    return total


# --------------------------------------------------------------------------- decode


class _Decoder:
    def __init__(self, gen: _Gen) -> None:
        self.g = gen

    def need(self, ind: str, n: str, path: str) -> None:
        g = self.g
        g.emit(ind, f"if pos + {n} > end:")
        g.raise_(ind + "    ", "Expected " + "{" + n + "}" + " bytes, {end - pos} left", path)

    def uvarint(self, ind: str, var: str, path: str) -> None:
        g = self.g
        g.emit(ind, "if pos >= end:")
        g.raise_(ind + "    ", "Expected an unsigned varint, no bytes left", path)
        g.emit(ind, f"{var} = buf[pos]")
        g.emit(ind, "pos += 1")
        g.emit(ind, f"if {var} > 127:")
        g.emit(ind, f"    {var}, pos = _uvt(buf, pos, {var}, end)")
        g.emit(ind, f"    if {var} < 0 or {var} > 0xFFFFFFFF:")
        g.raise_(ind + "        ", "Invalid unsigned varint", path)

    def struct_body(self, fields: list[FieldSpec], path: str, ind: str) -> str:
        """Emit code decoding a struct's fields; return the dict variable."""
        g = self.g
        v = g.version
        present = [f for f in fields if f.present(v)]
        untagged = [f for f in present if not f.is_tagged(v)]
        tagged = sorted((f for f in present if f.is_tagged(v)), key=lambda f: f.tag or 0)
        values: dict[str, str] = {}
        i = 0
        while i < len(untagged):
            f = untagged[i]
            if _is_fixed(f):
                run = [f]
                i += 1
                while i < len(untagged) and _is_fixed(untagged[i]):
                    run.append(untagged[i])
                    i += 1
                fmt = "".join(FIXED_FORMATS[r.kind][0] for r in run)
                size = sum(FIXED_FORMATS[r.kind][1] for r in run)
                names = [g.var("v") for _ in run]
                if len(run) == 1:
                    self.need(ind, str(size), path + "." + run[0].key)
                else:
                    layout = g.const(tuple((r.key, FIXED_FORMATS[r.kind][1]) for r in run), "run")
                    g.emit(ind, f"if pos + {size} > end:")
                    g.emit(ind, f"    raise _run_error({layout}, pos, end, f{path!r})")
                g.emit(ind, f"{', '.join(names)}, = {g.struct(fmt)}.unpack_from(buf, pos)")
                g.emit(ind, f"pos += {size}")
                for r, name in zip(run, names, strict=True):
                    values[r.key] = name
            else:
                values[f.key] = self.field(f, path + "." + f.key, ind)
                i += 1
        unk = None
        if g.flexible:
            unk = self.tagged_section(tagged, values, path, ind)
        d = g.var("d")
        items = ", ".join(f"{f.key!r}: {values[f.key]}" for f in present)
        g.emit(ind, f"{d} = {{{items}}}")
        if unk is not None:
            g.emit(ind, f"if {unk} is not None:")
            g.emit(ind, f"    {d}['_unknown_tags'] = {unk}")
        return d

    def tagged_section(self, tagged: list[FieldSpec], values: dict[str, str], path: str,
                       ind: str) -> str:
        g = self.g
        nt = g.var("nt")
        unk = g.var("unk")
        for f in tagged:
            name = g.var("v")
            values[f.key] = name
            # an absent tagged struct decodes as None (as kafka-python does);
            # building a default struct per element would cost a dict each
            g.emit(ind, f"{name} = {g.literal(self.absent_value(f))}")
        self.uvarint(ind, nt, path + "._tagged_fields")
        g.emit(ind, f"{unk} = None")
        g.emit(ind, f"if {nt}:")
        i2 = ind + "    "
        last, tag, size, stop = g.var("last"), g.var("tag"), g.var("size"), g.var("stop")
        g.emit(i2, f"{last} = -1")
        g.emit(i2, f"for _ in range({nt}):")
        i3 = i2 + "    "
        self.uvarint(i3, tag, path + "._tagged_fields")
        g.emit(i3, f"if {tag} <= {last}:")
        g.raise_(i3 + "    ", "Tag {" + tag + "} after tag {" + last + "}: tags must be unique and ascending",
                 path + "._tagged_fields")
        g.emit(i3, f"{last} = {tag}")
        self.uvarint(i3, size, path + "._tagged_fields[{" + tag + "}]")
        self.need(i3, size, path + "._tagged_fields[{" + tag + "}]")
        g.emit(i3, f"{stop} = pos + {size}")
        kw = "if"
        for f in tagged:
            fn = self.tag_function(f)
            g.emit(i3, f"{kw} {tag} == {f.tag}:")
            g.emit(i3, f"    {values[f.key]}, _p2 = {fn}(data, buf, pos, {stop}, f{path!r})")
            g.emit(i3, f"    if _p2 != {stop}:")
            g.raise_(i3 + "        ", "Tagged field has {" + stop + " - pos} bytes, its value took {_p2 - pos}",
                     path + "." + f.key)
            kw = "elif"
        if tagged:
            g.emit(i3, "else:")
            i4 = i3 + "    "
        else:
            i4 = i3
        g.emit(i4, f"if {unk} is None:")
        g.emit(i4, f"    {unk} = {{}}")
        g.emit(i4, f"{unk}[{tag}] = bytes(buf[pos:{stop}])")
        g.emit(i3, f"pos = {stop}")
        return unk

    def tag_function(self, f: FieldSpec) -> str:
        """Emit a separate function decoding one tagged field's value."""
        g = self.g
        name = g.var("tagdec")
        saved = g.lines
        g.lines = []
        g.emit("", f"def {name}(data, buf, pos, end, _p):")
        val = self.field(f, "{_p}." + f.key, "    ")
        g.emit("    ", f"return {val}, pos")
        g.extra.append(g.lines)
        g.lines = saved
        return name

    def field(self, f: FieldSpec, path: str, ind: str) -> str:
        g = self.g
        v = g.version
        nullable = v in f.nullable
        compact = g.compact(f)
        if not f.array:
            return self.element(f, f.kind, path, ind, nullable, compact)
        out = g.var("a")
        n = g.var("n")
        if compact:
            self.uvarint(ind, n, path)
            g.emit(ind, f"{n} -= 1")
        else:
            self.need(ind, "4", path)
            g.emit(ind, f"{n}, = _I32.unpack_from(buf, pos)")
            g.emit(ind, "pos += 4")
        g.emit(ind, f"if {n} < 0:")
        if nullable:
            g.emit(ind, f"    {out} = None")
        else:
            g.raise_(ind + "    ", "Null array in a field that is not nullable", path)
        g.emit(ind, "else:")
        i2 = ind + "    "
        if f.kind == "struct":
            min_size = _min_size(f.fields or [], v, g.flexible, g)
        elif f.kind in FIXED_FORMATS:
            min_size = FIXED_FORMATS[f.kind][1]
        elif f.kind == "uuid":
            min_size = 16
        elif f.kind == "string":
            min_size = 1 if compact else 2
        else:
            min_size = 1 if compact else 4
        min_size = max(min_size, 1)
        mul = "" if min_size == 1 else f" * {min_size}"
        g.emit(i2, f"if {n}{mul} > end - pos:")
        g.raise_(i2 + "    ", "Array of {" + n + "} elements needs at least {" + n + mul
                 + "} bytes, {end - pos} left", path)
        if f.kind in FIXED_FORMATS:
            fmt, size = FIXED_FORMATS[f.kind]
            small = g.small_arrays(fmt)
            g.emit(i2, f"{out} = ({small}[{n}] if {n} < {SMALL_ARRAYS} else _arr({fmt!r}, {n}))"
                   f".unpack_from(buf, pos)")
            g.emit(i2, f"pos += {n} * {size}" if size != 1 else f"pos += {n}")
            return out
        program = self.kernel_program(f) if f.kind == "struct" and g.kernel is not None else None
        if program is not None:
            i2 = _kernel_first(g, i2, "_kernel",
                               f"_kernel(buf, pos, end, {n}, {g.const(program, 'prog')}, {g.flexible}, data)",
                               n, KERNEL_MIN_COUNT, f"{out}, pos = {{}}")
        idx = g.var("i")
        append = g.var("ap")
        g.emit(i2, f"{out} = []")
        g.emit(i2, f"{append} = {out}.append")
        g.emit(i2, f"for {idx} in range({n}):")
        i3 = i2 + "    "
        elem = self.element(f, f.kind, path + "[{" + idx + "}]", i3, False, compact)
        g.emit(i3, f"{append}({elem})")
        wrap = self.key_wrap(f)
        if wrap is not None:  # the kernel wraps the lists it builds itself
            g.emit(i2, f"{out} = {g.const(wrap, 'kl')}({out})")
        return out

    def key_wrap(self, f: FieldSpec) -> Callable[[list[Any]], KeyedList] | None:
        """For an array of structs with ``mapKey`` fields: what makes a :class:`KeyedList` of it."""
        if f.kind != "struct" or not f.array:
            return None
        key_fields = tuple(sub.key for sub in f.fields or [] if sub.map_key and sub.present(self.g.version))
        return keyed(key_fields) if key_fields else None

    def kernel_program(self, f: FieldSpec, depth: int = 0) -> tuple[Any, ...] | None:
        """The C kernel's program for an array of structs, or None if it does not apply.

        ``(ops, keys, template, subprograms, wrap)``; see ``_kernel.pyx``.
        """
        g = self.g
        v = g.version
        ops = bytearray()
        keys: list[str] = []
        template: dict[str, Any] = {}
        subs: list[tuple[Any, ...]] = []
        for sub in f.fields or []:
            if not sub.present(v):
                continue
            template[sub.key] = None
            if sub.is_tagged(v):
                absent = self.absent_value(sub)
                if isinstance(absent, (list, dict)):
                    return None  # a mutable value cannot be shared by every element
                template[sub.key] = absent
                continue
            op = _kernel_op(sub, g, lambda s: self.kernel_program(s, depth + 1) if depth < 4 else None, subs)
            if op is None or (op & 0x1F == 17 and self.key_wrap(sub) is not None):
                return None  # (an empty keyed array must still become a KeyedList)
            ops.append(op)
            keys.append(sub.key)
        if not ops:
            return None
        return bytes(ops), tuple(keys), template, tuple(subs), self.key_wrap(f)

    def absent_value(self, f: FieldSpec) -> Any:
        """What a tagged field decodes as when it is not on the wire."""
        if f.kind == "struct" and not f.array:
            return None
        if f.array and f.kind in FIXED_FORMATS:
            # a "null" default stays None: for PartitionChangeRecord's Isr it means "unchanged"
            return None if f.default_text == "null" else ()
        return f.default(self.g.version)

    def element(self, f: FieldSpec, kind: str, path: str, ind: str, nullable: bool,
                compact: bool) -> str:
        g = self.g
        out = g.var("v")
        if kind in FIXED_FORMATS:
            fmt, size = FIXED_FORMATS[kind]
            self.need(ind, str(size), path)
            g.emit(ind, f"{out}, = {g.struct(fmt)}.unpack_from(buf, pos)")
            g.emit(ind, f"pos += {size}")
        elif kind == "uuid":
            self.need(ind, "16", path)
            # UUID(int=...) without its argument parsing (the uuid module does the same)
            g.emit(ind, f"{out} = _new(_UUID)")
            g.emit(ind, f"_oset({out}, 'int', _from_bytes(buf[pos:pos + 16], 'big'))")
            g.emit(ind, f"_oset({out}, 'is_safe', _SAFE_UNKNOWN)")
            g.emit(ind, "pos += 16")
        elif kind in ("string", "bytes", "records"):
            n = g.var("n")
            if compact:
                self.uvarint(ind, n, path)
                g.emit(ind, f"{n} -= 1")
            elif kind == "string":
                self.need(ind, "2", path)
                g.emit(ind, f"{n}, = _I16.unpack_from(buf, pos)")
                g.emit(ind, "pos += 2")
            else:
                self.need(ind, "4", path)
                g.emit(ind, f"{n}, = _I32.unpack_from(buf, pos)")
                g.emit(ind, "pos += 4")
            g.emit(ind, f"if {n} < 0:")
            if nullable:
                g.emit(ind, f"    {out} = None")
            else:
                g.raise_(ind + "    ", f"Null {kind} in a field that is not nullable", path)
            g.emit(ind, "else:")
            i2 = ind + "    "
            if kind == "string":
                g.emit(i2, f"if {n} > 32767:")
                g.raise_(i2 + "    ", "String of {" + n + "} bytes is longer than 32767", path)
            g.emit(i2, f"if pos + {n} > end:")
            g.raise_(i2 + "    ", "Expected {" + n + "} bytes, {end - pos} left", path)
            if kind == "string":
                g.emit(i2, "try:")
                g.emit(i2, f"    {out} = str(buf[pos:pos + {n}], 'utf-8')")
                g.emit(i2, "except UnicodeDecodeError as _exc:")
                g.raise_(i2 + "    ", "Invalid UTF-8: {_exc.reason}", path)
            elif kind == "bytes":
                g.emit(i2, f"{out} = bytes(buf[pos:pos + {n}])")
            else:
                g.emit(i2, f"{out} = _rslice(data, pos, {n})")
            g.emit(i2, f"pos += {n}")
        elif kind == "struct":
            if nullable:
                self.need(ind, "1", path)
                g.emit(ind, "if buf[pos] > 127:")
                g.emit(ind, "    pos += 1")
                g.emit(ind, f"    {out} = None")
                g.emit(ind, "else:")
                g.emit(ind, "    pos += 1")
                ind = ind + "    "
            d = self.struct_body(f.fields or [], path, ind)
            g.emit(ind, f"{out} = {d}")
        else:  # pragma: no cover - rejected by the schema parser
            raise ValueError(kind)
        return out


def compile_decoder(fields: list[FieldSpec], version: int, flexible: bool, name: str,
                    kernel: Any = KERNEL) -> tuple[Callable[[memoryview, Any, int, int], tuple[dict[str, Any], int]],
                                                   str]:
    """Compile ``_decode(data, buf, pos, end) -> (message, pos)`` for one version.

    ``data`` is a ``memoryview`` of the input (``records`` values are slices
    of it) and ``buf`` the same bytes as ``bytes``/``bytearray`` when the
    input is one (indexing them is faster), else ``data`` again. ``kernel``
    is the C function for arrays of flat structs (None: pure Python).
    """
    g = _Gen(version, flexible, kernel)
    g.emit("", "def _decode(data, buf, pos, end):")
    d = _Decoder(g).struct_body(fields, "$", "    ")
    g.emit("    ", f"return {d}, pos")
    src = g.source()
    exec(compile(src, f"<kbatch.protocol decode {name} v{version}>", "exec"), g.globs)
    return g.globs["_decode"], src


# --------------------------------------------------------------------------- encode


class _Encoder:
    def __init__(self, gen: _Gen) -> None:
        self.g = gen

    def uvarint(self, ind: str, expr: str) -> None:
        g = self.g
        t = g.var("t")
        g.emit(ind, f"{t} = {expr}")
        g.emit(ind, f"if {t} < 128:")
        g.emit(ind, f"    b.append({t})")
        g.emit(ind, "else:")
        g.emit(ind, f"    _wuv(b, {t})")

    def struct_body(self, fields: list[FieldSpec], m: str, path: str, ind: str) -> None:
        g = self.g
        v = g.version
        g.emit(ind, f"if not isinstance({m}, dict):")
        g.raise_(ind + "    ", "Expected dict, got {type(" + m + ").__name__}", path, "-1")
        present = [f for f in fields if f.present(v)]
        untagged = [f for f in present if not f.is_tagged(v)]
        tagged = sorted((f for f in present if f.is_tagged(v)), key=lambda f: f.tag or 0)
        get = f"{m}.get"
        i = 0
        while i < len(untagged):
            f = untagged[i]
            if _is_fixed(f):
                run = [f]
                i += 1
                while i < len(untagged) and _is_fixed(untagged[i]):
                    run.append(untagged[i])
                    i += 1
                fmt = "".join(FIXED_FORMATS[r.kind][0] for r in run)
                args = ", ".join(f"{get}({r.key!r}, {g.literal(r.default(v))})" for r in run)
                g.emit(ind, f"b += {g.struct(fmt)}.pack({args})")
            else:
                val = g.var("x")
                g.emit(ind, f"{val} = {get}({f.key!r}, {literal_default(f, v, g)})")
                self.field(f, val, path + "." + f.key, ind)
                i += 1
        # fields this version lacks: non-default values must not be lost silently
        for f in fields:
            if f.present(v) or f.ignorable:
                continue
            k = g.const(f.default(v), "dflt")
            g.emit(ind, f"if {f.key!r} in {m} and not _isdef({m}[{f.key!r}], {k}):")
            g.raise_(ind + "    ", f"Field is not in version {v} and is not ignorable, "
                     "but has a non-default value {" + m + "[" + repr(f.key) + "]!r}",
                     path + "." + f.key, "-1")
        if not g.flexible:
            return
        unk = g.var("u")
        g.emit(ind, f"{unk} = {get}('_unknown_tags')")
        if not tagged:
            g.emit(ind, f"if {unk}:")
            g.emit(ind, f"    _wtags(b, [], {unk}, f{path!r})")
            g.emit(ind, "else:")
            g.emit(ind, "    b.append(0)")
            return
        lst = g.var("tl")
        g.emit(ind, f"{lst} = []")
        for f in tagged:
            tv = g.var("tv")
            default = f.default(v)
            k = g.const(default, "dflt")
            g.emit(ind, f"{tv} = {get}({f.key!r})")
            g.emit(ind, f"if {tv} is not None and not _isdef({tv}, {k}):" if f.kind == "struct" and not f.array
                   else f"if {f.key!r} in {m} and not _isdef({tv}, {k}):")
            fn = self.tag_function(f)
            g.emit(ind, f"    {lst}.append(({f.tag}, {fn}({tv}, f{path!r})))")
        g.emit(ind, f"if {lst} or {unk}:")
        g.emit(ind, f"    _wtags(b, {lst}, {unk}, f{path!r})")
        g.emit(ind, "else:")
        g.emit(ind, "    b.append(0)")

    def tag_function(self, f: FieldSpec) -> str:
        g = self.g
        name = g.var("tagenc")
        saved = g.lines
        g.lines = []
        g.emit("", f"def {name}(val, _p):")
        g.emit("    ", "parts = []")
        g.emit("    ", "b = bytearray()")
        self.field(f, "val", "{_p}." + f.key, "    ")
        g.emit("    ", "parts.append(b)")
        g.emit("    ", "return b''.join(parts)")
        g.extra.append(g.lines)
        g.lines = saved
        return name

    def length(self, ind: str, n: str, compact: bool, fmt: str) -> None:
        g = self.g
        if compact:
            self.uvarint(ind, f"{n} + 1")
        else:
            g.emit(ind, f"b += {g.struct(fmt)}.pack({n})")

    def null(self, ind: str, compact: bool, fmt: str) -> None:
        g = self.g
        if compact:
            g.emit(ind, "b.append(0)")
        else:
            g.emit(ind, f"b += {g.struct(fmt)}.pack(-1)")

    def field(self, f: FieldSpec, val: str, path: str, ind: str) -> None:
        g = self.g
        v = g.version
        nullable = v in f.nullable
        compact = g.compact(f)
        if not f.array:
            self.element(f, f.kind, val, path, ind, nullable, compact)
            return
        g.emit(ind, f"if {val} is None:")
        if nullable:
            self.null(ind + "    ", compact, "i")
        else:
            g.raise_(ind + "    ", "Expected list, got None (the field is not nullable)", path, "-1")
        g.emit(ind, "else:")
        i2 = ind + "    "
        n = g.var("n")
        g.emit(i2, f"{n} = len({val})")
        self.length(i2, n, compact, "i")
        if f.kind in FIXED_FORMATS:
            fmt = FIXED_FORMATS[f.kind][0]
            g.emit(i2, f"if {n}:")
            g.emit(i2, f"    b += _arr({fmt!r}, {n}).pack(*{val})")
            return
        program = self.kernel_program(f) if f.kind == "struct" and g.kernel is not None else None
        if program is not None:
            i2 = _kernel_first(g, i2, "_ekernel",
                               f"_ekernel({val}, {g.const(program, 'prog')}, {g.flexible}, b, parts, "
                               f"{ZERO_COPY_THRESHOLD})",
                               n, ENCODE_KERNEL_MIN_COUNT, "b = {}")
        idx = g.var("i")
        e = g.var("e")
        g.emit(i2, f"for {idx} in range({n}):")
        i3 = i2 + "    "
        g.emit(i3, f"{e} = {val}[{idx}]")
        self.element(f, f.kind, e, path + "[{" + idx + "}]", i3, False, compact)

    def kernel_program(self, f: FieldSpec, depth: int = 0) -> tuple[Any, ...] | None:
        """The C encode kernel's program for an array of structs, or None if it does not apply.

        ``(ops, keys, defaults, subprograms, checks)``; see ``_kernel.pyx``.
        """
        g = self.g
        v = g.version
        ops = bytearray()
        keys: list[str] = []
        defaults: list[Any] = []
        subs: list[tuple[Any, ...]] = []
        checks: list[tuple[str, int, Any]] = []
        for sub in f.fields or []:
            if not sub.present(v):
                if not sub.ignorable:
                    checks.append((sub.key, 3, None))
            elif sub.is_tagged(v):
                mode = 0 if sub.kind == "struct" and not sub.array else 2 if sub.array else 1
                checks.append((sub.key, mode, sub.default(v) if mode == 1 else None))
            else:
                op = _kernel_op(sub, g, lambda s: self.kernel_program(s, depth + 1) if depth < 4 else None, subs)
                if op is None:
                    return None
                ops.append(op)
                keys.append(sub.key)
                default = sub.default(v)
                defaults.append(tuple(default) if isinstance(default, list) else default)
        if not ops:
            return None
        return bytes(ops), tuple(keys), tuple(defaults), tuple(subs), tuple(checks)

    def element(self, f: FieldSpec, kind: str, val: str, path: str, ind: str, nullable: bool,
                compact: bool) -> None:
        g = self.g
        if kind in FIXED_FORMATS:
            g.emit(ind, f"b += {g.struct(FIXED_FORMATS[kind][0])}.pack({val})")
        elif kind == "uuid":
            g.emit(ind, f"b += (_Z if {val} is None else {val}).bytes")
        elif kind in ("string", "bytes", "records"):
            fmt = "h" if kind == "string" else "i"
            g.emit(ind, f"if {val} is None:")
            if nullable:
                self.null(ind + "    ", compact, fmt)
            else:
                g.raise_(ind + "    ", f"Expected {'str' if kind == 'string' else 'bytes'}, got None "
                         "(the field is not nullable)", path, "-1")
            g.emit(ind, "else:")
            i2 = ind + "    "
            n = g.var("n")
            if kind == "string":
                enc = g.var("s")
                g.emit(i2, f"{enc} = {val}.encode('utf-8')")
                g.emit(i2, f"{n} = len({enc})")
                g.emit(i2, f"if {n} > 32767:")
                g.raise_(i2 + "    ", "String of {" + n + "} bytes is longer than 32767", path, "-1")
                self.length(i2, n, compact, fmt)
                g.emit(i2, f"b += {enc}")
            elif kind == "bytes":
                g.emit(i2, f"{n} = len({val}) if type({val}) is bytes else _nbytes({val})")
                self.length(i2, n, compact, fmt)
                g.emit(i2, f"b += {val}")
            else:
                view = g.var("rv")
                g.emit(i2, f"{view} = _view({val})")
                g.emit(i2, f"{n} = {view}.nbytes")
                self.length(i2, n, compact, fmt)
                g.emit(i2, f"if {n} >= {ZERO_COPY_THRESHOLD}:")
                g.emit(i2, "    parts.append(b)")
                g.emit(i2, f"    parts.append({view})")
                g.emit(i2, "    b = bytearray()")
                g.emit(i2, "else:")
                g.emit(i2, f"    b += {view}")
        elif kind == "struct":
            if nullable:
                g.emit(ind, f"if {val} is None:")
                g.emit(ind, "    b.append(255)")
                g.emit(ind, "else:")
                g.emit(ind, "    b.append(1)")
                ind = ind + "    "
            self.struct_body(f.fields or [], val, path, ind)
        else:  # pragma: no cover
            raise ValueError(kind)


def compile_encoder(fields: list[FieldSpec], version: int, flexible: bool, name: str,
                    kernel: Any = ENCODE_KERNEL) -> tuple[Callable[[dict[str, Any], list[Any]], None], str]:
    """Compile ``_encode(m, parts)`` for one version; it appends buffers to ``parts``.

    ``kernel`` is the C function for arrays of flat structs (None: pure Python).
    """
    g = _Gen(version, flexible, kernel)
    g.emit("", "def _encode(m, parts):")
    g.emit("    ", "b = bytearray()")
    _Encoder(g).struct_body(fields, "m", "$", "    ")
    g.emit("    ", "parts.append(b)")
    src = g.source()
    exec(compile(src, f"<kbatch.protocol encode {name} v{version}>", "exec"), g.globs)
    return g.globs["_encode"], src


# --------------------------------------------------------------------------- validation


def find_encode_error(fields: list[FieldSpec], m: Any, version: int, flexible: bool,
                      path: str = "$") -> ProtocolError | None:
    """Walk ``m`` and describe the first value the encoder cannot write.

    Only used after the compiled encoder failed, to say where.
    """
    if not isinstance(m, dict):
        return ProtocolError(f"Expected dict, got {type(m).__name__}", -1, path)
    for f in fields:
        if not f.present(version):
            continue
        p = f"{path}.{f.key}"
        value = m.get(f.key, f.default(version))
        nullable = version in f.nullable
        if f.array:
            if value is None:
                if not nullable:
                    return ProtocolError("Expected list, got None", -1, p)
                continue
            try:
                items = list(value)
            except TypeError:
                return ProtocolError(f"Expected list, got {type(value).__name__}", -1, p)
            for i, item in enumerate(items):
                err = _check_value(f, item, version, flexible, f"{p}[{i}]", False)
                if err is not None:
                    return err
        else:
            err = _check_value(f, value, version, flexible, p, nullable)
            if err is not None:
                return err
    return None


def _check_value(f: FieldSpec, value: Any, version: int, flexible: bool, path: str,
                 nullable: bool) -> ProtocolError | None:
    kind = f.kind
    if kind == "struct":
        if value is None:
            return None if nullable or f.is_tagged(version) else ProtocolError("Expected dict, got None", -1, path)
        return find_encode_error(f.fields or [], value, version, flexible, path)
    if kind in INT_RANGES:
        lo, hi = INT_RANGES[kind]
        if not isinstance(value, int):
            return ProtocolError(f"Expected int, got {type(value).__name__}", -1, path)
        if not lo <= value <= hi:
            return ProtocolError(f"Expected {kind} in [{lo}, {hi}], got {value}", -1, path)
        return None
    if kind == "float64":
        if not isinstance(value, (int, float)):
            return ProtocolError(f"Expected float, got {type(value).__name__}", -1, path)
        return None
    if kind == "bool":
        return None
    if kind == "uuid":
        if value is not None and not isinstance(value, uuid.UUID):
            return ProtocolError(f"Expected uuid.UUID, got {type(value).__name__}", -1, path)
        return None
    if value is None:
        return None if nullable else ProtocolError(f"Expected {kind}, got None", -1, path)
    if kind == "string":
        if not isinstance(value, str):
            return ProtocolError(f"Expected str, got {type(value).__name__}", -1, path)
        return None
    try:
        memoryview(value)
    except TypeError:
        return ProtocolError(f"Expected a bytes-like object, got {type(value).__name__}", -1, path)
    return None
