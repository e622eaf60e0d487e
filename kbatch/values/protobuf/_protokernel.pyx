# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The Protobuf value kernel: decodes message bodies, tag by tag, into the column buffers of
``_columns.pxi`` (the same buffers, and so the same Arrow layer, as the Avro kernel).

The wire format (protobuf.dev/programming-guides/encoding)::

    message  := (tag value)*            tag := varint (field_number << 3 | wire_type),
                                        at most 5 bytes and 2**32 - 1 (upb refuses more)
    wire 0   varint (up to 10 bytes)    int32 int64 uint32 uint64 sint32 sint64 bool enum
    wire 1   8 bytes little-endian      fixed64 sfixed64 double
    wire 2   varint length, bytes       string bytes message, packed repeated scalars
    wire 3/4 start / end group          (skipped; groups are not decoded)
    wire 5   4 bytes little-endian      fixed32 sfixed32 float

A *program* (``kbatch.values.protobuf._compile``) is a table of message instances (``MSG_WORDS``
int32 each: struct column, first field, field count, dense table, subtree) and a table of fields
(``FIELD_WORDS`` each: number, type, column, item column, flags, child, oneof siblings,
subtree); ``aux`` holds the dense field-number tables, column lists and enum tables, ``consts``
the enum names. Every message occurrence appends one struct slot; a singular field writes the
slot of its struct's row, and when it comes again the slot is rewound and written again (the
last value wins; a oneof member rewinds its siblings); a repeated field appends items (packed
or not) and closes its list when the message ends (a map whose key comes again keeps one entry,
with the last value, where the key first stood: its entries' columns are gathered anew); fields
left unwritten become nulls (or their zero with ``emit_default_values``). A singular message (or Timestamp, Duration,
wrapper) met twice must be merged: the record stops with ``E_MERGE`` and the caller takes its
slow path (upb parses it; ``_merge.py`` writes each such field once, its occurrences
concatenated, and the result is decoded again).

Safety: every length is checked against the bytes left of the enclosing message before use,
varints stop at 10 bytes, groups nest at most ``MAX_DEPTH`` deep, and nested messages are
bounded by the layout (a finite tree); buffers grow by doubling. A failing record is rolled
back and becomes null; the GIL is released while records are decoded.
"""

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from libc.stdint cimport INT32_MAX, INT64_MAX, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc, calloc
from libc.string cimport memcmp, memcpy, memset

import numpy as np

cdef enum Err:
    E_OK = 0
    E_EOF = 1
    E_VARINT = 2
    E_TAG = 3
    E_WIRE = 4
    E_UTF8 = 5
    E_OVERFLOW = 6
    E_MERGE = 7
    E_DEPTH = 8
    E_TOO_BIG = 9
    E_MEMORY = 10
    E_GROUP = 11
    E_LONG_TAG = 12

include "../_columns.pxi"

include "../_map_keys.pxi"

cdef enum Type:
    # descriptor.proto's FieldDescriptorProto.Type numbers, then kbatch's own
    T_DOUBLE = 1
    T_FLOAT = 2
    T_INT64 = 3
    T_UINT64 = 4
    T_INT32 = 5
    T_FIXED64 = 6
    T_FIXED32 = 7
    T_BOOL = 8
    T_STRING = 9
    T_GROUP = 10
    T_MESSAGE = 11
    T_BYTES = 12
    T_UINT32 = 13
    T_ENUM = 14
    T_SFIXED32 = 15
    T_SFIXED64 = 16
    T_SINT32 = 17
    T_SINT64 = 18
    T_TIMESTAMP = 30
    T_DURATION = 31
    T_WRAPPER = 32
    T_ENUM_INT = 33

cdef enum Flag:
    F_REPEATED = 1
    F_PRESENCE = 2
    F_EMIT = 4
    F_ZERO = 8
    F_DEFAULT = 16
    F_MAP = 32

cdef enum:
    MSG_WORDS = 7
    FIELD_WORDS = 10
    MAX_DEPTH = 100
    MAX_PATH = 8

#: Field types (descriptor numbers, and kbatch's for well-known types) the compiler uses.
TYPES = {"DOUBLE": T_DOUBLE, "FLOAT": T_FLOAT, "INT64": T_INT64, "UINT64": T_UINT64, "INT32": T_INT32,
         "FIXED64": T_FIXED64, "FIXED32": T_FIXED32, "BOOL": T_BOOL, "STRING": T_STRING, "GROUP": T_GROUP,
         "MESSAGE": T_MESSAGE, "BYTES": T_BYTES, "UINT32": T_UINT32, "ENUM": T_ENUM, "SFIXED32": T_SFIXED32,
         "SFIXED64": T_SFIXED64, "SINT32": T_SINT32, "SINT64": T_SINT64, "TIMESTAMP": T_TIMESTAMP,
         "DURATION": T_DURATION, "WRAPPER": T_WRAPPER, "ENUM_INT": T_ENUM_INT}
FLAGS = {"REPEATED": F_REPEATED, "PRESENCE": F_PRESENCE, "EMIT": F_EMIT, "ZERO": F_ZERO, "DEFAULT": F_DEFAULT,
         "MAP": F_MAP}
KINDS = {"NULLT": K_NULLT, "BOOL": K_BOOL, "FIXEDW": K_FIXEDW, "BIN": K_BIN, "LIST": K_LIST, "STRUCT": K_STRUCT}
WORDS = {"MSG": MSG_WORDS, "FIELD": FIELD_WORDS}
#: Error code -> what it means.
ERRORS = {
    E_EOF: "truncated value",
    E_VARINT: "varint longer than 10 bytes",
    E_TAG: "invalid field number 0",
    E_WIRE: "invalid wire type",
    E_UTF8: "invalid UTF-8 in a string",
    E_OVERFLOW: "timestamp or duration out of the 64-bit microsecond range",
    E_MERGE: "a singular message occurs twice and must be merged",
    E_DEPTH: "groups nested deeper than 100",
    E_TOO_BIG: "column larger than 2 GiB (decode fewer records at once)",
    E_MEMORY: "out of memory",
    E_GROUP: "unmatched end of group",
    E_LONG_TAG: "field tag longer than 5 bytes or above 2**32 - 1",
}
MERGE = E_MERGE


cdef struct Machine:
    const int32_t* msgs
    const int32_t* fields
    const int32_t* aux
    const uint8_t* consts
    const uint8_t* data_end
    const uint8_t* consts_end
    Col* cols
    int ncols
    int32_t err_field
    const uint8_t* err_p
    int64_t err_detail
    int nidx
    int64_t idx[8]


# ---------------------------------------------------------------- reading

cdef inline int _uvarint(const uint8_t** pp, const uint8_t* end, uint64_t* out) noexcept nogil:
    cdef const uint8_t* p = pp[0]
    cdef uint64_t v = 0, b
    cdef int shift = 0
    if p < end and p[0] < 0x80:
        out[0] = p[0]
        pp[0] = p + 1
        return E_OK
    while True:
        if p >= end:
            return E_EOF
        b = p[0]
        p += 1
        if shift < 64:
            v |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift >= 70:
            return E_VARINT
    out[0] = v
    pp[0] = p
    return E_OK


cdef inline int _tag(const uint8_t** pp, const uint8_t* end, uint64_t* out) noexcept nogil:
    """A tag: a varint of at most 5 bytes whose value fits 32 bits (upb's ``ReadTag``;
    protobuf-java reads the low 32 bits of a longer one, upb refuses the message)."""
    cdef const uint8_t* start = pp[0]
    cdef int e = _uvarint(pp, end, out)
    if e == E_OK and (pp[0] - start > 5 or out[0] > 0xFFFFFFFFULL):
        return E_LONG_TAG
    return e


cdef inline uint64_t _le(const uint8_t* p, int size) noexcept nogil:
    cdef uint64_t v = 0
    cdef int k
    for k in range(size):
        v |= (<uint64_t>p[k]) << (8 * k)
    return v


cdef inline int _wire_of(int t) noexcept nogil:
    if t == T_DOUBLE or t == T_FIXED64 or t == T_SFIXED64:
        return 1
    if t == T_FLOAT or t == T_FIXED32 or t == T_SFIXED32:
        return 5
    if t == T_STRING or t == T_BYTES or t == T_MESSAGE or t == T_TIMESTAMP or t == T_DURATION or t == T_WRAPPER:
        return 2
    return 0


cdef int _read(int wire, const uint8_t** pp, const uint8_t* end, uint64_t* v, int64_t* n) noexcept nogil:
    """One value of ``wire`` type: a varint or fixed value in ``v``, or (wire 2) its length in
    ``n`` with ``pp`` left at its first byte."""
    cdef const uint8_t* p = pp[0]
    cdef int e
    cdef uint64_t size
    if wire == 0:
        return _uvarint(pp, end, v)
    if wire == 1 or wire == 5:
        n[0] = 8 if wire == 1 else 4
        if end - p < n[0]:
            return E_EOF
        v[0] = _le(p, <int>n[0])
        pp[0] = p + n[0]
        return E_OK
    e = _uvarint(&p, end, &size)
    if e:
        return e
    if size > <uint64_t>(end - p):
        n[0] = <int64_t>size if size < <uint64_t>INT64_MAX else INT64_MAX
        return E_EOF
    n[0] = <int64_t>size
    pp[0] = p
    return E_OK


cdef int _skip(int wire, uint64_t number, const uint8_t** pp, const uint8_t* end, int depth) noexcept nogil:
    """Skip an unknown field's value (a group up to its matching end)."""
    cdef uint64_t v, tag
    cdef int64_t n = 0
    cdef int e
    if wire == 3:
        if depth >= MAX_DEPTH:
            return E_DEPTH
        while True:
            e = _tag(pp, end, &tag)
            if e:
                return e
            if (tag & 7) == 4:
                return E_OK if (tag >> 3) == number else E_GROUP
            if (tag >> 3) == 0:
                return E_TAG
            e = _skip(<int>(tag & 7), tag >> 3, pp, end, depth + 1)
            if e:
                return e
    if wire == 4:
        return E_GROUP
    if wire == 6 or wire == 7:
        return E_WIRE
    e = _read(wire, pp, end, &v, &n)
    if e == E_OK and wire == 2:
        pp[0] += n
    return e


cdef inline int _is_zero(int t, uint64_t v, int64_t n) noexcept nogil:
    if t == T_STRING or t == T_BYTES:
        return n == 0
    if t == T_INT32 or t == T_UINT32 or t == T_ENUM or t == T_ENUM_INT or t == T_SINT32:
        return <uint32_t>v == 0
    return v == 0


# ---------------------------------------------------------------- writing

cdef inline void _rewind(Col* c, int64_t row) noexcept nogil:
    c.n = row
    if c.kind == K_BIN:
        c.data_len = c.offs[row]


cdef int _put_digits(Col* c, const uint8_t* prefix, int64_t plen, int64_t v) noexcept nogil:
    cdef uint8_t buf[96]
    cdef uint8_t digits[24]
    cdef int k = 0, j
    cdef uint64_t u = <uint64_t>(-v) if v < 0 else <uint64_t>v
    if plen > 64:
        plen = 64
    memcpy(buf, prefix, plen)
    while True:
        digits[k] = <uint8_t>(48 + u % 10)
        k += 1
        u //= 10
        if u == 0:
            break
    j = <int>plen
    if v < 0:
        buf[j] = 45
        j += 1
    while k > 0:
        k -= 1
        buf[j] = digits[k]
        j += 1
    return _put_bytes(c, buf, j, NULL)


cdef int _put(Machine* m, Col* c, int t, const int32_t* f, uint64_t v, const uint8_t* s, int64_t n) noexcept nogil:
    """Append one value of type ``t`` (read as ``v``, or ``n`` bytes at ``s``) to column ``c``."""
    cdef int64_t x
    cdef int32_t i32
    cdef uint32_t u32
    cdef float fv
    cdef const int32_t* table
    cdef int k, count
    if _slot(c, 1):
        return E_MEMORY
    if t == T_INT64 or t == T_UINT64 or t == T_FIXED64 or t == T_SFIXED64 or t == T_DOUBLE:
        memcpy(c.vals + c.n * 8, &v, 8)
    elif t == T_SINT64:
        x = <int64_t>(v >> 1) ^ -<int64_t>(v & 1)
        (<int64_t*>c.vals)[c.n] = x
    elif t == T_INT32 or t == T_UINT32 or t == T_FIXED32 or t == T_SFIXED32 or t == T_ENUM_INT:
        (<int32_t*>c.vals)[c.n] = <int32_t><uint32_t>v
    elif t == T_SINT32:  # the low 32 bits, then zigzag (upb, protobuf-java: an over-long varint too)
        u32 = <uint32_t>v
        (<int32_t*>c.vals)[c.n] = <int32_t>((u32 >> 1) ^ -(u32 & 1))
    elif t == T_FLOAT:
        i32 = <int32_t><uint32_t>v
        memcpy(c.vals + c.n * 4, &i32, 4)
    elif t == T_BOOL:
        if v:
            c.vals[c.n >> 3] |= <uint8_t>(1 << (c.n & 7))
        else:
            c.vals[c.n >> 3] &= <uint8_t>~(1 << (c.n & 7))
    elif t == T_STRING or t == T_BYTES:
        if t == T_STRING and n and not _utf8_ok(s, n, m.data_end):
            return E_UTF8
        return _put_bytes(c, s, n, m.data_end if s != NULL else NULL)  # short values: 16-byte copies
    elif t == T_ENUM:
        table = m.aux + f[5]
        count = table[0]
        i32 = <int32_t><uint32_t>v
        for k in range(count):
            if table[3 + 3 * k] == i32:
                return _put_bytes(c, m.consts + table[4 + 3 * k], table[5 + 3 * k], m.consts_end)
        return _put_digits(c, m.consts + table[1], table[2], i32)
    c.n += 1
    return E_OK


cdef int _put_time(Machine* m, Col* c, int t, const uint8_t* p, const uint8_t* end) noexcept nogil:
    """A Timestamp or Duration message (seconds = 1, nanos = 2) as microseconds."""
    cdef uint64_t tag, v, seconds = 0, nanos = 0
    cdef int64_t n = 0, us, s, q, t_s, r
    cdef int e
    while p < end:
        e = _tag(&p, end, &tag)
        if e:
            return e
        if (tag >> 3) == 0:
            return E_TAG
        if (tag >> 3) == 1 and (tag & 7) == 0:
            e = _uvarint(&p, end, &seconds)
        elif (tag >> 3) == 2 and (tag & 7) == 0:
            e = _uvarint(&p, end, &nanos)
        else:
            e = _skip(<int>(tag & 7), tag >> 3, &p, end, 0)
        if e:
            return e
    # us = seconds * 10**6 + nanos / 1000 (int32 nanos, the quotient truncated, as Spark), exactly
    # or E_OVERFLOW: with q = t' * 10**6 + r (|r| < 10**6), us = t * 10**6 + r where t = seconds + t';
    # t and r are brought to one sign, then us fits int64 iff t * 10**6 + r lies in
    # [-9223372036854 * 10**6 - 775808, 9223372036854 * 10**6 + 775807]; no step overflows
    s = <int64_t>seconds
    if s > <int64_t>9223372036857LL or s < -<int64_t>9223372036857LL:  # |q| < 3 * 10**6: out whatever q is
        m.err_detail = s
        return E_OVERFLOW
    q = <int32_t><uint32_t>nanos // 1000
    t_s = s + q // 1000000
    r = q % 1000000
    if t_s > 0 and r < 0:
        t_s -= 1
        r += 1000000
    elif t_s < 0 and r > 0:
        t_s += 1
        r -= 1000000
    if (t_s > <int64_t>9223372036854LL or t_s < -<int64_t>9223372036854LL
            or (t_s == <int64_t>9223372036854LL and r > 775807)
            or (t_s == -<int64_t>9223372036854LL and r < -775808)):
        m.err_detail = s
        return E_OVERFLOW
    us = t_s * 1000000 + r
    if _slot(c, 1):
        return E_MEMORY
    (<int64_t*>c.vals)[c.n] = us
    c.n += 1
    return E_OK


cdef int _put_wrapper(Machine* m, Col* c, int inner, const int32_t* f, const uint8_t* p,
                      const uint8_t* end) noexcept nogil:
    """A wrapper message (``value = 1`` of ``inner`` type) as its value; absent: the zero."""
    cdef uint64_t tag, v = 0, best_v = 0
    cdef int64_t n = 0, best_n = 0
    cdef const uint8_t* best_s = NULL
    cdef int e
    cdef int want = _wire_of(inner)
    while p < end:
        e = _tag(&p, end, &tag)
        if e:
            return e
        if (tag >> 3) == 0:
            return E_TAG
        if (tag >> 3) == 1 and <int>(tag & 7) == want:
            e = _read(want, &p, end, &v, &n)
            if e:
                return e
            best_v = v
            if want == 2:
                best_s = p
                best_n = n
                p += n
        else:
            e = _skip(<int>(tag & 7), tag >> 3, &p, end, 0)
            if e:
                return e
    if not (f[4] & F_ZERO) and _is_zero(inner, best_v, best_n):  # Spark: a zero wrapper is null
        if f[4] & F_REPEATED:
            return _null_slot(c)
        return E_OK  # not written: null when the message ends
    return _put(m, c, inner, f, best_v, best_s, best_n)


cdef int _null_cols(Machine* m, int32_t start, int32_t count) noexcept nogil:
    cdef int k
    for k in range(count):
        if _null_slot(m.cols + m.aux[start + k]):
            return E_MEMORY
    return E_OK


cdef int _message(Machine* m, int32_t mi, const uint8_t* p, const uint8_t* end, int depth) noexcept nogil:
    cdef const int32_t* msg = m.msgs + MSG_WORDS * mi
    cdef Col* sc = m.cols + msg[0]
    cdef Col* c
    cdef Col* lc
    cdef const int32_t* f
    cdef const int32_t* g
    cdef uint64_t tag, number, v = 0
    cdef int64_t n = 0, row, k
    cdef int wire, want, t, e, fi, j, flags
    cdef const uint8_t* q
    cdef const uint8_t* at
    if depth >= MAX_DEPTH:
        return E_DEPTH
    if _slot(sc, 1):
        return E_MEMORY
    row = sc.n
    sc.n += 1
    while p < end:
        at = p
        e = _tag(&p, end, &tag)
        if e:
            m.err_p = at
            return e
        number = tag >> 3
        wire = <int>(tag & 7)
        if number == 0:
            m.err_p = at
            return E_TAG
        fi = -1
        if number < <uint64_t>msg[4]:
            fi = m.aux[msg[3] + number]
        else:
            for j in range(msg[2]):
                if <uint64_t>m.fields[FIELD_WORDS * (msg[1] + j)] == number:
                    fi = msg[1] + j
                    break
        if fi < 0:
            e = _skip(wire, number, &p, end, depth)
            if e:
                m.err_p = at
                return e
            continue
        f = m.fields + FIELD_WORDS * fi
        t = f[1]
        flags = f[4]
        want = _wire_of(t)
        m.err_field = fi
        if wire != want and not (wire == 2 and (flags & F_REPEATED) and want != 2):
            e = _skip(wire, number, &p, end, depth)  # a wire type the field does not have: unknown
            if e:
                m.err_p = at
                return e
            continue
        e = _read(wire, &p, end, &v, &n)
        if e:
            m.err_p = at
            m.err_detail = n
            return e
        c = m.cols + f[3]
        if flags & F_REPEATED:
            if m.nidx < MAX_PATH:
                lc = m.cols + f[2]
                m.idx[m.nidx] = c.n - lc.offs[lc.n]
            m.nidx += 1
            if wire == 2 and want != 2:  # packed
                q = p
                p += n
                while q < p:
                    e = _read(want, &q, p, &v, &n)
                    if e == E_OK:
                        e = _put(m, c, t, f, v, NULL, 0)
                    if e:
                        m.err_p = q
                        return e
                    if m.nidx <= MAX_PATH:
                        m.idx[m.nidx - 1] += 1
            elif t == T_MESSAGE:
                e = _message(m, f[5], p, p + n, depth + 1)
                p += n
            elif t == T_TIMESTAMP or t == T_DURATION:
                e = _put_time(m, c, t, p, p + n)
                p += n
            elif t == T_WRAPPER:
                e = _put_wrapper(m, c, f[6], f, p, p + n)
                p += n
            else:
                e = _put(m, c, t, f, v, p, n)
                if want == 2:
                    p += n
            if e:
                if m.err_p == NULL:
                    m.err_p = at
                return e
            m.nidx -= 1
            continue
        # singular: the last occurrence wins; messages met twice are merged (slow path)
        if c.n > row:
            if want == 2 and t != T_STRING and t != T_BYTES:
                m.err_p = at
                return E_MERGE
            _rewind(c, row)
        for j in range(f[8]):  # oneof siblings: cleared
            g = m.fields + FIELD_WORDS * m.aux[f[7] + j]
            if m.cols[g[3]].n > row:
                if g[1] == T_MESSAGE or _wire_of(g[1]) == 2 and g[1] != T_STRING and g[1] != T_BYTES:
                    m.err_p = at
                    return E_MERGE
                _rewind(m.cols + g[3], row)
        if t == T_MESSAGE:
            e = _message(m, f[5], p, p + n, depth + 1)
            p += n
        elif t == T_TIMESTAMP or t == T_DURATION:
            e = _put_time(m, c, t, p, p + n)
            p += n
        elif t == T_WRAPPER:
            e = _put_wrapper(m, c, f[6], f, p, p + n)
            p += n
        else:
            q = p
            if want == 2:
                p += n
            if (flags & F_PRESENCE) or not _is_zero(t, v, n):
                e = _put(m, c, t, f, v, q, n)
        if e:
            if m.err_p == NULL:
                m.err_p = at
            return e
    # the message ends: lists closed, fields not written null (or their zero)
    for j in range(msg[2]):
        f = m.fields + FIELD_WORDS * (msg[1] + j)
        flags = f[4]
        if flags & F_REPEATED:
            lc = m.cols + f[2]
            if flags & F_MAP:
                e = _last_key_wins(m, f)
                if e:
                    return e
            if m.cols[f[3]].n > INT32_MAX:
                return E_TOO_BIG
            if _slot(lc, 1):
                return E_MEMORY
            lc.offs[lc.n + 1] = <int32_t>m.cols[f[3]].n
            lc.n += 1
        elif m.cols[f[2]].n == row:
            e = _absent(m, f)
            if e:
                return e
    return E_OK


# ---------------------------------------------------------------- maps: the last entry of a key wins

include "_maps.pxi"


cdef int _absent(Machine* m, const int32_t* f) noexcept nogil:
    """A singular field the message did not write: null (over its whole subtree for a message),
    its declared proto2 default (``F_DEFAULT``), or its zero when it has no presence and
    defaults are emitted (``F_EMIT``), as Spark's ``getFieldValue``."""
    cdef const int32_t* d
    cdef Col* c = m.cols + f[3]
    cdef uint64_t v
    if f[4] & F_DEFAULT:  # proto2 [default = ...]
        d = m.aux + f[6]
        if f[1] == T_STRING or f[1] == T_BYTES:
            if _slot(c, 1):
                return E_MEMORY
            return _put_bytes(c, m.consts + d[0], d[1], m.consts_end)
        v = (<uint64_t><uint32_t>d[0]) | ((<uint64_t><uint32_t>d[1]) << 32)
        return _put(m, c, f[1], f, v, NULL, 0)
    if f[4] & F_EMIT:
        return _put(m, c, f[1], f, 0, NULL, 0)
    return _null_cols(m, f[9] + 1, m.aux[f[9]])


def run(
    const int32_t[::1] msgs,
    const int32_t[::1] fields,
    const int32_t[::1] aux,
    const uint8_t[::1] consts,
    const int32_t[::1] coldesc,
    const uint8_t[::1] data,
    const int64_t[::1] starts,
    const int64_t[::1] lengths,
    const int32_t[::1] entry,
    bint stop_on_error=False,
):
    """Decode records ``i`` with ``entry[i] == 0`` (the root message) from
    ``data[starts[i]:starts[i] + lengths[i]]``; the others (-1) are null. Returns ``(columns,
    errors, done)`` as the Avro kernel's ``run``.

    The program (``msgs`` .. ``coldesc``) is trusted: it must be one that
    :func:`kbatch.values.protobuf._verify.verify_proto` accepted, as every
    ``ProtoProgram.arrays()`` is (the one source of programs for this kernel)."""
    cdef Py_ssize_t nrec = len(entry)
    cdef int ncols = len(coldesc) // 4
    if len(starts) != nrec or len(lengths) != nrec:
        raise ValueError("starts, lengths and entry must have one length")
    if ncols < 1 or len(msgs) < MSG_WORDS:
        raise ValueError("no columns or no message")
    cdef Py_ssize_t i
    cdef int c
    for i in range(nrec):
        if entry[i] > 0 or entry[i] < -1 or (entry[i] == 0 and (
                starts[i] < 0 or lengths[i] < 0 or starts[i] + lengths[i] > <int64_t>len(data))):
            raise ValueError(f"record {i}: entry or (start, length) out of range")
    for c in range(ncols):
        if coldesc[4 * c + 2] >= c or (c > 0 and coldesc[4 * c + 2] < 0):
            raise ValueError("columns must be in pre-order with the root first")
    cdef Machine m
    memset(&m, 0, sizeof(Machine))
    m.msgs = &msgs[0]
    m.fields = &fields[0] if len(fields) else NULL
    m.aux = &aux[0] if len(aux) else NULL
    m.consts = &consts[0] if len(consts) else NULL
    m.consts_end = m.consts + len(consts) if m.consts != NULL else NULL
    m.cols = <Col*>calloc(ncols, sizeof(Col))
    m.ncols = ncols
    cdef int64_t* target = <int64_t*>calloc(ncols, sizeof(int64_t))
    cdef ErrRow* errs = NULL
    cdef int64_t nerr = 0, errcap = 0
    cdef ErrRow* row
    cdef void* q
    cdef int e, k, oom = 0
    cdef Py_ssize_t done = 0
    cdef const uint8_t* base = &data[0] if len(data) else NULL
    m.data_end = base + len(data) if base != NULL else NULL
    cdef int32_t root_sub = msgs[5]
    if m.cols == NULL or target == NULL:
        free(m.cols)
        free(target)
        raise MemoryError()
    cdef int* per_record = <int*>calloc(ncols, sizeof(int))
    cdef int par
    cdef int64_t data_cap, body_bytes = 0
    for i in range(nrec):
        if entry[i] >= 0:
            body_bytes += lengths[i]
    if per_record == NULL:
        oom = 1
    for c in range(ncols):
        m.cols[c].kind = coldesc[4 * c]
        m.cols[c].width = coldesc[4 * c + 1]
        m.cols[c].parent = coldesc[4 * c + 2]
        m.cols[c].has_valid = coldesc[4 * c + 3]
        if m.cols[c].kind == K_BIN or m.cols[c].kind == K_LIST:
            m.cols[c].offs = <int32_t*>calloc(1, sizeof(int32_t))
            if m.cols[c].offs == NULL:
                oom = 1
        # a column with only structs above it has one value per record: room for them at once
        # (a string column: 16 bytes a value, never more than all the bodies); the others grow
        # by doubling, so nothing is sized by a count read from a value
        if oom:
            continue
        par = m.cols[c].parent
        per_record[c] = c == 0 or (par >= 0 and m.cols[par].kind == K_STRUCT and per_record[par])
        if per_record[c] and nrec > 64:
            if _reserve(&m.cols[c], nrec):
                oom = 1
            data_cap = min(16 * nrec, body_bytes) + 16
            if m.cols[c].kind == K_BIN and not oom:
                m.cols[c].data = <uint8_t*>malloc(data_cap)
                if m.cols[c].data == NULL:
                    oom = 1
                else:
                    m.cols[c].data_cap = data_cap
    free(per_record)
    try:
        with nogil:
            if not oom:
                for i in range(nrec):
                    m.err_p = NULL
                    m.err_field = -1
                    m.err_detail = 0
                    m.nidx = 0
                    if entry[i] >= 0:
                        e = _message(&m, entry[i], base + starts[i], base + starts[i] + lengths[i], 0)
                    else:
                        e = _null_cols(&m, root_sub + 1, m.aux[root_sub])
                    done = i + 1
                    if e == E_OK:
                        continue
                    if nerr == errcap:
                        errcap = errcap * 2 if errcap else 16
                        q = realloc(errs, errcap * sizeof(ErrRow))
                        if q == NULL:
                            oom = 1
                            break
                        errs = <ErrRow*>q
                    row = &errs[nerr]
                    nerr += 1
                    row.record = i
                    row.code = e
                    row.pc = m.err_field
                    row.position = m.err_p - (base + starts[i]) if m.err_p != NULL else -1
                    row.detail = m.err_detail
                    for k in range(8):
                        row.index[k] = m.idx[k] if k < m.nidx else -1
                    _rollback(m.cols, ncols, i, target)
                    if e == E_MEMORY or _null_cols(&m, root_sub + 1, m.aux[root_sub]) != E_OK:
                        oom = 1
                        break
                    if stop_on_error:
                        break
        if oom:
            raise MemoryError("out of memory decoding values")
        columns = _take_all(m.cols, ncols)
        errors = _errors(errs, nerr)
        if nerr:
            errs = NULL  # the array owns them
        return columns, errors, done
    finally:
        _free_cols(m.cols, ncols)
        free(target)
        free(errs)


def message_indexes(
    const uint8_t[::1] buf,
    const int64_t[::1] start,
    const int64_t[::1] length,
    int64_t[::1] used,
    uint64_t[::1] key,
    uint8_t[::1] error,
):
    """Confluent's message indexes at the start of each body with ``length >= 0``: a zigzag
    varint count, then that many zigzag indexes (a count of 0 means ``[0]``). ``used``: bytes
    they take; ``key``: the indexes packed (6 bits each after a 6-bit count, when the count is
    at most 9 and every index below 64; else ``2**64 - 1``: read them with
    :func:`read_indexes`); ``error``: 1 where they are cut short or negative."""
    cdef Py_ssize_t n = len(start), i
    cdef const uint8_t* p
    cdef const uint8_t* end
    cdef uint64_t v, count, k, packed
    cdef int64_t x
    cdef int bad
    if len(length) != n or len(used) != n or len(key) != n or len(error) != n:
        raise ValueError("arrays of different lengths")
    for i in range(n):
        if length[i] >= 0 and (start[i] < 0 or start[i] + length[i] > <int64_t>len(buf)):
            raise ValueError("a (start, length) range lies outside the data buffer")
    with nogil:
        for i in range(n):
            if length[i] < 0:
                continue
            p = &buf[0] + start[i] if len(buf) else NULL
            end = p + length[i]
            bad = 0
            if p == end:
                error[i] = 1
                continue
            if p[0] == 0:
                used[i] = 1
                key[i] = 1  # [0]: one index, 0
                continue
            if _uvarint(&p, end, &v):
                error[i] = 1
                continue
            x = <int64_t>(v >> 1) ^ -<int64_t>(v & 1)
            if x == 0:
                used[i] = p - (&buf[0] + start[i])
                key[i] = 1
                continue
            if x < 0 or x > 100000:
                error[i] = 1
                continue
            count = <uint64_t>x
            packed = count if count <= 9 else 0xFFFFFFFFFFFFFFFFULL
            for k in range(count):
                if _uvarint(&p, end, &v):
                    bad = 1
                    break
                x = <int64_t>(v >> 1) ^ -<int64_t>(v & 1)
                if x < 0:
                    bad = 1
                    break
                if packed != 0xFFFFFFFFFFFFFFFFULL:
                    if x >= 64:
                        packed = 0xFFFFFFFFFFFFFFFFULL
                    else:
                        packed |= (<uint64_t>x) << (6 + 6 * k)
            if bad:
                error[i] = 1
                continue
            used[i] = p - (&buf[0] + start[i])
            key[i] = packed
