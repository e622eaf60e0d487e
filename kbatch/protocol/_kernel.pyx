# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""C parts of kbatch.protocol: the :class:`Records` value type and the struct-array kernels.

:class:`Records` is the value of a ``records`` field: a zero-copy slice of
the decoded buffer that exports the buffer protocol itself (on every Python
version, not only 3.12+ where ``__buffer__`` exists in Python).

The generated Python encoders call :func:`encode_struct_array` for the same
arrays, with a program of the same kinds (see the comment above it).

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

Program: a tuple ``(ops, keys, template, subprograms, wrap)``. ``ops`` is a
bytes object, one byte per untagged field (``kind | flags``); ``keys`` the
dict key of each; ``template`` a dict with every key of the element in order
(tagged fields at their absent value, all immutable), which each element
starts as a copy of; ``subprograms`` the programs of nested struct arrays, in
order; ``wrap`` None or a callable applied to the finished list (arrays with
``mapKey`` fields become :class:`~kbatch.protocol.KeyedList` objects).

    kind (low 5 bits)  0 bool 1 int8 2 int16 3 uint16 4 int32 5 uint32 6 int64
                       7 float64 8 string 9..14 arrays of int8..int64 (8 + the
                       element kind) 15 records 16 bytes 17 array of structs
                       that must be null or empty 18 uuid 19 array of structs
                       with a program of their own (the next of ``subprograms``)
    0x20               compact (uvarint length + 1) instead of int16/int32
    0x40               nullable
"""

cimport cython
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_FillInfo, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_Copy, PyDict_SetItem
from cpython.float cimport PyFloat_FromDouble
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.long cimport PyLong_FromLong, PyLong_FromLongLong, PyLong_FromUnsignedLong, PyLong_FromUnsignedLongLong
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.memoryview cimport PyMemoryView_FromObject, PyMemoryView_GET_BUFFER
from cpython.object cimport PyObject
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_New, PyTuple_SET_ITEM
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.limits cimport LLONG_MAX, LLONG_MIN
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, strcmp

from kbatch._wire cimport be16 as _u16, be32 as _u32, be64 as _u64  # big-endian, shared with _core

cdef extern from "Python.h":
    void PyObject_GC_UnTrack(void* op)


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


@cython.freelist(64)
cdef class Records:
    """The bytes of a ``records`` field, as a view into the message buffer.

    Decoding a message never copies its record batches: a ``records`` field
    becomes a :class:`Records` that points into the input and holds a buffer
    export on it (so the input stays alive and a ``bytearray`` cannot be
    resized under it). Call :meth:`tobytes` to detach.

    ``Records`` exports the buffer protocol (read-only unless the input is
    writable) on every Python version, so ``memoryview(r)``, ``bytes(r)``,
    ``kbatch.decode(r)``, ``socket.sendall(r)`` and the like take it as it is.
    It also supports ``len()``, equality with any bytes-like object and
    pickling (as a copy); :attr:`view` is a ``memoryview`` of the same bytes
    whose ``obj`` is the decoded input.

    Parameters
    ----------
    data : bytes-like
        A C-contiguous buffer holding the record batches (not copied).

    Examples
    --------
    >>> r = Records(b"abc")
    >>> len(r), bytes(r), r == b"abc", memoryview(r)[1:].tobytes()
    (3, b'abc', True, b'bc')
    """

    cdef Py_buffer _base  # an export of the whole input, held while self lives
    cdef Py_ssize_t _offset
    cdef Py_ssize_t _size

    def __init__(self, data):
        self._release()
        self._offset = self._size = 0
        PyObject_GetBuffer(data, &self._base, PyBUF_SIMPLE)
        self._size = self._base.len

    cdef inline void _release(self) noexcept:
        if <void*>self._base.obj != NULL:
            PyBuffer_Release(&self._base)  # also sets obj to NULL

    def __dealloc__(self):
        self._release()

    cdef inline const char* _ptr(self) noexcept:
        return <const char*>self._base.buf + self._offset

    def __getbuffer__(self, Py_buffer* buffer, int flags):
        PyBuffer_FillInfo(buffer, self, <void*>self._ptr(), self._size, self._base.readonly, flags)

    def __releasebuffer__(self, Py_buffer* buffer):
        pass

    @property
    def view(self):
        """A ``memoryview`` of the bytes (unsigned bytes, 1-D) into the decoded input."""
        if <void*>self._base.obj == NULL:  # Records.__new__ without __init__
            return memoryview(b"")
        cdef object whole = memoryview(<object>self._base.obj)
        if whole.format != "B" or whole.ndim != 1:
            whole = whole.cast("B")
        return whole[self._offset:self._offset + self._size]

    def __len__(self):
        return self._size

    def __bytes__(self):
        return PyBytes_FromStringAndSize(self._ptr(), self._size)

    def tobytes(self):
        """Return a copy of the bytes.

        Returns
        -------
        bytes
        """
        return PyBytes_FromStringAndSize(self._ptr(), self._size)

    def __eq__(self, other):
        cdef Records r
        if isinstance(other, Records):
            r = <Records>other
            return r._size == self._size and (self._size == 0 or memcmp(r._ptr(), self._ptr(), self._size) == 0)
        if isinstance(other, bytes):
            return len(<bytes>other) == self._size and (
                self._size == 0 or memcmp(<const char*><bytes>other, self._ptr(), self._size) == 0)
        try:
            return memoryview(self) == memoryview(other)
        except TypeError:
            return NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"<Records {self._size} bytes>"

    def __reduce__(self):
        return Records, (self.tobytes(),)

    def decode(self, **kwargs):
        """Decode the record batches with :func:`kbatch.decode`.

        Parameters
        ----------
        **kwargs
            Passed on to :func:`kbatch.decode` (e.g. ``verify_crc``).

        Returns
        -------
        kbatch.RecordTable
        """
        return _txn.decode(self, **kwargs)


cdef inline Records _slice(object whole, Py_ssize_t offset, Py_ssize_t size):
    """A :class:`Records` for ``whole[offset:offset + size]`` (``whole`` a 1-D byte buffer; unchecked)."""
    cdef Records r = Records.__new__(Records)
    PyObject_GetBuffer(whole, &r._base, PyBUF_SIMPLE)
    r._offset = offset
    r._size = size
    return r


def records_slice(object whole, Py_ssize_t offset, Py_ssize_t size):
    """A :class:`Records` for ``whole[offset:offset + size]``, not copied.

    Parameters
    ----------
    whole : bytes-like
        The decoded input (a 1-D buffer of bytes).
    offset, size : int
        The slice; checked against ``whole``.

    Returns
    -------
    Records
    """
    cdef Records r = Records(whole)
    if offset < 0 or size < 0 or offset + size > r._size:
        raise ValueError(f"slice {offset}:{offset + size} out of a {r._size}-byte buffer")
    r._offset = offset
    r._size = size
    return r


import uuid as _uuid

from kbatch.codec import _txn

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
                   bint tagged, object view):
    """Decode ``count`` structs with ``program``; None when the Python decoder must take over."""
    cdef bytes ops = <bytes>PyTuple_GET_ITEM(program, 0)
    cdef tuple keys = <tuple>PyTuple_GET_ITEM(program, 1)
    cdef dict template = <dict>PyTuple_GET_ITEM(program, 2)
    cdef tuple subs = <tuple>PyTuple_GET_ITEM(program, 3)
    cdef object wrap = <object>PyTuple_GET_ITEM(program, 4)
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
                        value = _slice(view, pos, n)
                    pos += n
                elif kind == 17:  # array of structs, only when empty
                    if n != 0:
                        return None
                    value = []
                elif kind == 19:  # array of flat structs: recurse
                    value = _array(buf, &pos, end, n, <tuple>PyTuple_GET_ITEM(subs, sub_i), tagged, view)
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
    if wrap is not None:
        out = wrap(out)
    return out


def decode_struct_array(const uint8_t[::1] data, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t count,
                        tuple program, bint tagged, object view):
    """Decode ``count`` structs from ``data[pos:end]``; return ``(list, pos)`` or None.

    ``program`` is ``(ops, keys, template, subprograms, wrap)``; ``view`` a
    1-D ``memoryview`` of the same bytes: ``records`` values are
    :class:`Records` slices of it.
    """
    cdef const uint8_t* buf = &data[0] if data.shape[0] > 0 else NULL
    cdef object out
    if end > data.shape[0] or pos < 0 or pos > end or count < 0 or buf == NULL or len(program) != 5:
        return None
    if view.nbytes != data.shape[0]:
        return None
    out = _array(buf, &pos, end, count, program, tagged, view)
    if out is None:
        return None
    return out, pos


# --------------------------------------------------------------------------- encode
#
# encode_struct_array() writes the elements of an array of flat structs (the
# count is already written by the generated Python) with a program like the
# decoder's: ``(ops, keys, defaults, subprograms, checks)``. ``defaults``
# holds the value of each untagged field when its key is missing; ``checks``
# the keys the kernel must find absent or at their default, as
# ``(key, mode, default)``: mode 0 a tagged struct (absent or None), 1 a
# tagged scalar (absent or == default), 2 a tagged array (absent or empty),
# 3 a field this version lacks (absent). Anything else -- a value of the wrong
# type or out of range, a tagged field to write, ``_unknown_tags`` -- makes it
# return None without having touched ``b`` or ``parts``, and the generated
# Python encodes the array itself (and raises the precise error).

cdef extern from "Python.h":
    # the same functions as cpython.*, declared without exception propagation:
    # a failed conversion means "let the Python encoder do it", not an error
    long long _as_longlong "PyLong_AsLongLong"(object o)
    unsigned long long _as_u64_mask "PyLong_AsUnsignedLongLongMask"(object o)
    double _as_double "PyFloat_AsDouble"(object o)
    int _is_true "PyObject_IsTrue"(object o)
    int _rich_eq "PyObject_RichCompareBool"(object a, object b, int op)
    const char* _as_utf8 "PyUnicode_AsUTF8AndSize"(object o, Py_ssize_t* size)
    int _get_buffer "PyObject_GetBuffer"(object o, Py_buffer* view, int flags)
    PyObject* _err_occurred "PyErr_Occurred"()
    # str keys cannot fail to hash: NULL means missing (and, unlike
    # PyDict_GetItem, no saving and restoring of the error state)
    PyObject* _dict_get "PyDict_GetItemWithError"(object d, object key)
    void _err_clear "PyErr_Clear"()
    int Py_EQ

# return codes of the encoders below (-2: a Python exception, e.g. MemoryError)
cdef enum:
    OK = 0
    FALLBACK = -1

cdef struct Out:
    char* data
    Py_ssize_t size
    Py_ssize_t cap


cdef int _reserve(Out* o, Py_ssize_t n) except -2:
    cdef Py_ssize_t cap
    cdef char* p
    if o.size + n <= o.cap:
        return OK
    cap = o.cap * 2
    if cap < o.size + n:
        cap = o.size + n
    if cap < 256:
        cap = 256
    p = <char*>PyMem_Realloc(o.data, cap)
    if p == NULL:
        raise MemoryError()
    o.data = p
    o.cap = cap
    return OK


cdef int _write_be(Out* o, uint64_t value, int size) except -2:
    """Write the low ``size`` bytes of ``value``, big-endian."""
    cdef int k
    _reserve(o, size)
    for k in range(size):
        o.data[o.size + k] = <char>(value >> (8 * (size - 1 - k)))
    o.size += size
    return OK


cdef int _write_uvarint(Out* o, uint64_t value) except -2:
    _reserve(o, 10)
    while value > 0x7F:
        o.data[o.size] = <char>((value & 0x7F) | 0x80)
        o.size += 1
        value >>= 7
    o.data[o.size] = <char>value
    o.size += 1
    return OK


cdef int _write_length(Out* o, int op, Py_ssize_t n, int size) except -2:
    """A length or count: uvarint n + 1 when compact, else ``size`` bytes (n = -1: null)."""
    if op & 0x20:
        return _write_uvarint(o, <uint64_t>(n + 1))
    return _write_be(o, <uint64_t>(<int64_t>n), size)


cdef int _write_bytes(Out* o, const char* p, Py_ssize_t n) except -2:
    _reserve(o, n)
    memcpy(o.data + o.size, p, n)
    o.size += n
    return OK


# inclusive ranges of the integer kinds, indexed by kind (0, bool, is unused)
cdef long long LO[7]
cdef long long HI[7]
LO[:] = [0, -(1 << 7), -(1 << 15), 0, -(1 << 31), 0, LLONG_MIN]
HI[:] = [1, (1 << 7) - 1, (1 << 15) - 1, (1 << 16) - 1, (1 << 31) - 1, (1 << 32) - 1, LLONG_MAX]


cdef int _encode_fixed(Out* o, int kind, object value) except -2:
    cdef long long n
    cdef double d
    cdef uint64_t bits
    cdef int truth
    if kind == 0:
        truth = _is_true(value)
        if truth < 0:
            _err_clear()
            return FALLBACK
        return _write_be(o, truth, 1)
    if kind == 7:
        d = _as_double(value)
        if d == -1.0 and _err_occurred() != NULL:
            _err_clear()
            return FALLBACK
        memcpy(&bits, &d, 8)
        return _write_be(o, bits, 8)
    n = _as_longlong(value)
    if n == -1 and _err_occurred() != NULL:
        _err_clear()
        return FALLBACK
    if n < LO[kind] or n > HI[kind]:
        return FALLBACK
    return _write_be(o, <uint64_t>n, <int>SIZES[kind])


cdef int _encode_buffer(Out* o, int op, object value, list splits, Py_ssize_t threshold) except -2:
    """bytes and records: length + bytes, or (big records) a split for a zero-copy part."""
    cdef Py_buffer pb
    if _get_buffer(value, &pb, PyBUF_SIMPLE) != 0:
        _err_clear()
        return FALLBACK
    try:
        if pb.len > 0x7FFFFFFE:
            return FALLBACK
        _write_length(o, op, pb.len, 4)
        if (op & 0x1F) == 15 and splits is not None and pb.len >= threshold:
            splits.append((o.size, value))
        else:
            _write_bytes(o, <const char*>pb.buf, pb.len)
    finally:
        PyBuffer_Release(&pb)
    return OK


cdef int _encode_value(Out* o, int op, object value, tuple subs, Py_ssize_t* sub_i, bint tagged,
                       list splits, Py_ssize_t threshold) except -2:
    cdef int kind = op & 0x1F
    cdef const char* utf8
    cdef Py_ssize_t n, k
    cdef object number
    if kind < 8:
        return _encode_fixed(o, kind, value)
    if kind == 18:  # uuid
        if value is None:
            _write_be(o, 0, 8)
            return _write_be(o, 0, 8)
        if type(value) is not _UUID:
            return FALLBACK
        number = getattr(value, "int")
        _write_be(o, _as_u64_mask(number >> 64), 8)
        return _write_be(o, _as_u64_mask(number), 8)
    if value is None:
        if kind == 19:
            sub_i[0] += 1
        if not (op & 0x40):
            return FALLBACK
        return _write_length(o, op, -1, 2 if kind == 8 else 4)
    if kind == 8:  # string
        if type(value) is not str:
            return FALLBACK
        utf8 = _as_utf8(value, &n)
        if utf8 == NULL:
            _err_clear()
            return FALLBACK
        if n > 32767:
            return FALLBACK
        _write_length(o, op, n, 2)
        return _write_bytes(o, utf8, n)
    if kind == 15 or kind == 16:
        return _encode_buffer(o, op, value, splits, threshold)
    if type(value) is not list and type(value) is not tuple:
        return FALLBACK
    n = len(value)
    if kind == 19:
        sub_i[0] += 1
        _write_length(o, op, n, 4)
        return _encode_array(o, value, n, <tuple>PyTuple_GET_ITEM(subs, sub_i[0] - 1), tagged, splits, threshold)
    if kind == 17:  # array of structs, only when empty
        if n != 0:
            return FALLBACK
        return _write_length(o, op, 0, 4)
    if 9 <= kind <= 14:  # array of integers
        _write_length(o, op, n, 4)
        for k in range(n):
            if k >= len(value) or _encode_fixed(o, kind - 8, value[k]) != OK:
                return FALLBACK
        return OK if len(value) == n else FALLBACK
    return FALLBACK


cdef int _checks_pass(dict item, tuple checks) except -2:
    """Whether every checked key is absent or at its default (see the comment above)."""
    cdef PyObject* p
    cdef object value, default
    cdef int mode, eq
    cdef tuple check
    for check in checks:
        p = _dict_get(item, check[0])
        if p == NULL:
            continue
        value = <object>p
        mode = check[1]
        default = check[2]
        if mode == 0:
            if value is not None:
                return False
        elif mode == 1:
            if value is None and default is None:
                continue
            eq = _rich_eq(value, default, Py_EQ)
            if eq != 1:
                if eq < 0:
                    _err_clear()
                return False
        elif mode == 2:
            if (type(value) is not list and type(value) is not tuple) or len(value) != 0:
                return False
        else:
            return False
    return True


cdef int _encode_array(Out* o, object seq, Py_ssize_t n, tuple program, bint tagged, list splits,
                       Py_ssize_t threshold) except -2:
    """Encode the ``n`` elements of ``seq``, whose count is written already."""
    cdef bytes ops = <bytes>PyTuple_GET_ITEM(program, 0)
    cdef tuple keys = <tuple>PyTuple_GET_ITEM(program, 1)
    cdef tuple defaults = <tuple>PyTuple_GET_ITEM(program, 2)
    cdef tuple subs = <tuple>PyTuple_GET_ITEM(program, 3)
    cdef tuple checks = <tuple>PyTuple_GET_ITEM(program, 4)
    cdef const uint8_t* prog = ops
    cdef Py_ssize_t nops = len(ops)
    cdef Py_ssize_t i, j, sub_i
    cdef PyObject* p
    cdef object item, value
    cdef int truth
    if len(keys) != nops or len(defaults) != nops:
        return FALLBACK
    for i in range(n):
        if i >= len(seq):  # a callback (__eq__ of a value) shrank the list
            return FALLBACK
        item = seq[i]
        if type(item) is not dict:
            return FALLBACK
        if not _checks_pass(<dict>item, checks):
            return FALLBACK
        sub_i = 0
        for j in range(nops):
            p = _dict_get(item, <object>PyTuple_GET_ITEM(keys, j))
            value = <object>p if p != NULL else <object>PyTuple_GET_ITEM(defaults, j)
            if _encode_value(o, prog[j], value, subs, &sub_i, tagged, splits, threshold) != OK:
                return FALLBACK
        if tagged:
            p = _dict_get(item, "_unknown_tags")
            if p != NULL:
                truth = _is_true(<object>p)
                if truth != 0:
                    if truth < 0:
                        _err_clear()
                    return FALLBACK
            _write_be(o, 0, 1)
    return OK if len(seq) == n else FALLBACK


cdef object _byte_view(object value):
    """``value`` as a 1-D memoryview of unsigned bytes (as the Python encoder's ``_view``)."""
    cdef object view = PyMemoryView_FromObject(value)
    cdef Py_buffer* pb = PyMemoryView_GET_BUFFER(view)
    if pb.ndim != 1 or (pb.format != NULL and strcmp(pb.format, "B") != 0):
        view = view.cast("B")
    return view


cdef object _append(object b, const char* p, Py_ssize_t n):
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(b)
    PyByteArray_Resize(b, size + n)
    memcpy(PyByteArray_AS_STRING(b) + size, p, n)
    return b


def encode_struct_array(object seq, tuple program, bint tagged, bytearray b, list parts,
                        Py_ssize_t threshold):
    """Encode the elements of ``seq`` (a list or tuple of dicts) after the bytes in ``b``.

    ``program`` is ``(ops, keys, defaults, subprograms, checks)``. Records of
    ``threshold`` bytes or more are not copied: ``b`` goes to ``parts``,
    then a view of the records, and a new bytearray continues. Returns the
    bytearray to continue with, or None (``b`` and ``parts`` untouched) when
    the generated Python must encode the array itself.
    """
    cdef Out o
    cdef list splits = []
    cdef Py_ssize_t start = 0, offset
    if (type(seq) is not list and type(seq) is not tuple) or len(program) != 5:
        return None
    o.data = NULL
    o.size = 0
    o.cap = 0
    try:
        if _encode_array(&o, seq, len(seq), program, tagged, splits, threshold) != OK:
            return None
        for offset, value in splits:
            _append(b, o.data + start, offset - start)
            parts.append(b)
            parts.append(_byte_view(value))
            b = bytearray()
            start = offset
        return _append(b, o.data + start, o.size - start)
    finally:
        PyMem_Free(o.data)
