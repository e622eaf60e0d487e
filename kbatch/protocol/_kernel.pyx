# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Optional C kernel for the hottest loop of kbatch.protocol: arrays of flat structs.

The generated Python decoders call :func:`decode_struct_array` for an array
whose elements hold only fixed-size fields, uuids, strings, bytes, records,
arrays of fixed-size integers and arrays of such structs, followed (in
flexible versions) by an empty tagged-field section -- Metadata topics (with their
partitions) and brokers, Fetch partitions, ApiVersions keys, ListOffsets partitions and the
like. It returns ``None`` whenever anything is unusual (bytes missing, a null
where none is allowed, a tagged field present, bad UTF-8, a varint longer
than 5 bytes, a non-empty nested array); the Python decoder then decodes the
same bytes itself and raises the precise error, so the kernel never decides
what an error says. Arrays of integers become tuples, as in the Python decoder.

Program: a tuple ``(ops, keys, template, subprograms)``. ``ops`` is a bytes
object, one byte per untagged field (``kind | flags``); ``keys`` the dict key
of each; ``template`` a dict with every key of the element in order (tagged
fields at their absent value, all immutable), which each element starts as a
copy of; ``subprograms`` the programs of nested struct arrays, in order.

    kind (low 5 bits)  0 bool 1 int8 2 int16 3 uint16 4 int32 5 uint32 6 int64
                       7 float64 8 string 9..14 arrays of int8..int64 (8 + the
                       element kind) 15 records 16 bytes 17 array of structs
                       that must be null or empty 18 uuid 19 array of structs
                       with a program of their own (the next of ``subprograms``)
    0x20               compact (uvarint length + 1) instead of int16/int32
    0x40               nullable
"""

from cpython.dict cimport PyDict_Copy, PyDict_SetItem
from cpython.object cimport PyObject

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_New, PyTuple_SET_ITEM
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong, PyLong_FromUnsignedLong, PyLong_FromUnsignedLongLong
from cpython.float cimport PyFloat_FromDouble
from cpython.ref cimport Py_INCREF
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy

cdef inline uint16_t _u16(const uint8_t* p) noexcept nogil:
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])

cdef inline uint32_t _u32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]

cdef inline uint64_t _u64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>_u32(p) << 32) | _u32(p + 4)

# element sizes of the fixed kinds, indexed by op
cdef Py_ssize_t SIZES[8]
SIZES[:] = [1, 1, 2, 2, 4, 4, 8, 8]


cdef inline object _fixed(int kind, const uint8_t* p):
    cdef uint64_t bits
    cdef double d
    if kind == 0:
        return p[0] != 0
    elif kind == 1:
        return PyLong_FromLong(<int8_t>p[0])
    elif kind == 2:
        return PyLong_FromLong(<int16_t>_u16(p))
    elif kind == 3:
        return PyLong_FromLong(_u16(p))
    elif kind == 4:
        return PyLong_FromLong(<int32_t>_u32(p))
    elif kind == 5:
        return PyLong_FromUnsignedLong(_u32(p))
    elif kind == 6:
        return PyLong_FromLongLong(<int64_t>_u64(p))
    else:
        bits = _u64(p)
        memcpy(&d, &bits, 8)
        return PyFloat_FromDouble(d)


cdef inline Py_ssize_t _uvarint(const uint8_t* buf, Py_ssize_t pos, Py_ssize_t end, uint32_t* out) noexcept nogil:
    """Read an unsigned varint (at most 5 bytes, 32 bits); return the new position or -1."""
    cdef uint32_t value = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if pos >= end or shift > 28:
            return -1
        b = buf[pos]
        pos += 1
        if shift == 28 and b > 0x0F:
            return -1
        value |= <uint32_t>(b & 0x7F) << shift
        if not (b & 0x80):
            out[0] = value
            return pos
        shift += 7


import uuid as _uuid

cdef object _new = object.__new__
cdef object _setattr = object.__setattr__
cdef object _UUID = _uuid.UUID
cdef object _SAFE_UNKNOWN = _uuid.SafeUUID.unknown


cdef object _make_uuid(const uint8_t* p):
    cdef object u = _new(_UUID)
    _setattr(u, "int", (PyLong_FromUnsignedLongLong(_u64(p)) << 64) | PyLong_FromUnsignedLongLong(_u64(p + 8)))
    _setattr(u, "is_safe", _SAFE_UNKNOWN)
    return u


cdef object _array(const uint8_t* buf, Py_ssize_t* ppos, Py_ssize_t end, Py_ssize_t count, tuple program,
                   bint tagged, object view, object records):
    """Decode ``count`` structs with ``program``; None when the Python decoder must take over."""
    cdef bytes ops = <bytes>PyTuple_GET_ITEM(program, 0)
    cdef tuple keys = <tuple>PyTuple_GET_ITEM(program, 1)
    cdef dict template = <dict>PyTuple_GET_ITEM(program, 2)
    cdef tuple subs = <tuple>PyTuple_GET_ITEM(program, 3)
    cdef Py_ssize_t nops = len(ops)
    cdef const uint8_t* prog = ops
    cdef Py_ssize_t pos = ppos[0]
    cdef Py_ssize_t i, j, k, n, size, sub_i
    cdef int op, kind
    cdef uint32_t uv
    cdef object out, item, value, elems
    if count > end - pos or len(keys) != nops or nops == 0:
        return None
    out = PyList_New(count)
    for i in range(count):
        item = PyDict_Copy(template)
        sub_i = 0
        for j in range(nops):
            op = prog[j]
            kind = op & 0x1F
            if kind < 8:
                size = SIZES[kind]
                if pos + size > end:
                    return None
                value = _fixed(kind, buf + pos)
                pos += size
            elif kind == 18:  # uuid
                if pos + 16 > end:
                    return None
                value = _make_uuid(buf + pos)
                pos += 16
            else:
                # every other kind starts with a length or count
                if op & 0x20:
                    pos = _uvarint(buf, pos, end, &uv)
                    if pos < 0:
                        return None
                    n = <Py_ssize_t>uv - 1
                elif kind == 8:
                    if pos + 2 > end:
                        return None
                    n = <int16_t>_u16(buf + pos)
                    pos += 2
                else:
                    if pos + 4 > end:
                        return None
                    n = <int32_t>_u32(buf + pos)
                    pos += 4
                if n < 0:
                    if not (op & 0x40):
                        return None
                    value = None
                    if kind == 19:
                        sub_i += 1
                elif kind == 8:  # string
                    if n > 32767 or pos + n > end:
                        return None
                    try:
                        value = PyUnicode_DecodeUTF8(<const char*>(buf + pos), n, NULL)
                    except UnicodeDecodeError:
                        return None
                    pos += n
                elif kind <= 14:  # array of integers
                    size = SIZES[kind - 8]
                    if n > (end - pos) // size:
                        return None
                    elems = PyTuple_New(n)
                    for k in range(n):
                        value = _fixed(kind - 8, buf + pos)
                        Py_INCREF(value)
                        PyTuple_SET_ITEM(elems, k, value)
                        pos += size
                    # a tuple of ints cannot be part of a cycle: keep it (and the
                    # dict holding it) away from the cyclic GC, as CPython's own
                    # collector would on its next pass
                    PyObject_GC_UnTrack(<void*>elems)
                    value = elems
                elif kind == 15 or kind == 16:  # records, bytes
                    if pos + n > end:
                        return None
                    if kind == 16:
                        value = PyBytes_FromStringAndSize(<const char*>(buf + pos), n)
                    else:
                        value = _new(records)
                        _setattr(value, "view", view[pos:pos + n])
                    pos += n
                elif kind == 17:  # array of structs, only when empty
                    if n != 0:
                        return None
                    value = []
                elif kind == 19:  # array of flat structs: recurse
                    value = _array(buf, &pos, end, n, <tuple>PyTuple_GET_ITEM(subs, sub_i), tagged, view, records)
                    sub_i += 1
                    if value is None:
                        return None
                else:
                    return None
            PyDict_SetItem(item, <object>PyTuple_GET_ITEM(keys, j), value)
        if tagged:
            if pos >= end or buf[pos] != 0:
                return None  # tagged fields present: the Python decoder handles them
            pos += 1
        Py_INCREF(item)
        PyList_SET_ITEM(out, i, item)
    ppos[0] = pos
    return out


def decode_struct_array(const uint8_t[::1] data, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count,
                        tuple program, bint tagged, object view, type records):
    """Decode ``count`` structs from ``data[pos:end]``; return ``(list, pos)`` or None.

    ``program`` is ``(ops, keys, template, subprograms)``; ``view`` a
    ``memoryview`` of the same bytes: ``records`` values are ``records``
    instances (the :class:`~kbatch.protocol.Records` class) holding a slice of it.
    """
    cdef const uint8_t* buf = &data[0] if data.shape[0] > 0 else NULL
    cdef object out
    if end > data.shape[0] or pos < 0 or pos > end or count < 0 or buf == NULL or len(program) != 4:
        return None
    out = _array(buf, &pos, end, count, program, tagged, view, records)
    if out is None:
        return None
    return out, pos
