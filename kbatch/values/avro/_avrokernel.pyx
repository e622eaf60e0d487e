# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The value kernel: runs a compiled program over kbatch's ``(data, start, length)`` arrays and
fills growable column buffers (validity bitmaps, offsets, values) that become Arrow arrays.

A *program* is a flat array of instructions of four int32 words ``(op, a, b, c)``
(see ``OPS``); :mod:`kbatch.values.avro._compile` makes one per (writer, reader) schema pair,
all of them writing the same reader-laid-out columns, so records of many writer versions
interleaved in one table decode into one set of columns. The machine has a loop stack (arrays
and maps, blocks of items) and a call stack (a reader field's default value is a
constant Avro encoding run through the field's program; GOSUB runs a subroutine on the value's
own bytes: a recursive type skipped below the depth the reader keeps). SKIP walks past the
values the reader does not keep in one instruction, by a skip tree in ``aux`` (``_skipping.pxi``).
A map's LOOP (``a = 1``) keeps one entry per key when the map ends, the last value where the
key first stood, as Java's ``GenericDatumReader`` and fastavro read a map (``../_map_keys.pxi``,
shared with the Protobuf kernel).

Columns (``coldesc``: ``kind, width, parent, nullable`` per column, in pre-order, a list's
child right after it):

    NULLT   a null-typed column: only a count
    BOOL    values as a bitmap
    FIXEDW  ``width``-byte values (int32, int64, float, double, decimal128)
    BIN     int32 offsets + bytes (binary, string)
    LIST    int32 offsets; the child column is the next one (lists, maps)
    STRUCT  validity only; its children are the columns whose parent it is

Safety: every length and count read from a value is checked against the bytes left before it
is used; a count of items that take no bytes is bounded by ``max_items``; buffers grow by
doubling as values are appended (no allocation sized by an unchecked count). A value that
fails stops at the failing instruction with an error code, the byte position and the loop
indices (for the field path); its partial output is rolled back (every column's length is
derived again from the record index through the parents' offsets) and the record becomes a
null. Nothing here creates a Python object per record or field, and the GIL is released
while records are decoded.

The program itself is trusted: its operands index the columns, ``aux``, the constants and the
code unchecked. Only programs that ``kbatch.values.avro._verify.verify_avro`` accepted are run
(``AvroProgram.arrays`` hands out nothing else); its docstring is the safety argument.
"""

cimport cython
from cpython.buffer cimport PyBuffer_FillInfo
from libc.stdint cimport INT32_MAX, INT64_MAX, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc, calloc
from libc.string cimport memcmp, memcpy, memset

import numpy as np

cdef enum Op:
    # the ops that start by reading a varint come first (read before the switch)
    OP_LONG = 0
    OP_INT = 1
    OP_STRING = 2
    OP_BYTES = 3
    OP_UNION = 4
    OP_ENUM = 5
    OP_LONG_MUL = 6
    OP_VARINT_F = 7
    OP_VARINT_D = 8
    OP_SKIP_VARINT = 9
    OP_SKIP_BYTES = 10
    OP_DEC_BYTES = 11
    OP_NULLABLE = 12
    OP_STRUCT = 13
    OP_NULLSLOT = 14
    OP_JUMP = 15
    OP_END = 16
    OP_FAIL = 17
    OP_ARRAY = 18
    OP_LOOP = 19
    OP_CALL = 20
    OP_RET = 21
    OP_NULLV = 22
    OP_BOOL = 23
    OP_FLOAT = 24
    OP_FLOAT_D = 25
    OP_DOUBLE = 26
    OP_FIXED = 27
    OP_UUID_FIXED = 28
    OP_DEC_FIXED = 29
    OP_SKIP_N = 30
    OP_GOSUB = 31
    OP_FIXED_W = 32
    OP_UUID_STR = 33
    OP_DURATION = 34
    OP_TIME = 35
    OP_SKIP = 36

cdef enum Err:
    E_OK = 0
    E_EOF = 1
    E_VARINT = 2
    E_INT_RANGE = 3
    E_NEG_LENGTH = 4
    E_COUNT = 5
    E_ITEMS = 6
    E_UNION = 7
    E_UTF8 = 8
    E_ENUM = 9
    E_ENUM_UNKNOWN = 10
    E_BOOL = 11
    E_DECIMAL = 12
    E_OVERFLOW = 13
    E_FAIL = 14
    E_TOO_BIG = 15
    E_MEMORY = 16
    E_DEPTH = 17
    E_PRECISION = 18
    E_UUID = 19
    E_TIME = 20
    E_BLOCK_SIZE = 21

include "../_columns.pxi"

include "../_map_keys.pxi"

#: Instruction names -> opcodes (the compiler takes its numbers from here).
OPS = {name: value for name, value in (
    ("END", OP_END), ("JUMP", OP_JUMP), ("FAIL", OP_FAIL), ("UNION", OP_UNION), ("ARRAY", OP_ARRAY),
    ("LOOP", OP_LOOP), ("CALL", OP_CALL), ("RET", OP_RET), ("STRUCT", OP_STRUCT), ("NULLSLOT", OP_NULLSLOT),
    ("NULLV", OP_NULLV), ("BOOL", OP_BOOL), ("INT", OP_INT), ("LONG", OP_LONG), ("LONG_MUL", OP_LONG_MUL),
    ("VARINT_F", OP_VARINT_F), ("VARINT_D", OP_VARINT_D), ("FLOAT", OP_FLOAT), ("FLOAT_D", OP_FLOAT_D),
    ("DOUBLE", OP_DOUBLE), ("BYTES", OP_BYTES), ("STRING", OP_STRING), ("FIXED", OP_FIXED),
    ("UUID_FIXED", OP_UUID_FIXED), ("DEC_BYTES", OP_DEC_BYTES), ("DEC_FIXED", OP_DEC_FIXED), ("ENUM", OP_ENUM),
    ("SKIP_VARINT", OP_SKIP_VARINT), ("SKIP_BYTES", OP_SKIP_BYTES), ("SKIP_N", OP_SKIP_N),
    ("NULLABLE", OP_NULLABLE), ("GOSUB", OP_GOSUB),
    ("FIXED_W", OP_FIXED_W), ("UUID_STR", OP_UUID_STR), ("DURATION", OP_DURATION),
    ("TIME", OP_TIME), ("SKIP", OP_SKIP))}
#: Column kinds.
KINDS = {"NULLT": K_NULLT, "BOOL": K_BOOL, "FIXEDW": K_FIXEDW, "BIN": K_BIN, "LIST": K_LIST, "STRUCT": K_STRUCT}
#: Error code -> what it means (the message's first words).
ERRORS = {
    E_EOF: "truncated value",
    E_VARINT: "varint longer than 10 bytes",
    E_INT_RANGE: "int out of the 32-bit range",
    E_NEG_LENGTH: "negative length",
    E_COUNT: "item count larger than the bytes left",
    E_ITEMS: "more items than max_items",
    E_UNION: "union branch index out of range",
    E_UTF8: "invalid UTF-8 in a string",
    E_ENUM: "enum symbol index out of range",
    E_ENUM_UNKNOWN: "enum symbol unknown to the reader schema, which has no default",
    E_BOOL: "boolean byte is neither 0 nor 1",
    E_DECIMAL: "decimal wider than 16 bytes",
    E_OVERFLOW: "timestamp out of the 64-bit microsecond range",
    E_FAIL: "cannot resolve the writer schema against the reader schema",
    E_TOO_BIG: "column larger than 2 GiB (decode fewer records at once)",
    E_MEMORY: "out of memory",
    E_DEPTH: "values nested deeper than 64 (arrays, maps, recursive records)",
    E_PRECISION: "decimal has more digits than its precision",
    E_UUID: "uuid string is not 8-4-4-4-12 (or 32) hex digits",
    E_TIME: "time of day outside [00:00, 24:00)",
    E_BLOCK_SIZE: "array or map block's byte size differs from the bytes of its items",
}
#: Loop indices kept per error (for the field path).
MAX_PATH = 8

cdef enum:
    MAX_DEPTH = 64
    MAX_CALLS = 64


cdef struct Frame:
    int32_t col
    int32_t body
    int64_t remaining
    int64_t items
    int64_t min_size
    # a block written with a negative count carries its byte size: where its items must end
    # (NULL: a block without one), checked when the block's last item is read
    const uint8_t* block_end
    int64_t block_size


cdef struct Call:
    int32_t pc
    int restore  # 1: a default's constants (p, end, limit come back); 0: a subroutine on the data
    const uint8_t* p
    const uint8_t* end
    const uint8_t* limit


cdef struct Machine:
    const int32_t* prog
    const int32_t* aux
    const uint8_t* consts
    const uint8_t* data_end
    const uint8_t* consts_end
    Col* cols
    int ncols
    int32_t* count  # the column whose length a column's length is (itself, or a folded struct's first child's)
    int64_t max_items
    Frame stack[64]
    int depth
    Call calls[64]
    int ncalls
    int32_t err_pc
    const uint8_t* err_p
    int64_t err_detail
    # the records one call of _run decodes, one after the other: rec (the current one) up to
    # rec_end, record i's program at entry[i] (-1: a null record, null_entry), its bytes at
    # base + starts[i] (lengths[i] of them)
    const int32_t* entry
    const int64_t* starts
    const int64_t* lengths
    const uint8_t* base
    int32_t null_entry
    Py_ssize_t rec
    Py_ssize_t rec_end


# ---------------------------------------------------------------- reading

include "_reading.pxi"

include "_skipping.pxi"


cdef int _run(Machine* m) noexcept nogil:
    """Decode records ``m.rec`` up to ``m.rec_end`` (the record loop is here, so that a record
    costs no call); E_OK when all are done, else the error of record ``m.rec``, which stops."""
    cdef int32_t pc
    cdef const uint8_t* p
    cdef const uint8_t* end
    cdef const int32_t* ins
    cdef const uint8_t* at
    cdef Col* c
    cdef Frame* f
    cdef int e
    cdef int64_t v = 0, size = 0
    cdef int32_t op
    cdef float fv
    cdef double dv
    cdef int k
    cdef uint8_t text[36]
    cdef const uint8_t* q
    cdef const uint8_t* where
    cdef int64_t vs
    cdef const int32_t* prog = m.prog
    cdef const int32_t* aux = m.aux
    cdef Col* cols = m.cols
    # the end of the memory p reads (the table's bytes, or the constants while a default is
    # read): short values are copied 16 bytes at a time when that much is readable from p
    cdef const uint8_t* limit = m.data_end
    if m.entry[m.rec] >= 0:
        pc = m.entry[m.rec]
        p = m.base + m.starts[m.rec]
        end = p + m.lengths[m.rec]
    else:
        pc = m.null_entry
        p = end = m.base
    m.depth = 0
    m.ncalls = 0
    m.err_detail = 0
    while True:
        ins = prog + 4 * pc
        op = ins[0]
        at = p
        if op <= OP_NULLABLE:
            if p < end and p[0] < 0x80:
                v = <int64_t>(p[0] >> 1) ^ -<int64_t>(p[0] & 1)
                p += 1
            else:
                q = p
                e = _varint(&q, end, &vs)  # the slow path: p's own address is never taken
                if e:
                    break
                p = q
                v = vs
        if op == OP_LONG:
            c = cols + ins[1]
            if c.n >= c.cap and _grow(c):
                e = E_MEMORY
                break
            if c.has_valid:
                c.valid[c.n >> 3] |= <uint8_t>(1 << (c.n & 7))
            (<int64_t*>c.vals)[c.n] = v
            c.n += 1
            pc += 1
        elif op == OP_INT:
            if v < -2147483648 or v > 2147483647:
                m.err_detail = v
                e = E_INT_RANGE
                break
            c = cols + ins[1]
            if c.n >= c.cap and _grow(c):
                e = E_MEMORY
                break
            if c.has_valid:
                c.valid[c.n >> 3] |= <uint8_t>(1 << (c.n & 7))
            (<int32_t*>c.vals)[c.n] = <int32_t>v
            c.n += 1
            pc += 1
        elif op == OP_STRING or op == OP_BYTES:
            size = v
            e = _length(m, size, p, end)
            if e:
                break
            if op == OP_STRING and not _utf8_ok(p, size, limit):
                e = E_UTF8
                break
            c = cols + ins[1]
            if c.n >= c.cap and _grow(c):
                e = E_MEMORY
                break
            if c.has_valid:
                c.valid[c.n >> 3] |= <uint8_t>(1 << (c.n & 7))
            e = _put_bytes(c, p, size, limit)
            if e:
                break
            p += size
            pc += 1
        elif op == OP_TIME:
            # a time of day (ins[2]: 0 time-millis into int32, 1 time-micros into int64), checked
            # against a day as Arrow's time32/time64 require
            q = p
            e = _varint(&q, end, &vs)
            if e:
                break
            p = q
            if vs < 0 or (ins[2] and vs >= 86400000000LL) or (not ins[2] and vs >= 86400000):
                m.err_detail = vs
                e = E_TIME
                break
            c = cols + ins[1]
            if _slot(c, 1):
                e = E_MEMORY
                break
            if ins[2]:
                (<int64_t*>c.vals)[c.n] = vs
            else:
                (<int32_t*>c.vals)[c.n] = <int32_t>vs
            c.n += 1
            pc += 1
        elif op == OP_UUID_STR:
            # a uuid string as its 16 bytes (its length read here: not one of the varint ops above)
            q = p
            e = _varint(&q, end, &vs)
            if e:
                break
            p = q
            size = vs
            e = _length(m, size, p, end)
            if e:
                break
            c = cols + ins[1]
            if _slot(c, 1):
                e = E_MEMORY
                break
            if not _uuid_bytes(c.vals + c.n * 16, p, size):
                m.err_detail = size
                e = E_UUID
                break
            c.n += 1
            p += size
            pc += 1
        elif op == OP_STRUCT:
            c = cols + ins[1]
            if c.n >= c.cap and _grow(c):
                e = E_MEMORY
                break
            if c.has_valid:
                c.valid[c.n >> 3] |= <uint8_t>(1 << (c.n & 7))
            c.n += 1
            pc += 1
        elif op == OP_UNION:
            if v < 0 or v >= ins[1]:
                m.err_detail = v
                e = E_UNION
                break
            pc = aux[ins[2] + v]
        elif op == OP_NULLABLE:
            # a writer union of null and one type whose value is the next instruction
            if v == ins[1]:
                e = _null_slot(cols + ins[2])
                if e:
                    break
                pc += 2
            elif v == 1 - ins[1]:
                pc += 1
            else:
                m.err_detail = v
                e = E_UNION
                break
        elif op == OP_JUMP:
            pc = ins[1]
        elif op == OP_NULLSLOT:
            e = _null_slot(cols + ins[1])
            if e:
                break
            pc += 1
        elif op == OP_DOUBLE or op == OP_FLOAT or op == OP_FLOAT_D:
            size = 8 if op == OP_DOUBLE else 4
            e = _length(m, size, p, end)
            if e:
                break
            c = cols + ins[1]
            if _slot(c, 1):
                e = E_MEMORY
                break
            if op == OP_FLOAT_D:
                memcpy(&fv, p, 4)
                (<double*>c.vals)[c.n] = fv
            elif op == OP_DOUBLE:
                memcpy(c.vals + c.n * 8, p, 8)
            else:
                memcpy(c.vals + c.n * 4, p, 4)
            p += size
            c.n += 1
            pc += 1
        elif op == OP_LONG_MUL:
            if ins[2] == 1000 and (v > <int64_t>9223372036854775LL or v < -<int64_t>9223372036854775LL) or \
                    ins[2] != 1000 and (v > INT64_MAX // ins[2] or v < (-INT64_MAX - 1) // ins[2]):
                m.err_detail = v
                e = E_OVERFLOW
                break
            c = cols + ins[1]
            if _slot(c, 1):
                e = E_MEMORY
                break
            (<int64_t*>c.vals)[c.n] = v * ins[2]
            c.n += 1
            pc += 1
        elif op == OP_ENUM:
            if v < 0 or v >= ins[3]:
                m.err_detail = v
                e = E_ENUM
                break
            if aux[ins[2] + 2 * v] < 0:
                m.err_detail = v
                e = E_ENUM_UNKNOWN
                break
            c = cols + ins[1]
            if _slot(c, 1):
                e = E_MEMORY
                break
            e = _put_bytes(c, m.consts + aux[ins[2] + 2 * v], aux[ins[2] + 2 * v + 1], m.consts_end)
            if e:
                break
            pc += 1
        elif op == OP_ARRAY:
            if m.depth >= MAX_DEPTH:
                e = E_DEPTH
                break
            f = &m.stack[m.depth]
            if p < end and p[0] < 0x80 and not (p[0] & 1) and ins[3] > 0 and (p[0] >> 1) * <int64_t>ins[3] <= end - p - 1:
                v = p[0] >> 1  # a one-byte count that fits the bytes left: the common case
                p += 1
                f.block_end = NULL
            else:
                q = _count(m, p, end, ins[3], 0, &vs, f, &e)
                if q == NULL:
                    break
                p = q
                v = vs
            if v == 0:
                if ins[1] >= 0:
                    c = cols + ins[1]
                    if _slot(c, 1):
                        e = E_MEMORY
                        break
                    c.offs[c.n + 1] = <int32_t>cols[m.count[ins[1] + 1]].n
                    c.n += 1
                pc = ins[2]
            else:
                m.depth += 1
                f.col = ins[1]
                f.body = pc + 1
                f.remaining = v
                f.items = 0
                f.min_size = ins[3]
                pc += 1
        elif op == OP_LOOP:
            f = &m.stack[m.depth - 1]
            f.items += 1
            f.remaining -= 1
            if f.remaining > 0:
                pc = f.body
                continue
            if f.block_end != NULL and p != f.block_end:  # (corrupt) where readers skipping by size go elsewhere
                m.err_detail = f.block_size
                e = E_BLOCK_SIZE
                break
            if p < end and p[0] == 0:  # the end of the items: the common case
                v = 0
                p += 1
            else:
                q = _count(m, p, end, f.min_size, f.items, &vs, f, &e)
                if q == NULL:
                    break
                p = q
                v = vs
            if v > 0:
                f.remaining = v
                pc = f.body
                continue
            if f.col >= 0:
                c = cols + f.col
                if ins[1]:  # a map's: one entry per key, the last value where the key first stood
                    e = _keep_last_entries(cols, m.ncols, m.count, f.col + 1, f.col + 2, c.offs[c.n])
                    if e:
                        break
                vs = cols[m.count[f.col + 1]].n
                if vs > INT32_MAX:
                    e = E_TOO_BIG
                    break
                if _slot(c, 1):
                    e = E_MEMORY
                    break
                c.offs[c.n + 1] = <int32_t>vs
                c.n += 1
            m.depth -= 1
            pc += 1
        elif op == OP_BOOL:
            if p >= end:
                m.err_detail = 1
                e = E_EOF
                break
            if p[0] > 1:
                m.err_detail = p[0]
                e = E_BOOL
                break
            c = cols + ins[1]
            if _slot(c, 1):
                e = E_MEMORY
                break
            if p[0]:
                c.vals[c.n >> 3] |= <uint8_t>(1 << (c.n & 7))
            else:
                c.vals[c.n >> 3] &= <uint8_t>~(1 << (c.n & 7))
            c.n += 1
            p += 1
            pc += 1
        elif op == OP_VARINT_F or op == OP_VARINT_D:
            c = cols + ins[1]
            if _slot(c, 1):
                e = E_MEMORY
                break
            if op == OP_VARINT_F:
                (<float*>c.vals)[c.n] = <float>v
            else:
                (<double*>c.vals)[c.n] = <double>v
            c.n += 1
            pc += 1
        elif op == OP_FIXED or op == OP_UUID_FIXED or op == OP_DEC_FIXED or op == OP_DEC_BYTES:
            size = v if op == OP_DEC_BYTES else ins[2]
            e = _length(m, size, p, end)
            if e:
                break
            c = cols + ins[1]
            if _slot(c, 1):
                e = E_MEMORY
                break
            if op == OP_FIXED:
                e = _put_bytes(c, p, size, limit)
                if e:
                    break
            elif op == OP_UUID_FIXED:
                v = 0
                for k in range(16):
                    if k == 4 or k == 6 or k == 8 or k == 10:
                        text[v] = 45  # '-'
                        v += 1
                    text[v] = _HEX[p[k] >> 4]
                    text[v + 1] = _HEX[p[k] & 15]
                    v += 2
                e = _put_bytes(c, text, 36, text + 36)
                if e:
                    break
            else:
                if size > 16:
                    m.err_detail = size
                    e = E_DECIMAL
                    break
                _decimal(c.vals + 16 * c.n, p, size)
                if ins[3] > 0 and ins[3] <= 38 and not _fits(c.vals + 16 * c.n, ins[3]):
                    m.err_detail = size
                    e = E_PRECISION
                    break
                c.n += 1
            p += size
            pc += 1
        elif op == OP_FIXED_W or op == OP_DURATION:
            # a fixed of ins[2] bytes into a fixed-width column (Arrow's fixed_size_binary), or a
            # duration (months, days, millis: uint32 little-endian) as month_day_nano_interval
            e = _length(m, ins[2], p, end)
            if e:
                break
            c = cols + ins[1]
            if _slot(c, 1):
                e = E_MEMORY
                break
            if op == OP_FIXED_W:
                memcpy(c.vals + c.n * c.width, p, ins[2])
            else:
                e = _duration(m, c.vals + c.n * 16, p)
                if e:
                    break
            c.n += 1
            p += ins[2]
            pc += 1
        elif op == OP_NULLV:
            c = cols + ins[1]
            c.n += 1
            pc += 1
        elif op == OP_SKIP_VARINT:
            pc += 1
        elif op == OP_SKIP_BYTES:
            size = v
            e = _length(m, size, p, end)
            if e:
                break
            p += size
            pc += 1
        elif op == OP_SKIP_N:
            e = _length(m, ins[1], p, end)
            if e:
                break
            p += ins[1]
            pc += 1
        elif op == OP_SKIP:
            # values the reader does not keep, walked by their skip tree in aux (_skipping.pxi)
            q = p
            e = _skip_tree(m, aux, ins[1], &q, end, &where)
            if e:
                at = where
                break
            p = q
            pc += 1
        elif op == OP_CALL:
            if m.ncalls >= MAX_CALLS:
                e = E_DEPTH
                break
            m.calls[m.ncalls].pc = pc + 1
            m.calls[m.ncalls].p = p
            m.calls[m.ncalls].end = end
            m.calls[m.ncalls].limit = limit
            m.calls[m.ncalls].restore = 1
            m.ncalls += 1
            p = m.consts + ins[2]
            end = p + ins[3]
            limit = m.consts_end
            pc = ins[1]
        elif op == OP_GOSUB:
            # a subroutine reading on from p (a recursive type skipped past the reader's depth)
            if m.ncalls >= MAX_CALLS:
                e = E_DEPTH
                break
            m.calls[m.ncalls].pc = pc + 1
            m.calls[m.ncalls].restore = 0
            m.ncalls += 1
            pc = ins[1]
        elif op == OP_RET:
            m.ncalls -= 1
            pc = m.calls[m.ncalls].pc
            if m.calls[m.ncalls].restore:
                p = m.calls[m.ncalls].p
                end = m.calls[m.ncalls].end
                limit = m.calls[m.ncalls].limit
        elif op == OP_END:
            m.rec += 1
            if m.rec >= m.rec_end:
                return E_OK
            if m.entry[m.rec] >= 0:  # the next record, as at the start
                pc = m.entry[m.rec]
                p = m.base + m.starts[m.rec]
                end = p + m.lengths[m.rec]
            else:
                pc = m.null_entry
                p = end = m.base
            limit = m.data_end
            m.depth = 0
            m.ncalls = 0
            m.err_detail = 0
        elif op == OP_FAIL:
            m.err_detail = ins[1]
            e = E_FAIL
            break
        else:
            e = E_FAIL
            m.err_detail = -1
            break
    m.err_pc = pc
    m.err_p = at
    return e


cdef int _folded(const int32_t[::1] coldesc, int ncols, int c) noexcept:
    """Whether column ``c`` is a *folded* struct: one without validity and with children, for
    which the compiler emits no instruction (see ``folded`` in ``kbatch.values.avro._compile``);
    its length is its first child's (the next column), set when the records are done."""
    return coldesc[4 * c] == K_STRUCT and coldesc[4 * c + 3] == 0 and c + 1 < ncols \
        and coldesc[4 * (c + 1) + 2] == c


def run(
    const int32_t[::1] program,
    const int32_t[::1] aux,
    const uint8_t[::1] consts,
    const int32_t[::1] coldesc,
    const uint8_t[::1] data,
    const int64_t[::1] starts,
    const int64_t[::1] lengths,
    const int32_t[::1] entry,
    int32_t null_entry,
    bint stop_on_error=False,
    int64_t max_items=1 << 24,
):
    """Run ``program`` for each record: ``entry[i]`` is record i's first instruction, or -1 for
    a record that is null (a null value, or one whose error is already known).

    Returns ``(columns, errors, records_done)``: per column ``(length, validity, values, offsets,
    data)`` (buffers or None), the errors as an array of :data:`ERROR_DTYPE` (``position``
    relative to the body start), and how many records were decoded (fewer than all only with
    ``stop_on_error``).
    """
    cdef int ncols = len(coldesc) // 4
    cdef Py_ssize_t nrec = len(entry)
    cdef Py_ssize_t nprog = len(program) // 4
    if len(starts) != nrec or len(lengths) != nrec:
        raise ValueError("starts, lengths and entry must have one length")
    if ncols < 1:
        raise ValueError("no columns")
    cdef Py_ssize_t i
    cdef int c
    cdef int64_t body_bytes = 0, ndata = len(data)
    for i in range(nrec):  # the ranges checked, and the bytes of all the bodies counted
        if entry[i] >= 0:
            if entry[i] >= nprog or starts[i] < 0 or lengths[i] < 0 or lengths[i] > ndata - starts[i]:
                raise ValueError(f"record {i}: entry or (start, length) out of range")
            body_bytes += lengths[i]
    for c in range(ncols):
        if coldesc[4 * c + 2] >= c or (c > 0 and coldesc[4 * c + 2] < 0):
            raise ValueError("columns must be in pre-order with the root first")
    cdef Machine m
    m.prog = &program[0]
    m.aux = &aux[0] if len(aux) else NULL
    m.consts = &consts[0] if len(consts) else NULL
    m.ncols = ncols
    m.max_items = max_items
    m.cols = <Col*>calloc(ncols, sizeof(Col))
    cdef int64_t* target = <int64_t*>calloc(ncols, sizeof(int64_t))
    cdef int* per_record = <int*>calloc(ncols, sizeof(int))
    m.count = <int32_t*>calloc(ncols, sizeof(int32_t))
    cdef int par, one_per_record
    cdef int64_t data_cap
    cdef ErrRow* errs = NULL
    cdef int64_t nerr = 0, errcap = 0
    cdef ErrRow* row
    cdef void* q
    cdef int e, k, oom = 0
    cdef Py_ssize_t done = 0
    cdef const uint8_t* base = &data[0] if len(data) else NULL
    m.entry = &entry[0] if nrec else NULL
    m.starts = &starts[0] if nrec else NULL
    m.lengths = &lengths[0] if nrec else NULL
    m.base = base
    m.null_entry = null_entry
    cdef int32_t no_entry = -1
    m.data_end = base + len(data) if base != NULL else NULL
    m.consts_end = m.consts + len(consts) if m.consts != NULL else NULL
    if m.cols == NULL or target == NULL or per_record == NULL or m.count == NULL:
        free(m.cols)
        free(target)
        free(per_record)
        free(m.count)
        raise MemoryError()
    for c in range(ncols):
        m.cols[c].kind = coldesc[4 * c]
        m.cols[c].width = coldesc[4 * c + 1]
        m.cols[c].parent = coldesc[4 * c + 2]
        m.cols[c].has_valid = coldesc[4 * c + 3]
        m.cols[c].folded = _folded(coldesc, ncols, c)
        if m.cols[c].kind == K_BIN or m.cols[c].kind == K_LIST:
            m.cols[c].offs = <int32_t*>calloc(1, sizeof(int32_t))
            if m.cols[c].offs == NULL:
                oom = 1
        # a column with only structs above it has one value per record: room for them at once;
        # a string column of those, for 16 bytes a value but never more than all the bodies
        # hold (the buffers then grow by doubling: nothing is sized by a count read from a value)
        par = m.cols[c].parent
        one_per_record = c == 0 or (par >= 0 and m.cols[par].kind == K_STRUCT and per_record[par])
        per_record[c] = one_per_record
        if one_per_record and nrec > 64 and not oom:
            if _reserve(&m.cols[c], nrec):
                oom = 1
            data_cap = min(16 * nrec, body_bytes, <int64_t>INT32_MAX) + 16
            if m.cols[c].kind == K_BIN and not oom:
                m.cols[c].data = <uint8_t*>malloc(data_cap)
                if m.cols[c].data == NULL:
                    oom = 1
                else:
                    m.cols[c].data_cap = data_cap
    for c in range(ncols - 1, -1, -1):
        m.count[c] = m.count[c + 1] if m.cols[c].folded else c
    try:
        with nogil:
            if not oom:
                i = 0
                while i < nrec:
                    m.rec = i
                    m.rec_end = nrec
                    e = _run(&m)
                    if e == E_OK:
                        done = nrec
                        break
                    i = m.rec  # the record that failed
                    done = i + 1
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
                    row.pc = m.err_pc
                    row.position = m.err_p - (base + starts[i]) if entry[i] >= 0 else -1
                    row.detail = m.err_detail
                    for k in range(8):
                        row.index[k] = m.stack[k].items if k < m.depth else -1
                    _rollback(m.cols, ncols, i, target)
                    m.entry = &no_entry  # the record becomes a null: its slots at null_entry
                    m.rec = 0
                    m.rec_end = 1
                    e = _run(&m)
                    m.entry = &entry[0]
                    if e != E_OK or row.code == E_MEMORY:
                        oom = 1
                        break
                    if stop_on_error:
                        break
                    i += 1
        if oom:
            raise MemoryError("out of memory decoding values")
        for c in range(ncols - 1, -1, -1):  # a folded struct has as many slots as its first child
            if m.cols[c].folded:
                m.cols[c].n = m.cols[c + 1].n
        columns = _take_all(m.cols, ncols)
        errors = _errors(errs, nerr)
        if nerr:
            errs = NULL  # the array owns them
        return columns, errors, done
    finally:
        _free_cols(m.cols, ncols)
        free(m.count)
        free(target)
        free(per_record)
        free(errs)


cdef inline int _frame(const uint8_t* buf, int64_t s, int64_t size, int32_t* ids, int64_t* guid_at,
                       int too_short, int bad_magic) noexcept nogil:
    """One registry frame at ``buf[s : s + size]``: its id (0x00 + big-endian int32) or GUID
    position (0x01 + 16 bytes); returns the frame's size, or minus the error code."""
    cdef uint8_t b
    if size <= 0:
        return -too_short
    b = buf[s]
    if b == 0:
        if size < 5:
            return -too_short
        ids[0] = <int32_t>((<uint32_t>buf[s + 1] << 24) | (<uint32_t>buf[s + 2] << 16)
                           | (<uint32_t>buf[s + 3] << 8) | <uint32_t>buf[s + 4])
        return 5
    if b == 1:
        if size < 17:
            return -too_short
        guid_at[0] = s + 1
        return 17
    return -bad_magic


def read_frames(
    const uint8_t[::1] buf,
    const int64_t[::1] start,
    const int64_t[::1] length,
    const int64_t[::1] h_start,
    const int64_t[::1] h_length,
    int32_t[::1] ids,
    int64_t[::1] guid_at,
    uint8_t[::1] error,
    int64_t[::1] body_start,
    int64_t[::1] body_length,
    int too_short,
    int bad_magic,
    int bad_header,
):
    """The registry frames of every value (see ``kbatch.values._framing``), in one pass: a value
    (``length >= 0``; -1 is null) whose header (``h_length >= 0``; empty arrays: no headers)
    gives the id or GUID is all body, else its 0x00/0x01 prefix does and the body follows it.
    Fills every row of ``ids`` (-1: none), ``guid_at`` (-1: none), ``error``, ``body_start``
    and ``body_length`` (-1: null or no frame). Returns ``(errors, guids)``: how many values have
    a framing error, and how many are framed by GUID. Raises ValueError when a range lies
    outside ``buf``."""
    cdef Py_ssize_t n = len(start), i
    cdef int64_t s, size, nbuf = len(buf)
    cdef int64_t nerr = 0, nguid = 0
    cdef int r, bad = 0, headers = len(h_start) != 0
    cdef const uint8_t* b = &buf[0] if nbuf else NULL
    if len(length) != n or len(ids) != n or len(guid_at) != n or len(error) != n or len(body_start) != n \
            or len(body_length) != n or (headers and (len(h_start) != n or len(h_length) != n)):
        raise ValueError("arrays of different lengths")
    with nogil:
        for i in range(n):
            ids[i] = -1
            guid_at[i] = -1
            error[i] = 0
            s = start[i]
            size = length[i]
            body_start[i] = s
            body_length[i] = size
            if size < 0:
                continue  # a null value
            if s < 0 or size > nbuf - s:
                bad = 1
                break
            if headers and h_length[i] >= 0:  # a null header is as none (DualSchemaIdDeserializer)
                if h_start[i] < 0 or h_length[i] > nbuf - h_start[i]:
                    bad = 1
                    break
                r = _frame(b, h_start[i], h_length[i], &ids[i], &guid_at[i], bad_header, bad_header)
                if r > 0:
                    r = 0  # the value is all body
            else:
                r = _frame(b, s, size, &ids[i], &guid_at[i], too_short, bad_magic)
            if r < 0:
                error[i] = <uint8_t>(-r)
                ids[i] = -1
                guid_at[i] = -1
                body_length[i] = -1
                nerr += 1
                continue
            body_start[i] = s + r
            body_length[i] = size - r
            if guid_at[i] >= 0:
                nguid += 1
    if bad:
        raise ValueError("a (start, length) range lies outside the data buffer")
    return nerr, nguid
