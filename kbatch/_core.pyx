# cython: language_level=3
"""kbatch's hot loops: Kafka RecordBatch (magic 2) parsing and building.

The wire grammar this file reads and writes (all integers big-endian; varint
and varlong are zigzag, protobuf-style, at most 5 and 10 bytes)::

    RecordBatch =>                      byte offset
        baseOffset           int64        0
        batchLength          int32        8   bytes after this field
        partitionLeaderEpoch int32       12
        magic                int8        16   2 (0/1 are the legacy message sets)
        crc                  uint32      17   CRC-32C of bytes 21 .. end
        attributes           int16       21   bits 0-2 codec, 3 LogAppendTime,
                                              4 transactional, 5 control,
                                              6 delete horizon in baseTimestamp
        lastOffsetDelta      int32       23
        baseTimestamp        int64       27
        maxTimestamp         int64       35
        producerId           int64       43
        producerEpoch        int16       51
        baseSequence         int32       53
        recordCount          int32       57
        records              [Record]    61   compressed as one block if codec != 0

    Record =>
        length               varint       bytes from attributes to the end of headers
        attributes           int8         unused
        timestampDelta       varlong      timestamp = baseTimestamp + delta
        offsetDelta          varint       offset = baseOffset + delta
        keyLength            varint       -1 (any negative) = null key
        key                  bytes
        valueLength          varint       -1 (any negative) = null value
        value                bytes
        headersCount         varint
        Header =>
            headerKeyLength  varint       must be >= 0
            headerKey        bytes        UTF-8
            headerValueLength varint      -1 (any negative) = null value
            headerValue      bytes

    Control record (in a batch with attribute bit 5; one per batch):
        key   => version int16, type int16 (0 ABORT, 1 COMMIT, ...)
        value => version int16, coordinatorEpoch int32  (ABORT/COMMIT markers)

    Legacy message set entry (magic 0 and 1; CRC32/IEEE over magic .. end):
        offset               int64        absolute; a v1 wrapper's is its last inner record's
        size                 int32        bytes after this field
        crc                  uint32      12
        magic                int8        16   0 or 1
        attributes           int8        17   bits 0-2 codec (no zstd), 3 LogAppendTime (v1)
        timestamp            int64       18   v1 only
        key                  int32 length (negative = null), bytes
        value                int32 length (negative = null), bytes: for a compressed
                                          wrapper, the compressed inner message set, whose
                                          v1 offsets are relative: absolute = wrapper offset
                                          - last inner offset + inner offset

Reading follows Apache Kafka's Java client (DefaultRecordBatch, DefaultRecord,
ByteUtils, ByteBufferLogInputStream): an incomplete trailing batch ends the
buffer without an error; everything else that does not parse is corrupt.
"""

cimport cython
from cpython.buffer cimport (
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_SIMPLE,
    PyBuffer_FillInfo,
    PyBuffer_Release,
    PyObject_CheckBuffer,
    PyObject_GetBuffer,
)
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.pythread cimport (
    WAIT_LOCK,
    PyThread_acquire_lock,
    PyThread_allocate_lock,
    PyThread_release_lock,
    PyThread_type_lock,
)
from cpython.sequence cimport PySequence_GetItem
from cpython.tuple cimport PyTuple_CheckExact, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from cpython.unicode cimport PyUnicode_Check
from cython.view cimport array as cvarray
from libc.stdint cimport (
    INT32_MAX, SIZE_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t,
)
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memmove, memset

import _thread
import os
import time

import numpy as np
import cramjam as _cramjam
from crc32c import crc32c as _crc32c

from kbatch._table import RecordTable
from kbatch.errors import CorruptRecordError, CRCError, KBatchError, UnsupportedError

cdef extern from "Python.h":
    # The plain-list gather reads items through borrowed PyObject* (no
    # reference counting); these are the same macros on raw pointers.
    ctypedef struct PyObject
    PyObject** _items "PySequence_Fast_ITEMS"(PyObject* seq) noexcept
    Py_ssize_t _items_size "PySequence_Fast_GET_SIZE"(PyObject* seq) noexcept
    bint _is_bytes "PyBytes_CheckExact"(PyObject* o) noexcept
    char* _bytes_data "PyBytes_AS_STRING"(PyObject* o) noexcept
    Py_ssize_t _bytes_size "PyBytes_GET_SIZE"(PyObject* o) noexcept
    bint _is_int "PyLong_CheckExact"(PyObject* o) noexcept
    long long _int_value "PyLong_AsLongLongAndOverflow"(PyObject* o, int* overflow) noexcept
    bint _is_list "PyList_CheckExact"(PyObject* o) noexcept
    bint _is_tuple "PyTuple_CheckExact"(PyObject* o) noexcept
    bint _is_str "PyUnicode_CheckExact"(PyObject* o) noexcept
    bint _is_ascii "PyUnicode_IS_COMPACT_ASCII"(PyObject* o) noexcept
    void* _str_data "PyUnicode_DATA"(PyObject* o) noexcept
    Py_ssize_t _str_length "PyUnicode_GET_LENGTH"(PyObject* o) noexcept
    const char* _str_utf8 "PyUnicode_AsUTF8AndSize"(PyObject* o, Py_ssize_t* size) noexcept
    void PyErr_Clear() noexcept
    int PyGC_Disable() noexcept
    int PyGC_Enable() noexcept
    const char* PyUnicode_AsUTF8AndSize(object, Py_ssize_t*) except NULL
    bint PyUnicode_IS_COMPACT_ASCII(object)
    void* PyUnicode_DATA(object)
    Py_ssize_t PyUnicode_GET_LENGTH(object)

cdef extern from "zlib.h":
    unsigned long zlib_crc32 "crc32"(unsigned long crc, const unsigned char* buf, unsigned int len) nogil

cdef extern from *:
    void __builtin_prefetch(const void*) noexcept nogil
    # Cython's own branch hint macro (defined in every generated module).
    bint unlikely(bint) noexcept nogil


# ---------------------------------------------------------------------------
# Row dtypes (the C structs are in _core.pxd; checked against each other below)

RECORD_DTYPE = np.dtype(
    [
        ("offset", "i8"),
        ("timestamp", "i8"),
        ("key_start", "i8"),
        ("value_start", "i8"),
        ("headers_start", "i8"),
        ("key_length", "i4"),
        ("value_length", "i4"),
        ("headers_count", "i4"),
        ("batch", "i4"),
        ("sequence", "i4"),
        ("attributes", "i1"),
    ],
    align=True,
)

BATCH_DTYPE = np.dtype(
    [
        ("position", "i8"),
        ("base_offset", "i8"),
        ("base_timestamp", "i8"),
        ("max_timestamp", "i8"),
        ("producer_id", "i8"),
        ("first_record", "i8"),
        ("batch_length", "i4"),
        ("partition_leader_epoch", "i4"),
        ("crc", "u4"),
        ("last_offset_delta", "i4"),
        ("base_sequence", "i4"),
        ("record_count", "i4"),
        ("coordinator_epoch", "i4"),
        ("attributes", "i2"),
        ("producer_epoch", "i2"),
        ("control_type", "i2"),
        ("magic", "i1"),
        ("compression", "i1"),
        ("timestamp_type", "i1"),
        ("is_transactional", "?"),
        ("is_control", "?"),
        ("has_delete_horizon", "?"),
    ],
    align=True,
)

HEADER_DTYPE = np.dtype(
    [
        ("key_start", "i8"),
        ("value_start", "i8"),
        ("key_length", "i4"),
        ("value_length", "i4"),
    ],
    align=True,
)


cdef dict _c_layout(str name):
    cdef record_t r
    cdef batch_t b
    cdef header_t h
    cdef char* base
    if name == "record":
        base = <char*>&r
        return {
            "offset": <char*>&r.offset - base, "timestamp": <char*>&r.timestamp - base,
            "key_start": <char*>&r.key_start - base, "value_start": <char*>&r.value_start - base,
            "headers_start": <char*>&r.headers_start - base, "key_length": <char*>&r.key_length - base,
            "value_length": <char*>&r.value_length - base, "headers_count": <char*>&r.headers_count - base,
            "batch": <char*>&r.batch - base, "sequence": <char*>&r.sequence - base,
            "attributes": <char*>&r.attributes - base, "@size": sizeof(record_t),
        }
    if name == "batch":
        base = <char*>&b
        return {
            "position": <char*>&b.position - base, "base_offset": <char*>&b.base_offset - base,
            "base_timestamp": <char*>&b.base_timestamp - base, "max_timestamp": <char*>&b.max_timestamp - base,
            "producer_id": <char*>&b.producer_id - base, "first_record": <char*>&b.first_record - base,
            "batch_length": <char*>&b.batch_length - base,
            "partition_leader_epoch": <char*>&b.partition_leader_epoch - base,
            "crc": <char*>&b.crc - base, "last_offset_delta": <char*>&b.last_offset_delta - base,
            "base_sequence": <char*>&b.base_sequence - base, "record_count": <char*>&b.record_count - base,
            "coordinator_epoch": <char*>&b.coordinator_epoch - base, "attributes": <char*>&b.attributes - base,
            "producer_epoch": <char*>&b.producer_epoch - base, "control_type": <char*>&b.control_type - base,
            "magic": <char*>&b.magic - base, "compression": <char*>&b.compression - base,
            "timestamp_type": <char*>&b.timestamp_type - base,
            "is_transactional": <char*>&b.is_transactional - base, "is_control": <char*>&b.is_control - base,
            "has_delete_horizon": <char*>&b.has_delete_horizon - base, "@size": sizeof(batch_t),
        }
    base = <char*>&h
    return {
        "key_start": <char*>&h.key_start - base, "value_start": <char*>&h.value_start - base,
        "key_length": <char*>&h.key_length - base, "value_length": <char*>&h.value_length - base,
        "@size": sizeof(header_t),
    }


def _check_layouts():
    for name, dtype in (("record", RECORD_DTYPE), ("batch", BATCH_DTYPE), ("header", HEADER_DTYPE)):
        layout = _c_layout(name)
        numpy_layout = {f: dtype.fields[f][1] for f in dtype.names}
        numpy_layout["@size"] = dtype.itemsize
        if layout != numpy_layout:
            raise ImportError(f"kbatch._core: C struct {name}_t does not match its NumPy dtype")


_check_layouts()


# ---------------------------------------------------------------------------
# Byte-level readers and writers

cdef inline uint16_t _be16(const uint8_t* p) noexcept nogil:
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline uint32_t _be32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline uint32_t _le32(const uint8_t* p) noexcept nogil:
    return <uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t _be64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>_be32(p) << 32) | <uint64_t>_be32(p + 4)


cdef inline void _put16(uint8_t* p, uint16_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 8)
    p[1] = <uint8_t>v


cdef inline void _put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline void _put64(uint8_t* p, uint64_t v) noexcept nogil:
    _put32(p, <uint32_t>(v >> 32))
    _put32(p + 4, <uint32_t>v)


cdef inline int _read_varint(const uint8_t** pp, const uint8_t* end, int32_t* out) noexcept nogil:
    """Zigzag varint as Java's ByteUtils.readVarint: at most 5 bytes.

    On error ``pp`` is left where the varint starts.
    """
    cdef const uint8_t* p = pp[0]
    cdef uint32_t b, v
    cdef int shift = 14
    if unlikely(p >= end):
        return E_TRUNCATED_FIELD
    b = p[0]
    if b < 0x80:  # one byte: the common case
        pp[0] = p + 1
        out[0] = <int32_t>((b >> 1) ^ (0u - (b & 1)))
        return E_OK
    if p + 1 < end and p[1] < 0x80:  # two bytes: lengths up to 8 KiB
        v = (b & 0x7F) | (<uint32_t>p[1] << 7)
        pp[0] = p + 2
        out[0] = <int32_t>((v >> 1) ^ (0u - (v & 1)))
        return E_OK
    if unlikely(p + 1 >= end):
        return E_TRUNCATED_FIELD
    v = (b & 0x7F) | ((<uint32_t>p[1] & 0x7F) << 7)
    p += 2
    while True:
        if unlikely(p >= end):
            return E_TRUNCATED_FIELD
        b = p[0]
        p += 1
        if b < 0x80:
            v |= b << shift
            break
        if unlikely(shift == 28):
            return E_VARINT_TOO_LONG
        v |= (b & 0x7F) << shift
        shift += 7
    pp[0] = p
    out[0] = <int32_t>((v >> 1) ^ (0u - (v & 1)))
    return E_OK


cdef inline int _read_varlong(const uint8_t** pp, const uint8_t* end, int64_t* out) noexcept nogil:
    """Zigzag varlong as Java's ByteUtils.readVarlong: at most 10 bytes."""
    cdef const uint8_t* p = pp[0]
    cdef uint64_t b, v
    cdef int shift = 7
    if p >= end:
        return E_TRUNCATED_FIELD
    b = p[0]
    if b < 0x80:
        pp[0] = p + 1
        out[0] = <int64_t>((b >> 1) ^ (0ull - (b & 1)))
        return E_OK
    v = b & 0x7F
    p += 1
    while True:
        if p >= end:
            return E_TRUNCATED_FIELD
        b = p[0]
        p += 1
        if b < 0x80:
            v |= b << shift
            break
        if shift == 63:
            return E_VARINT_TOO_LONG
        v |= (b & 0x7F) << shift
        shift += 7
    pp[0] = p
    out[0] = <int64_t>((v >> 1) ^ (0ull - (v & 1)))
    return E_OK


cdef inline const uint8_t* _varint_at(const uint8_t* p, int32_t* out) noexcept nogil:
    """_read_varint without bounds checks, for callers that know 5 bytes are
    there; NULL (nothing stored) for a varint longer than 5 bytes."""
    cdef uint32_t b = p[0], v
    cdef int k
    if b < 0x80:
        out[0] = <int32_t>((b >> 1) ^ (0u - (b & 1)))
        return p + 1
    v = b & 0x7F
    for k in range(1, 5):
        b = p[k]
        v |= (b & 0x7F) << (7 * k)
        if b < 0x80:
            out[0] = <int32_t>((v >> 1) ^ (0u - (v & 1)))
            return p + k + 1
    return NULL


cdef inline const uint8_t* _varlong_at(const uint8_t* p, int64_t* out) noexcept nogil:
    """_read_varlong without bounds checks (10 bytes must be there); NULL if longer."""
    cdef uint64_t b = p[0], v
    cdef int k
    if b < 0x80:
        out[0] = <int64_t>((b >> 1) ^ (0ull - (b & 1)))
        return p + 1
    v = b & 0x7F
    for k in range(1, 10):
        b = p[k]
        v |= (b & 0x7F) << (7 * k)
        if b < 0x80:
            out[0] = <int64_t>((v >> 1) ^ (0ull - (v & 1)))
            return p + k + 1
    return NULL


cdef extern from *:
    """
    /* Bytes of an unsigned value as a base-128 varint: ceil(significant
       bits / 7), at least 1, with no branch to mispredict. */
    static inline int kb_varint_bytes32(uint32_t v) { return (38 - __builtin_clz(v | 1)) / 7; }
    static inline int kb_varint_bytes64(uint64_t v) { return (70 - __builtin_clzll(v | 1)) / 7; }
    """
    int kb_varint_bytes32(uint32_t v) noexcept nogil
    int kb_varint_bytes64(uint64_t v) noexcept nogil


cdef inline int _varint_size(int32_t value) noexcept nogil:
    return kb_varint_bytes32((<uint32_t>value << 1) ^ <uint32_t>(value >> 31))


cdef inline int _varlong_size(int64_t value) noexcept nogil:
    return kb_varint_bytes64((<uint64_t>value << 1) ^ <uint64_t>(value >> 63))


cdef inline uint8_t* _write_varint(uint8_t* p, int32_t value) noexcept nogil:
    cdef uint32_t v = (<uint32_t>value << 1) ^ <uint32_t>(value >> 31)
    while v >= 0x80:
        p[0] = <uint8_t>(v | 0x80)
        p += 1
        v >>= 7
    p[0] = <uint8_t>v
    return p + 1


cdef inline uint8_t* _write_varlong(uint8_t* p, int64_t value) noexcept nogil:
    cdef uint64_t v = (<uint64_t>value << 1) ^ <uint64_t>(value >> 63)
    while v >= 0x80:
        p[0] = <uint8_t>(v | 0x80)
        p += 1
        v >>= 7
    p[0] = <uint8_t>v
    return p + 1


cdef tuple _one_varint(object data, Py_ssize_t pos, bint wide):
    """One zigzag varint (``wide``: varlong) at ``pos``: ``(value, next_pos)``."""
    cdef const uint8_t[::1] mv = _byte_view(data)
    cdef int32_t narrow = 0
    cdef int64_t value = 0
    cdef const uint8_t* start
    cdef const uint8_t* p
    cdef int rc
    cdef str name = "varlong" if wide else "varint"
    if pos < 0 or pos > mv.shape[0]:
        raise IndexError("pos out of range")
    if mv.shape[0] == 0:
        raise CorruptRecordError(f"{name} runs past the end of the buffer", 0, field=name)
    start = &mv[0]
    p = start + pos
    if wide:
        rc = _read_varlong(&p, start + mv.shape[0], &value)
    else:
        rc = _read_varint(&p, start + mv.shape[0], &narrow)
        value = narrow
    if rc == E_VARINT_TOO_LONG:
        raise CorruptRecordError(f"{name} is longer than {10 if wide else 5} bytes", pos, field=name)
    if rc:
        raise CorruptRecordError(f"{name} runs past the end of the buffer", pos, field=name)
    return value, p - start


def _decode_varint(data, Py_ssize_t pos=0):
    """Read one zigzag varint; return ``(value, next_pos)``. For tests and tools."""
    return _one_varint(data, pos, False)


def _decode_varlong(data, Py_ssize_t pos=0):
    """Read one zigzag varlong; return ``(value, next_pos)``. For tests and tools."""
    return _one_varint(data, pos, True)


def _encode_varint(int32_t value):
    """Zigzag varint bytes of ``value``. For tests and tools."""
    cdef uint8_t buf[5]
    cdef uint8_t* end = _write_varint(buf, value)
    return PyBytes_FromStringAndSize(<char*>buf, end - buf)


def _encode_varlong(int64_t value):
    """Zigzag varlong bytes of ``value``. For tests and tools."""
    cdef uint8_t buf[10]
    cdef uint8_t* end = _write_varlong(buf, value)
    return PyBytes_FromStringAndSize(<char*>buf, end - buf)


cdef object _byte_view(object data):
    """A 1-D unsigned-byte memoryview of any C-contiguous buffer, without copying."""
    cdef object mv
    try:
        mv = memoryview(data)
    except TypeError:
        raise TypeError(
            f"expected a bytes-like object (any C-contiguous buffer), got {type(data).__name__}"
        ) from None
    if not mv.c_contiguous:
        raise ValueError("data must be a C-contiguous buffer")
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


# ---------------------------------------------------------------------------
# Errors: filled without the GIL, raised with it

cdef inline int _fail(error_t* err, int code, int64_t position, const char* field,
                      int64_t record_index, int64_t a, int64_t b) noexcept nogil:
    err.code = code
    err.position = position
    err.field = field
    err.record_index = record_index
    err.a = a
    err.b = b
    return -1


cdef str _reason(const error_t* err):
    cdef int c = err.code
    cdef str field = (<bytes>err.field).decode() if err.field != NULL else ""
    a, b = err.a, err.b
    if c == E_TRUNCATED_FIELD:
        return f"{field} runs past the end of its record"
    if c == E_VARINT_TOO_LONG:
        return f"{field} is a varint longer than {b} bytes"
    if c == E_ENTRY_TOO_SMALL:
        return f"entry length {a} is below the minimum record overhead of 14 bytes"
    if c == E_BATCH_TOO_SMALL:
        return f"batch size {a} is below the 61-byte RecordBatch header"
    if c == E_UNKNOWN_MAGIC:
        return f"unknown magic byte {a} (expected 0, 1 or 2)"
    if c == E_UNKNOWN_COMPRESSION:
        return f"unknown compression codec {a} in attributes"
    if c == E_NEGATIVE_COUNT:
        return f"negative record count {a}"
    if c == E_COUNT_TOO_LARGE:
        return f"record count {a} is more than {b} bytes of records can hold"
    if c == E_NEGATIVE_LENGTH:
        return f"negative record length {a}"
    if c == E_RECORD_PAST_BATCH:
        return f"record length {a} runs past the end of the batch ({b} bytes left)"
    if c == E_RECORD_SIZE_MISMATCH:
        return f"record length is {a} bytes but its fields take {b}"
    if c == E_FEWER_RECORDS:
        return f"batch bytes end after {a} of its {b} records"
    if c == E_MORE_RECORDS:
        return f"{a} bytes left in the batch after its {b} records"
    if c == E_NEGATIVE_HEADER_COUNT:
        return f"negative header count {a}"
    if c == E_HEADER_COUNT_TOO_LARGE:
        return f"header count {a} is more than the {b} bytes left in the record can hold"
    if c == E_NEGATIVE_HEADER_KEY:
        return f"negative header key length {a}"
    if c == E_CONTROL_KEY:
        return f"control record key is {a} bytes with version {b} (needs 4 bytes, version >= 0)"
    if c == E_CRC:
        return f"crc32c mismatch: stored {a:#010x}, computed {b:#010x}"
    if c == E_NO_MEMORY:
        return "out of memory"
    if c == E_LEGACY_TOO_SMALL:
        return f"magic {b} message of {a} bytes is shorter than its fixed fields"
    if c == E_LEGACY_ZSTD:
        return f"zstd not allowed for magic {a} (zstd needs magic 2; Java: invalid wrapper compression type)"
    if c == E_NO_INNER_RECORDS:
        return ("compressed wrapper has a null value: no inner records" if a < 0
                else "compressed wrapper decompresses to no inner records")
    if c == E_NESTED_COMPRESSION:
        return f"inner message is compressed too (codec {a}); nested compression is not allowed"
    if c == E_INNER_MAGIC:
        return f"inner message has magic {a} (expected 0 or 1)"
    if c == E_WRAPPER_OFFSET:
        return f"wrapper offset {a} is below its last inner offset {b}"
    if c == E_CRC32:
        return f"crc32 mismatch: stored {a:#010x}, computed {b:#010x}"
    if c == E_INNER_TRUNCATED:
        return f"inner entry of {a} bytes runs past the end of the decompressed message set ({b} bytes left)"
    return f"corrupt input (error {c})"


cdef enum:
    IN_INPUT = 0         # err.position is a byte offset in the caller's buffer
    IN_ARENA_COPY = 1    # ... in the arena, inside an uncompressed batch's copied records
    IN_ARENA_INFLATED = 2  # ... in the arena, inside a batch's decompressed records


cdef object _make_error(const error_t* err, int where, int64_t payload_start, int64_t input_start):
    """The exception for ``err``; ``payload_start`` is where the bad batch's
    records start in the buffer parsed, ``input_start`` where they start in the input."""
    cdef str reason = _reason(err)
    cdef int64_t position = err.position
    if where == IN_ARENA_COPY:
        position = input_start + (err.position - payload_start)
    elif where == IN_ARENA_INFLATED:
        # Point .position at the compressed payload and say where inside the
        # decompressed bytes the bad field is.
        reason = f"{reason} (at byte {err.position - payload_start} of the batch's decompressed records)"
        position = input_start
    if err.code == E_CRC or err.code == E_CRC32:
        cls = CRCError
    else:
        cls = CorruptRecordError
    exc = cls(
        reason,
        position,
        err.batch_index,
        (<bytes>err.field).decode() if err.field != NULL else "",
        batch_position=err.batch_position,
        record_index=err.record_index,
    )
    if err.code == E_CRC or err.code == E_CRC32:
        exc.stored = err.a
        exc.computed = err.b
    return exc


# ---------------------------------------------------------------------------
# Batch headers

cdef enum:
    LOG_OVERHEAD = 12          # baseOffset + batchLength
    HEADER_SIZE_UP_TO_MAGIC = 17
    RECORD_OVERHEAD_V0 = 14    # smallest legal legacy entry (Java's LegacyRecord)
    BATCH_OVERHEAD = 61        # RecordBatch header
    MIN_RECORD_SIZE = 7        # length + attributes + 5 one-byte varints
    MIN_HEADER_SIZE = 2        # key length + value length


cdef int64_t _count_entries(const uint8_t* buf, int64_t n, int64_t* consumed) noexcept nogil:
    """Number of complete entries; ``consumed`` = bytes they span.

    Stops before an incomplete tail; an entry whose length is below the legacy
    minimum is counted (the fill pass reports it), as Java's
    ByteBufferLogInputStream raises for it before looking at what follows.
    """
    cdef int64_t pos = 0, k = 0
    cdef int32_t length
    while n - pos >= HEADER_SIZE_UP_TO_MAGIC:
        length = <int32_t>_be32(buf + pos + 8)
        if length < RECORD_OVERHEAD_V0:
            k += 1
            break
        if n - pos - LOG_OVERHEAD < length:
            break
        k += 1
        pos += LOG_OVERHEAD + length
    consumed[0] = pos
    return k


cdef int64_t _fill_batches(const uint8_t* buf, int64_t n, batch_t* out, int64_t count, int64_t* pstart,
                           int64_t* pend, error_t* err) noexcept nogil:
    """Parse ``count`` batch headers and locate each one's records.

    ``pstart``/``pend`` get the byte range each batch's records are parsed
    from: a v2 batch's records, a legacy entry's whole message, or a legacy
    wrapper's (compressed) value. Returns how many batches are valid (== count
    unless ``err`` is set).

    ``n`` is the bytes :func:`_count_entries` counted those ``count`` entries
    in. Every length is read here once, checked against ``n`` again (the
    buffer may be another thread's ``bytearray``, rewritten since it was
    counted) and stored in the batch row: ``position``, ``batch_length``,
    ``pstart`` and ``pend`` are what every later pass uses, never the bytes.
    """
    cdef int64_t k, pos = 0
    cdef const uint8_t* p
    cdef batch_t* b
    cdef int32_t length
    cdef int8_t magic
    cdef int16_t attributes
    for k in range(count):
        p = buf + pos
        b = out + k
        err.batch_index = k
        err.batch_position = pos
        b.position = pos
        if unlikely(n - pos < HEADER_SIZE_UP_TO_MAGIC):  # (only if the bytes changed since counted)
            _fail(err, E_TRUNCATED_FIELD, pos, "batchLength", -1, 0, 0)
            return k
        length = <int32_t>_be32(p + 8)
        if length < RECORD_OVERHEAD_V0:
            _fail(err, E_ENTRY_TOO_SMALL, pos + 8, "batchLength", -1, length, 0)
            return k
        if unlikely(length > n - pos - LOG_OVERHEAD):  # (likewise)
            _fail(err, E_TRUNCATED_FIELD, pos + 8, "batchLength", -1, length, n - pos - LOG_OVERHEAD)
            return k
        magic = <int8_t>p[16]
        b.magic = magic
        b.base_offset = <int64_t>_be64(p)
        b.batch_length = length
        b.control_type = -1
        b.coordinator_epoch = -1
        b.first_record = 0
        if magic == 0 or magic == 1:
            if _fill_legacy(buf, pos, b, pstart + k, pend + k, err) != 0:
                return k
            pos += LOG_OVERHEAD + length
            continue
        if magic != 2:
            _fail(err, E_UNKNOWN_MAGIC, pos + 16, "magic", -1, magic, 0)
            return k
        if length + LOG_OVERHEAD < BATCH_OVERHEAD:
            _fail(err, E_BATCH_TOO_SMALL, pos + 8, "batchLength", -1, length + LOG_OVERHEAD, 0)
            return k
        attributes = <int16_t>_be16(p + 21)
        b.partition_leader_epoch = <int32_t>_be32(p + 12)
        b.crc = _be32(p + 17)
        b.attributes = attributes
        b.last_offset_delta = <int32_t>_be32(p + 23)
        b.base_timestamp = <int64_t>_be64(p + 27)
        b.max_timestamp = <int64_t>_be64(p + 35)
        b.producer_id = <int64_t>_be64(p + 43)
        b.producer_epoch = <int16_t>_be16(p + 51)
        b.base_sequence = <int32_t>_be32(p + 53)
        b.record_count = <int32_t>_be32(p + 57)
        b.compression = attributes & 0x07
        b.timestamp_type = (attributes >> 3) & 1
        b.is_transactional = (attributes >> 4) & 1
        b.is_control = (attributes >> 5) & 1
        b.has_delete_horizon = (attributes >> 6) & 1
        if b.compression > 4:
            _fail(err, E_UNKNOWN_COMPRESSION, pos + 21, "attributes", -1, b.compression, 0)
            return k
        if b.record_count < 0:
            _fail(err, E_NEGATIVE_COUNT, pos + 57, "recordCount", -1, b.record_count, 0)
            return k
        pstart[k] = pos + BATCH_OVERHEAD
        pend[k] = pos + LOG_OVERHEAD + length
        pos += LOG_OVERHEAD + length
    return count


cdef inline int64_t _legacy_key_offset(int8_t magic) noexcept nogil:
    # crc(4) magic(1) attributes(1) [timestamp(8)]: where the key length is, from the crc
    return 6 if magic == 0 else 14


cdef int _fill_legacy(const uint8_t* buf, int64_t pos, batch_t* b, int64_t* pstart, int64_t* pend,
                      error_t* err) noexcept nogil:
    """Header fields of a magic 0/1 outer entry (the message starts at pos + 12)."""
    cdef const uint8_t* m = buf + pos + LOG_OVERHEAD   # the message: crc onwards
    cdef const uint8_t* end = m + b.batch_length
    cdef const uint8_t* q
    cdef int32_t key_length, value_length
    cdef int8_t attributes = <int8_t>m[5]
    if b.batch_length < _legacy_key_offset(b.magic) + 8:
        return _fail(err, E_LEGACY_TOO_SMALL, pos + 8, "batchLength", -1, b.batch_length, b.magic)
    b.crc = _be32(m)
    b.attributes = <uint8_t>attributes
    b.compression = attributes & 0x07
    b.partition_leader_epoch = -1
    b.last_offset_delta = 0
    b.producer_id = -1
    b.producer_epoch = -1
    b.base_sequence = -1
    b.is_transactional = 0
    b.is_control = 0
    b.has_delete_horizon = 0
    if b.magic == 1:
        b.timestamp_type = (attributes >> 3) & 1
        b.base_timestamp = b.max_timestamp = <int64_t>_be64(m + 6)
    else:
        b.timestamp_type = -1
        b.base_timestamp = b.max_timestamp = -1
    if b.compression == 4:
        return _fail(err, E_LEGACY_ZSTD, pos + 17, "attributes", -1, b.magic, 0)
    if b.compression > 4:
        return _fail(err, E_UNKNOWN_COMPRESSION, pos + 17, "attributes", -1, b.compression, 0)
    q = m + _legacy_key_offset(b.magic)
    key_length = <int32_t>_be32(q)
    q += 4
    if key_length > 0:
        if key_length > end - q - 4:
            return _fail(err, E_TRUNCATED_FIELD, q - buf, "key", -1, 0, 0)
        q += key_length
    value_length = <int32_t>_be32(q)
    q += 4
    if value_length > end - q:
        return _fail(err, E_TRUNCATED_FIELD, q - buf, "value", -1, 0, 0)
    if b.compression == 0:
        b.record_count = 1
        pstart[0] = pos + LOG_OVERHEAD
        pend[0] = pos + LOG_OVERHEAD + b.batch_length
        return 0
    if value_length < 0:
        return _fail(err, E_NO_INNER_RECORDS, q - 4 - buf, "value", -1, value_length, 0)
    b.record_count = 0  # known once the inner message set is decompressed
    pstart[0] = q - buf
    pend[0] = q - buf + value_length
    return 0


cdef inline uint32_t _crc32_ieee(const uint8_t* p, int64_t n) noexcept nogil:
    """CRC32 (IEEE, zlib's) of ``n`` bytes, for the legacy formats."""
    cdef uint32_t crc = <uint32_t>zlib_crc32(0, NULL, 0)
    cdef unsigned int step
    while n > 0:
        step = <unsigned int>(n if n < 0x40000000 else 0x40000000)
        crc = <uint32_t>zlib_crc32(crc, p, step)
        p += step
        n -= step
    return crc


cdef class _Span:
    """A read-only buffer over ``size`` bytes at ``ptr``, memory its user keeps alive.

    Not tracked by the garbage collector and repointed rather than remade: a
    checksum call through it allocates nothing that could start a collection
    (and with it arbitrary finalizers).
    """

    cdef const uint8_t* ptr
    cdef Py_ssize_t size

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, <void*>self.ptr, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass


cdef inline uint32_t _span_crc32c(_Span span, const uint8_t* p, Py_ssize_t size,
                                  int gil_release_mode) except? 0xFFFFFFFF:
    """CRC-32C of ``size`` bytes at ``p`` through crc32c (``gil_release_mode``:
    crc32c's; 0 holds the GIL, -1 lets it go for large buffers)."""
    if gil_release_mode != 0:
        _gil_may_go()
    span.ptr = p
    span.size = size
    return <uint32_t>_crc32c(span, 0, gil_release_mode)


cdef int64_t _check_crcs(const uint8_t* buf, batch_t* batches, int64_t first, int64_t end,
                         const uint8_t* skip, error_t* err) except -2:
    """Checksums of batches ``first .. end``; return the first bad one, or ``end``.

    v2: CRC-32C of attributes .. end (through crc32c). Magic 0/1: CRC32 of
    magic .. end of the outer message (a wrapper's inner messages are checked
    when they are parsed). Batches with ``skip[k]`` set (``skip`` may be NULL)
    are not checked.
    """
    cdef int64_t k, start, stop
    cdef uint32_t computed
    cdef _Span span = _Span()
    for k in range(first, end):
        if skip != NULL and skip[k]:
            continue
        stop = batches[k].position + LOG_OVERHEAD + batches[k].batch_length
        if batches[k].magic == 2:
            start = batches[k].position + 21
            computed = _span_crc32c(span, buf + start, stop - start, -1)
        else:
            start = batches[k].position + 16
            computed = _crc32_ieee(buf + start, stop - start)
        if computed != batches[k].crc:
            err.batch_index = k
            err.batch_position = batches[k].position
            _fail(err, E_CRC if batches[k].magic == 2 else E_CRC32, batches[k].position + (17 if batches[k].magic == 2 else 12),
                  "crc", -1, batches[k].crc, computed)
            return k
    return end


# ---------------------------------------------------------------------------
# Records

cdef inline bint _reserve(void** rows, int64_t* capacity, int64_t need, size_t itemsize) noexcept nogil:
    """Grow a C row buffer to hold ``need`` rows (doubling); False when out of memory."""
    cdef int64_t cap
    cdef void* grown
    if need <= capacity[0]:
        return True
    cap = capacity[0] * 2 if capacity[0] else 64
    while cap < need:
        cap *= 2
    grown = realloc(rows[0], cap * itemsize)
    if grown == NULL:
        return False
    rows[0] = grown
    capacity[0] = cap
    return True


cdef inline int32_t _sequence_at(int32_t base_sequence, int32_t delta) noexcept nogil:
    # DefaultRecordBatch.incrementSequence: wraps past INT32_MAX to 0.
    if base_sequence < 0:
        return -1
    if <int64_t>base_sequence > <int64_t>INT32_MAX - delta:
        return <int32_t>(<int64_t>delta - (<int64_t>INT32_MAX - base_sequence) - 1)
    return base_sequence + delta


cdef enum:
    # attributes + the longest timestampDelta, offsetDelta and keyLength:
    # bodies this long read those fields without bounds checks.
    FAST_PREFIX = 1 + 10 + 5 + 5


cdef inline void _store_record(record_t* r, const batch_t* b, const uint8_t* base, const uint8_t* key,
                               int32_t key_length, const uint8_t* value, int32_t value_length,
                               int64_t headers_start, int32_t header_count, int32_t batch_index,
                               int32_t offset_delta, int64_t timestamp_delta, int8_t attributes) noexcept nogil:
    """Write one parsed v2 data record's row (both parse paths end here)."""
    r.offset = <int64_t>(<uint64_t>b.base_offset + <uint64_t><int64_t>offset_delta)
    if b.timestamp_type == 1:  # LogAppendTime: the broker's time for every record
        r.timestamp = b.max_timestamp
    else:
        r.timestamp = <int64_t>(<uint64_t>b.base_timestamp + <uint64_t>timestamp_delta)
    r.key_start = key - base
    r.key_length = key_length
    r.value_start = value - base
    r.value_length = value_length
    r.headers_start = headers_start
    r.headers_count = header_count
    r.batch = batch_index
    r.sequence = _sequence_at(b.base_sequence, offset_delta)
    r.attributes = attributes
    r._pad[0] = r._pad[1] = r._pad[2] = 0


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline bint _parse_body_fast(const uint8_t* base, const uint8_t* p, const uint8_t* body_end,
                                  const batch_t* b, int32_t batch_index, record_t* r,
                                  header_buf_t* hb) noexcept nogil:
    """_parse_body for the common case: a data record whose fields all parse.

    Returns False, having committed nothing (``r`` and the rows past
    ``hb.size`` may be scribbled on), for anything else: a short body, a bad
    or too-long field, a full header buffer. The checked _parse_body then
    parses the record again and reports what is wrong, so errors are the same
    whichever path ran; this one skips per-field bounds checks where the body
    is long enough and all the error bookkeeping.
    """
    cdef const uint8_t* key
    cdef const uint8_t* value
    cdef int32_t h, offset_delta, key_length, value_length, header_count, hk_length, hv_length
    cdef int64_t timestamp_delta
    cdef int8_t attributes
    cdef header_t* hr
    if unlikely(body_end - p < FAST_PREFIX):
        return False
    attributes = <int8_t>p[0]
    p = _varlong_at(p + 1, &timestamp_delta)
    if unlikely(p == NULL):
        return False
    p = _varint_at(p, &offset_delta)
    if unlikely(p == NULL):
        return False
    p = _varint_at(p, &key_length)
    if unlikely(p == NULL):
        return False
    key = p
    if key_length >= 0:
        if unlikely(key_length > body_end - p):
            return False
        p += key_length
    else:
        key_length = -1
    if unlikely(_read_varint(&p, body_end, &value_length) != E_OK):
        return False
    value = p
    if value_length >= 0:
        if unlikely(value_length > body_end - p):
            return False
        p += value_length
    else:
        value_length = -1
    if unlikely(_read_varint(&p, body_end, &header_count) != E_OK):
        return False
    if unlikely(header_count < 0 or <int64_t>header_count * MIN_HEADER_SIZE > body_end - p
                or hb.size + header_count > hb.capacity):
        return False
    hr = hb.rows + hb.size
    for h in range(header_count):
        if unlikely(_read_varint(&p, body_end, &hk_length) != E_OK or hk_length < 0
                    or hk_length > body_end - p):
            return False
        hr[h].key_start = p - base
        hr[h].key_length = hk_length
        p += hk_length
        if unlikely(_read_varint(&p, body_end, &hv_length) != E_OK):
            return False
        hr[h].value_start = p - base
        if hv_length >= 0:
            if unlikely(hv_length > body_end - p):
                return False
            p += hv_length
        else:
            hv_length = -1
        hr[h].value_length = hv_length
    if unlikely(p != body_end):
        return False
    _store_record(r, b, base, key, key_length, value, value_length, hb.size, header_count, batch_index,
                  offset_delta, timestamp_delta, attributes)
    hb.size += header_count
    return True


@cython.boundscheck(False)
@cython.wraparound(False)
cdef inline int _parse_body(const uint8_t* base, const uint8_t* p, const uint8_t* body_end, batch_t* b,
                            int32_t i, int32_t batch_index, record_t* r, header_buf_t* hb,
                            error_t* err) noexcept nogil:
    """Parse one record body (attributes .. end of headers) into ``r`` / ``hb``."""
    cdef const uint8_t* body = p
    cdef const uint8_t* field
    cdef const uint8_t* key
    cdef const uint8_t* value
    cdef int32_t h, offset_delta, key_length, value_length, header_count, hk_length, hv_length
    cdef int64_t timestamp_delta
    cdef int8_t attributes
    cdef int rc
    cdef header_t* hr
    if unlikely(p >= body_end):
        return _fail(err, E_TRUNCATED_FIELD, p - base, "attributes", i, 0, 0)
    attributes = <int8_t>p[0]
    p += 1
    field = p
    rc = _read_varlong(&p, body_end, &timestamp_delta)
    if unlikely(rc):
        return _fail(err, rc, field - base, "timestampDelta", i, 0, 10)
    field = p
    rc = _read_varint(&p, body_end, &offset_delta)
    if unlikely(rc):
        return _fail(err, rc, field - base, "offsetDelta", i, 0, 5)
    field = p
    rc = _read_varint(&p, body_end, &key_length)
    if unlikely(rc):
        return _fail(err, rc, field - base, "keyLength", i, 0, 5)
    key = p
    if key_length >= 0:
        if unlikely(key_length > body_end - p):
            return _fail(err, E_TRUNCATED_FIELD, p - base, "key", i, 0, 0)
        p += key_length
    else:
        key_length = -1
    field = p
    rc = _read_varint(&p, body_end, &value_length)
    if unlikely(rc):
        return _fail(err, rc, field - base, "valueLength", i, 0, 5)
    value = p
    if value_length >= 0:
        if unlikely(value_length > body_end - p):
            return _fail(err, E_TRUNCATED_FIELD, p - base, "value", i, 0, 0)
        p += value_length
    else:
        value_length = -1
    field = p
    rc = _read_varint(&p, body_end, &header_count)
    if unlikely(rc):
        return _fail(err, rc, field - base, "headersCount", i, 0, 5)
    if unlikely(header_count < 0):
        return _fail(err, E_NEGATIVE_HEADER_COUNT, field - base, "headersCount", i, header_count, 0)
    if unlikely(<int64_t>header_count * MIN_HEADER_SIZE > body_end - p):
        return _fail(err, E_HEADER_COUNT_TOO_LARGE, field - base, "headersCount", i,
                     header_count, body_end - p)
    if unlikely(hb.size + header_count > hb.capacity):
        if not _reserve(<void**>&hb.rows, &hb.capacity, hb.size + header_count, sizeof(header_t)):
            return _fail(err, E_NO_MEMORY, field - base, "headers", i, 0, 0)
    hr = hb.rows + hb.size
    for h in range(header_count):
        field = p
        rc = _read_varint(&p, body_end, &hk_length)
        if unlikely(rc):
            return _fail(err, rc, field - base, "headerKeyLength", i, 0, 5)
        if unlikely(hk_length < 0):
            return _fail(err, E_NEGATIVE_HEADER_KEY, field - base, "headerKeyLength", i, hk_length, 0)
        if unlikely(hk_length > body_end - p):
            return _fail(err, E_TRUNCATED_FIELD, p - base, "headerKey", i, 0, 0)
        hr[h].key_start = p - base
        hr[h].key_length = hk_length
        p += hk_length
        field = p
        rc = _read_varint(&p, body_end, &hv_length)
        if unlikely(rc):
            return _fail(err, rc, field - base, "headerValueLength", i, 0, 5)
        hr[h].value_start = p - base
        if hv_length >= 0:
            if unlikely(hv_length > body_end - p):
                return _fail(err, E_TRUNCATED_FIELD, p - base, "headerValue", i, 0, 0)
            p += hv_length
            hr[h].value_length = hv_length
        else:
            hr[h].value_length = -1
    if unlikely(p != body_end):
        return _fail(err, E_RECORD_SIZE_MISMATCH, body - base, "length", i, body_end - body, p - body)
    if b.is_control:
        if i == 0:
            if key_length < 4 or <int16_t>_be16(key) < 0:
                return _fail(err, E_CONTROL_KEY, key - base, "key", i, key_length,
                             <int16_t>_be16(key) if key_length >= 2 else -1)
            b.control_type = <int16_t>_be16(key + 2)
            # EndTransactionMarker value: version int16, coordinatorEpoch int32.
            if value_length >= 6:
                b.coordinator_epoch = <int32_t>_be32(value + 2)
        return 0
    _store_record(r, b, base, key, key_length, value, value_length, hb.size, header_count, batch_index,
                  offset_delta, timestamp_delta, attributes)
    hb.size += header_count
    return 0


@cython.boundscheck(False)
@cython.wraparound(False)
cdef int _parse_records(const uint8_t* base, int64_t start, int64_t end, batch_t* b,
                        int32_t batch_index, record_t* out, header_buf_t* hb,
                        error_t* err) noexcept nogil:
    """Parse the records of one batch from ``base[start:end]``.

    Data records go to ``out`` (``b.record_count`` rows for a data batch),
    their headers are appended to ``hb``. A control batch's record fills
    ``b.control_type`` / ``b.coordinator_epoch`` instead. Positions written
    are offsets from ``base``. Returns 0, or -1 with ``err`` filled.

    One pass: each record's length is read, its body parsed (by
    _parse_body_fast when it can, else the checked _parse_body), then the
    next. The next record's start is known as soon as the length is read, so
    the CPU already overlaps consecutive records without a framing pre-pass.
    """
    cdef const uint8_t* p = base + start
    cdef const uint8_t* e = base + end
    cdef const uint8_t* field
    cdef int32_t i, length, n = b.record_count
    cdef int rc = 0
    # Local copies: stores to the record rows cannot alias them, so the
    # compiler keeps their fields in registers (``headers`` is written back
    # before returning; ``b`` itself is still written for control records).
    cdef header_buf_t headers = hb[0]
    cdef batch_t lb = b[0]
    cdef bint fast = not b.is_control
    for i in range(n):
        __builtin_prefetch(p + 512)
        field = p
        if unlikely(p >= e):
            rc = _fail(err, E_FEWER_RECORDS, p - base, "length", i, i, n)
            break
        rc = _read_varint(&p, e, &length)
        if unlikely(rc):
            rc = _fail(err, rc, field - base, "length", i, 0, 5)
            break
        if unlikely(length < 0):
            rc = _fail(err, E_NEGATIVE_LENGTH, field - base, "length", i, length, 0)
            break
        if unlikely(length > e - p):
            rc = _fail(err, E_RECORD_PAST_BATCH, field - base, "length", i, length, e - p)
            break
        if not (fast and _parse_body_fast(base, p, p + length, &lb, batch_index, out + i, &headers)):
            rc = _parse_body(base, p, p + length, b, i, batch_index, out + i, &headers, err)
            if unlikely(rc != 0):
                break
        p += length
    hb[0] = headers
    if unlikely(rc != 0):
        return -1
    if unlikely(p != e):
        return _fail(err, E_MORE_RECORDS, p - base, "records", -1, e - p, n)
    return 0


# ---------------------------------------------------------------------------
# Legacy message sets (magic 0 and 1)

cdef int _parse_legacy_message(const uint8_t* base, const uint8_t* m, const uint8_t* end, int64_t offset,
                               bint inner, bint verify_crc, bint forced, int64_t forced_timestamp,
                               int32_t i, int32_t batch_index, record_t* r, int64_t headers_start,
                               error_t* err) noexcept nogil:
    """One v0/v1 message (``m`` at its crc, ``end`` after its value) into ``r``."""
    cdef int64_t n = end - m
    cdef int8_t magic, attributes
    cdef const uint8_t* q
    cdef int32_t key_length, value_length
    cdef uint32_t computed
    if unlikely(n < 14):
        return _fail(err, E_LEGACY_TOO_SMALL, m - base, "size", i, n, 0)
    magic = <int8_t>m[4]
    if unlikely(magic != 0 and magic != 1):
        return _fail(err, E_INNER_MAGIC, m + 4 - base, "magic", i, magic, 0)
    if unlikely(magic == 1 and n < 22):
        return _fail(err, E_LEGACY_TOO_SMALL, m - base, "size", i, n, 1)
    attributes = <int8_t>m[5]
    if inner:
        if unlikely(attributes & 0x07):
            return _fail(err, E_NESTED_COMPRESSION, m + 5 - base, "attributes", i, attributes & 0x07, 0)
        if verify_crc:
            computed = _crc32_ieee(m + 4, n - 4)
            if unlikely(computed != _be32(m)):
                return _fail(err, E_CRC32, m - base, "crc", i, _be32(m), computed)
    q = m + _legacy_key_offset(magic)
    key_length = <int32_t>_be32(q)
    q += 4
    r.key_start = q - base
    if key_length >= 0:
        if unlikely(key_length > end - q - 4):
            return _fail(err, E_TRUNCATED_FIELD, q - base, "key", i, 0, 0)
        q += key_length
    else:
        key_length = -1
    value_length = <int32_t>_be32(q)
    q += 4
    r.value_start = q - base
    if value_length >= 0:
        if unlikely(value_length > end - q):
            return _fail(err, E_TRUNCATED_FIELD, q - base, "value", i, 0, 0)
    else:
        value_length = -1
    r.offset = offset
    if forced:  # LogAppendTime wrapper: its timestamp for every inner record
        r.timestamp = forced_timestamp
    else:
        r.timestamp = <int64_t>_be64(m + 6) if magic == 1 else -1
    r.key_length = key_length
    r.value_length = value_length
    r.headers_start = headers_start
    r.headers_count = 0
    r.batch = batch_index
    r.sequence = -1
    r.attributes = attributes
    r._pad[0] = r._pad[1] = r._pad[2] = 0
    return 0


cdef int _frame_legacy_inner(const uint8_t* base, int64_t start, int64_t end, batch_t* b,
                             int64_t* last_inner, error_t* err) noexcept nogil:
    """Walk a decompressed inner message set: count its entries, find the last offset."""
    cdef const uint8_t* p = base + start
    cdef const uint8_t* e = base + end
    cdef int32_t size, count = 0
    cdef int64_t last = 0
    while p < e:
        if unlikely(e - p < LOG_OVERHEAD):
            return _fail(err, E_INNER_TRUNCATED, p - base, "size", count, LOG_OVERHEAD, e - p)
        size = <int32_t>_be32(p + 8)
        if unlikely(size < RECORD_OVERHEAD_V0):
            return _fail(err, E_ENTRY_TOO_SMALL, p + 8 - base, "size", count, size, 0)
        if unlikely(size > e - p - LOG_OVERHEAD):
            return _fail(err, E_INNER_TRUNCATED, p - base, "size", count, size, e - p - LOG_OVERHEAD)
        last = <int64_t>_be64(p)
        count += 1
        p += LOG_OVERHEAD + size
    if unlikely(count == 0):
        return _fail(err, E_NO_INNER_RECORDS, start, "value", -1, 0, 0)
    # v1 inner offsets are relative to the wrapper's (Java's DeepRecordsIterator);
    # a wrapper offset of 0 is what old clients wrote: the inner offsets stand.
    if unlikely(b.magic == 1 and b.base_offset != 0 and b.base_offset < last):
        return _fail(err, E_WRAPPER_OFFSET, start, "offset", -1, b.base_offset, last)
    b.record_count = count
    last_inner[0] = last
    return 0


cdef int _parse_legacy(const uint8_t* base, int64_t start, int64_t end, batch_t* b, int64_t last_inner,
                       bint verify_crc, int32_t batch_index, record_t* out, header_buf_t* hb,
                       error_t* err) noexcept nogil:
    """The records of one legacy outer entry: itself, or a wrapper's inner messages."""
    cdef const uint8_t* p = base + start
    cdef int32_t i, size
    cdef int64_t delta = 0
    cdef bint forced
    if b.compression == 0:
        return _parse_legacy_message(base, p, base + end, b.base_offset, False, False, False, 0,
                                     0, batch_index, out, hb.size, err)
    if b.magic == 1 and b.base_offset != 0:
        delta = b.base_offset - last_inner
    forced = b.magic == 1 and b.timestamp_type == 1
    for i in range(b.record_count):
        # Framed by _frame_legacy_inner in the arena, which no other thread
        # writes; checked again all the same, as cheap as a comment.
        if unlikely(base + end - p < LOG_OVERHEAD):
            return _fail(err, E_INNER_TRUNCATED, p - base, "size", i, LOG_OVERHEAD, base + end - p)
        size = <int32_t>_be32(p + 8)
        if unlikely(size < 0 or size > base + end - p - LOG_OVERHEAD):
            return _fail(err, E_INNER_TRUNCATED, p - base, "size", i, size, base + end - p - LOG_OVERHEAD)
        if _parse_legacy_message(base, p + LOG_OVERHEAD, p + LOG_OVERHEAD + size,
                                 <int64_t>(<uint64_t>_be64(p) + <uint64_t>delta), True, verify_crc,
                                 forced, b.max_timestamp, i, batch_index, out + i, hb.size, err) != 0:
            return -1
        p += LOG_OVERHEAD + size
    return 0


# Spare blocks. Decompressed payloads of one decode go to one arena, which
# becomes the table's ``data``, and an encode gathers its records into C rows
# first; these are usually larger than malloc's mmap threshold, so each call
# would get fresh pages from the kernel and pay a page fault for every 4 KiB
# it writes. Instead, freed blocks are kept, pages and all, for the next
# call, like a malloc arena keeps freed memory: at most SPARE_BLOCKS of them
# and SPARE_MAX_BYTES in all, the largest kept. A block is taken and given
# back with the GIL held.
#
# A block grows in place: on Linux every block of BLOCK_MAP_MIN bytes or more
# is a mapping of its own, and growing it is one mremap, which moves its pages
# (page tables, not bytes) and touches none; below that, realloc. So a
# decode's arena never holds its bytes twice while it grows: its resident
# memory is what has been written to it, whatever its capacity (see
# _Block.resize and docs/DESIGN.md "Memory bound").

cdef extern from *:
    """
    #if defined(__linux__)
    #include <sys/mman.h>
    #define KB_CAN_MAP 1
    static void* kb_map(size_t n) {
        void* p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    static void* kb_remap(void* p, size_t old, size_t n) {
        void* q = mremap(p, old, n, MREMAP_MAYMOVE);
        return q == MAP_FAILED ? NULL : q;
    }
    static void kb_unmap(void* p, size_t n) { (void)munmap(p, n); }
    #else
    #define KB_CAN_MAP 0
    static void* kb_map(size_t n) { (void)n; return NULL; }
    static void* kb_remap(void* p, size_t old, size_t n) { (void)p; (void)old; (void)n; return NULL; }
    static void kb_unmap(void* p, size_t n) { (void)p; (void)n; }
    #endif
    """
    bint KB_CAN_MAP
    void* kb_map(size_t n) noexcept nogil
    void* kb_remap(void* p, size_t old, size_t n) noexcept nogil
    void kb_unmap(void* p, size_t n) noexcept nogil

cdef enum:
    BLOCK_HEADER = 64                 # capacity, mapped length (0: malloc'd); the data 64-byte aligned
    SPARE_BLOCKS = 4
    SPARE_MAX_BYTES = 256 * 1024 * 1024
    BLOCK_MAP_MIN = 1 << 20           # from this size on (with the header) a block is a mapping (Linux)
    PAGE_BYTES = 4096                 # mappings are made in whole pages (of at least this size)

cdef uint8_t* _spares[SPARE_BLOCKS]   # blocks (not their data), NULL = empty slot


cdef inline size_t _block_capacity(uint8_t* block) noexcept nogil:
    return (<size_t*>block)[0]


cdef inline size_t _block_mapped(uint8_t* block) noexcept nogil:
    return (<size_t*>block)[1]


cdef void _free_block(uint8_t* block) noexcept nogil:
    """Free a block (not its data): unmapped or freed, as it was made."""
    if block == NULL:
        return
    if _block_mapped(block):
        kb_unmap(block, _block_mapped(block))
    else:
        free(block)


cdef uint8_t* _new_block(size_t n) noexcept nogil:
    """A new block with room for ``n`` bytes (its data); NULL when out of memory."""
    cdef uint8_t* block
    cdef size_t total
    if n > SIZE_MAX - BLOCK_HEADER - PAGE_BYTES:
        return NULL
    total = n + BLOCK_HEADER
    if KB_CAN_MAP and total >= BLOCK_MAP_MIN:
        total = (total + PAGE_BYTES - 1) & ~(<size_t>PAGE_BYTES - 1)
        block = <uint8_t*>kb_map(total)
        if block == NULL:
            return NULL
        (<size_t*>block)[0] = n
        (<size_t*>block)[1] = total
        return block
    block = <uint8_t*>malloc(total)
    if block == NULL:
        return NULL
    (<size_t*>block)[0] = n
    (<size_t*>block)[1] = 0
    return block


cdef uint8_t* _grown_block(uint8_t* block, size_t n) noexcept nogil:
    """``block`` with room for ``n`` bytes of data, its bytes kept (it may have
    moved); NULL, ``block`` untouched, when out of memory. A mapping grows
    by mremap, its pages moved, not copied; a malloc'd block by realloc, or,
    once it reaches BLOCK_MAP_MIN, by a copy (of less than that) into a
    new mapping."""
    cdef uint8_t* grown
    cdef size_t total
    if n <= _block_capacity(block):
        return block
    if n > SIZE_MAX - BLOCK_HEADER - PAGE_BYTES:
        return NULL
    total = n + BLOCK_HEADER
    if _block_mapped(block):
        total = (total + PAGE_BYTES - 1) & ~(<size_t>PAGE_BYTES - 1)
        grown = <uint8_t*>kb_remap(block, _block_mapped(block), total)
        if grown == NULL:
            return NULL
        (<size_t*>grown)[0] = n
        (<size_t*>grown)[1] = total
        return grown
    if KB_CAN_MAP and total >= BLOCK_MAP_MIN:
        grown = _new_block(n)
        if grown == NULL:
            return NULL
        memcpy(grown + BLOCK_HEADER, block + BLOCK_HEADER, _block_capacity(block))
        free(block)
        return grown
    grown = <uint8_t*>realloc(block, total)
    if grown == NULL:
        return NULL
    (<size_t*>grown)[0] = n
    return grown


cdef uint8_t* _alloc_block(size_t n) noexcept:
    """The data of a block of at least ``n`` bytes: the smallest spare that fits,
    else a new one; NULL when out of memory (GIL held)."""
    cdef int i, best = -1
    cdef uint8_t* block
    if n == 0:
        n = 1
    for i in range(SPARE_BLOCKS):
        if _spares[i] != NULL and _block_capacity(_spares[i]) >= n and (
                best < 0 or _block_capacity(_spares[i]) < _block_capacity(_spares[best])):
            best = i
    if best >= 0:
        block = _spares[best]
        _spares[best] = NULL
        return block + BLOCK_HEADER
    block = _new_block(n)
    if block == NULL:
        return NULL
    return block + BLOCK_HEADER


cdef inline uint8_t* _take_block(size_t n) except NULL:
    """:func:`_alloc_block`, raising MemoryError."""
    cdef uint8_t* data = _alloc_block(n)
    if data == NULL:
        raise MemoryError()
    return data


cdef void _give_block(void* data) noexcept:
    """Take back a block's data: kept as a spare, in place of smaller ones if need be, or freed."""
    cdef uint8_t* block
    cdef size_t kept = 0
    cdef int i, free_slot = -1, smallest
    if data == NULL:
        return
    block = <uint8_t*>data - BLOCK_HEADER
    if _block_capacity(block) > SPARE_MAX_BYTES:
        _free_block(block)
        return
    for i in range(SPARE_BLOCKS):
        if _spares[i] != NULL:
            kept += _block_capacity(_spares[i])
        elif free_slot < 0:
            free_slot = i
    while free_slot < 0 or kept + _block_capacity(block) > SPARE_MAX_BYTES:
        smallest = -1
        for i in range(SPARE_BLOCKS):
            if _spares[i] != NULL and (smallest < 0 or _block_capacity(_spares[i]) < _block_capacity(_spares[smallest])):
                smallest = i
        if smallest < 0 or _block_capacity(_spares[smallest]) >= _block_capacity(block):
            _free_block(block)  # no smaller spare to make room for it
            return
        kept -= _block_capacity(_spares[smallest])
        _free_block(_spares[smallest])
        _spares[smallest] = NULL
        free_slot = smallest
    _spares[free_slot] = block


@cython.final
cdef class _Block:
    """A writable buffer of bytes from the spare blocks, growable in place.

    A decode's arena (``kbatch._compression.Arena`` calls :meth:`resize` to
    grow it). Its data goes back to the spares when the block is freed.
    Exported through the buffer protocol (uint8, one dimension); while any
    export is alive (a memoryview, a NumPy array over it) it cannot move,
    and :meth:`resize` refuses, as ``bytearray`` does.
    """

    cdef uint8_t* data
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t exports

    def __cinit__(self, Py_ssize_t n):
        self.data = _take_block(<size_t>max(n, 1))
        self.shape[0] = <Py_ssize_t>_block_capacity(self.data - BLOCK_HEADER)
        self.exports = 0

    def __dealloc__(self):
        _give_block(self.data)
        self.data = NULL

    def __len__(self):
        return self.shape[0]

    def __getbuffer__(self, Py_buffer* view, int flags):
        view.buf = self.data
        view.obj = self
        view.len = self.shape[0]
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        view.ndim = 1
        view.shape = self.shape if flags & PyBUF_ND else NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1

    def resize(self, Py_ssize_t n):
        """Grow to at least ``n`` bytes in place, the bytes kept (never shrinks).

        Raises
        ------
        BufferError
            An export is alive (the block cannot move under it).
        MemoryError
            Out of memory (the block is as it was).
        """
        cdef uint8_t* grown
        if n <= self.shape[0]:
            return
        if self.exports:
            raise BufferError("the block is exported: it cannot be resized")
        grown = _grown_block(self.data - BLOCK_HEADER, <size_t>n)
        if grown == NULL:
            raise MemoryError()
        self.data = grown + BLOCK_HEADER
        self.shape[0] = <Py_ssize_t>_block_capacity(grown)


def _arena_block(Py_ssize_t n):
    """A :class:`_Block` of at least ``n`` bytes for a decode's arena.

    A spare block when one is large enough (its pages already mapped), else a
    new one; its memory goes back to the spares when it is freed.
    """
    return _Block(n)


def _spare_sizes():
    """The capacities of the spare blocks, largest first (tests)."""
    return sorted([_block_capacity(_spares[i]) for i in range(SPARE_BLOCKS) if _spares[i] != NULL], reverse=True)


def _release_spare():
    """Free the spare blocks now (tests, and memory-tight callers)."""
    cdef int i
    for i in range(SPARE_BLOCKS):
        _free_block(_spares[i])
        _spares[i] = NULL


cdef object _rows_array(void** rows, int64_t count, size_t itemsize, object dtype):
    """Hand a C row buffer to NumPy without copying (NumPy frees it); ``rows`` is cleared."""
    cdef cvarray arr
    if count == 0:
        free(rows[0])
        rows[0] = NULL
        return np.empty(0, dtype=dtype)
    arr = <uint8_t[:count * itemsize]> <uint8_t*>rows[0]
    arr.callback_free_data = free
    rows[0] = NULL
    return np.asarray(arr).view(dtype)


cdef inline void* _row_ptr(object array):
    """Address of the first row of a C-contiguous structured array (non-empty)."""
    cdef uint8_t[::1] raw = array.view(np.uint8)
    return <void*>&raw[0]


# ---------------------------------------------------------------------------
# decode
#
# One pass over the batch headers (no GIL), then the batches in chunks of about
# _CHUNK_BYTES: their CRC-32Cs, their payloads (decompressed into one arena when
# any batch of the buffer is compressed), then their records straight into C
# row buffers (no GIL). Each stage stops at the first bad batch, so the
# earliest error wins and everything before it is returned as the error's
# ``partial`` table.
#
# On a machine with two or more cores, uncompressed input of _SPLIT_BYTES or
# more is parsed from both ends at once (see _parse_split), and compressed
# input is decoded as a two-stage pipeline: while a parse thread turns chunk k into rows (pure C,
# no GIL, no Python object), the calling thread checks and decompresses chunk
# k + 1 (crc32c and the codecs release the GIL for large buffers). The
# calling thread never moves or frees what the parse thread reads or writes
# (the arena, the row buffers) without first waiting for it to go idle.

#: Input bytes per chunk (CRC'd, decompressed and parsed together; a parse
#: thread's unit of work). A module global so that tests can shrink it.
_CHUNK_BYTES = 1 << 18
#: Uncompressed input from this size on is parsed on two threads (when
#: allowed); below it, starting a thread costs more than it saves.
_SPLIT_BYTES = 1 << 20
#: Tests only: batches the calling thread parses from the back before the
#: parse thread starts, so that the join of the two sides is certain to run.
_SPLIT_BACK_FIRST = 0

cdef enum:
    CRC_AHEAD = 4  # batches the CRC check keeps ahead of the front


cdef struct rows_t:
    record_t* records
    int64_t size
    int64_t capacity


cdef struct parse_job_t:
    # Batches ``first .. end`` whose records are parsed from ``base``; rows
    # go to ``rows`` at each batch's first_record, headers to ``hb``; the
    # first bad batch stops the job with ``err`` filled.
    const uint8_t* base
    int64_t first
    int64_t end
    batch_t* bp
    const int64_t* pstart
    const int64_t* pend
    int64_t* last_inner
    const uint8_t* skip
    const int32_t* remap
    bint verify_crc
    rows_t* rows
    header_buf_t* hb
    error_t err


cdef inline int _parse_batch(parse_job_t* job, int64_t k) noexcept nogil:
    """Parse batch ``k`` of a job (unless skipped): rows at its first_record,
    headers appended to ``job.hb``. Returns 0, or -1 with ``job.err`` filled."""
    cdef batch_t* b = job.bp + k
    cdef int32_t index
    cdef int rc
    if job.skip != NULL and job.skip[k]:
        return 0
    index = job.remap[k] if job.remap != NULL else <int32_t>k
    if b.magic == 2:
        rc = _parse_records(job.base, job.pstart[k], job.pend[k], b, index,
                            job.rows.records + b.first_record, job.hb, &job.err)
    else:
        rc = _parse_legacy(job.base, job.pstart[k], job.pend[k], b, job.last_inner[k], job.verify_crc,
                           index, job.rows.records + b.first_record, job.hb, &job.err)
    if rc != 0:
        job.err.batch_index = k
        job.err.batch_position = b.position
    return rc


cdef int64_t _place_rows(const uint8_t* base, batch_t* bp, int64_t first, int64_t end, const int64_t* pstart,
                         const int64_t* pend, int64_t* last_inner, const uint8_t* skip, int64_t* need,
                         error_t* err) noexcept nogil:
    """Give batches ``first .. end`` their first_record, counting rows in ``need``.

    Returns the first batch whose records cannot be placed (``err`` filled;
    see :func:`_place_error`), or ``end``. A v2 record count is a claim,
    checked against the batch's bytes; a legacy wrapper's is counted by
    framing its inner message set (decompressed in ``base``).
    """
    cdef int64_t k
    cdef batch_t* b
    for k in range(first, end):
        b = bp + k
        b.first_record = need[0]
        if skip != NULL and skip[k]:
            continue
        if b.magic < 2:
            if b.compression and _frame_legacy_inner(base, pstart[k], pend[k], b, last_inner + k, err) != 0:
                err.batch_index = k
                err.batch_position = b.position
                return k
        elif b.record_count > (pend[k] - pstart[k]) // MIN_RECORD_SIZE:
            err.batch_index = k
            err.batch_position = b.position
            _fail(err, E_COUNT_TOO_LARGE, b.position + 57, "recordCount", -1, b.record_count, pend[k] - pstart[k])
            return k
        if not b.is_control:
            need[0] += b.record_count
    return end


cdef object _place_error(const error_t* err, const batch_t* bp, int64_t k, int64_t payload_start,
                         int64_t input_start):
    """The exception for a batch :func:`_place_rows` stopped at."""
    return _make_error(err, IN_ARENA_INFLATED if bp[k].magic < 2 else IN_INPUT, payload_start, input_start)


cdef void _parse_chunk(void* arg) noexcept nogil:
    cdef parse_job_t* job = <parse_job_t*>arg
    cdef int64_t k
    for k in range(job.first, job.end):
        if _parse_batch(job, k) != 0:
            return
        if not job.bp[k].is_control and not (job.skip != NULL and job.skip[k]):
            job.rows.size += job.bp[k].record_count


# Uncompressed input on two threads. Nothing is decompressed and every
# batch's rows are placed before any batch is parsed, so batches can be
# parsed in any order and by either thread: the parse thread takes them one
# at a time from the front, the calling thread from the back, until the two
# meet. The calling thread also checks the CRCs (the crc32c module is called
# with the GIL): the front's a few batches ahead of the parse thread, its
# own just before parsing them. Each side appends header rows to a buffer of its own;
# the back's are moved behind the front's once both are done, and the rows
# of its batches renumbered. A batch is taken by compare-and-swap on one
# word holding both ends of the range left.

cdef extern from *:
    """
    /* Take the next batch of a shared range from its front or its back; -1
       once the range is empty. *range packs the next front batch (low 32
       bits) and one past the last back batch (high 32 bits). */
    static inline int64_t kb_take(uint64_t* range, int from_back) {
        uint64_t s = __atomic_load_n(range, __ATOMIC_ACQUIRE), t;
        uint32_t lo, hi;
        do {
            lo = (uint32_t)s;
            hi = (uint32_t)(s >> 32);
            if (lo >= hi) return -1;
            t = from_back ? s - ((uint64_t)1 << 32) : s + 1;
        } while (!__atomic_compare_exchange_n(range, &s, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
        return from_back ? (int64_t)hi - 1 : (int64_t)lo;
    }
    /* Drop the batches from `end` on from a range (those not yet taken). */
    static inline void kb_cut(uint64_t* range, uint32_t end) {
        uint64_t s = __atomic_load_n(range, __ATOMIC_ACQUIRE), t;
        do {
            if ((uint32_t)(s >> 32) <= end) return;
            t = ((uint64_t)end << 32) | (uint32_t)s;
        } while (!__atomic_compare_exchange_n(range, &s, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    }
    static inline uint64_t kb_load(uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
    static inline void kb_store(uint64_t* word, uint64_t v) { __atomic_store_n(word, v, __ATOMIC_RELEASE); }
    """
    int64_t kb_take(uint64_t* range, int from_back) noexcept nogil
    void kb_cut(uint64_t* range, uint32_t end) noexcept nogil
    uint64_t kb_load(uint64_t* word) noexcept nogil
    void kb_store(uint64_t* word, uint64_t v) noexcept nogil


cdef struct split_t:
    uint64_t range          # batches not yet taken (see kb_take)
    uint64_t front_failed   # set by the front on its first bad batch: the back stops
    int64_t* hstart         # per batch: its header rows in its side's buffer,
    int64_t* hend           # hstart[k] .. hend[k]


cdef struct side_t:
    parse_job_t job         # this side's header buffer and error
    split_t* split
    bint from_back


cdef inline bint _parse_taken(side_t* side, int64_t k) noexcept nogil:
    """Parse batch ``k``, taken by ``side``; False if it is bad (the front's
    failure also stops the back)."""
    side.split.hstart[k] = side.job.hb.size
    if _parse_batch(&side.job, k) != 0:
        if not side.from_back:
            kb_store(&side.split.front_failed, 1)
        return False
    side.split.hend[k] = side.job.hb.size
    return True


cdef void _parse_front(void* arg) noexcept nogil:
    """The parse thread's side: batches from the front until none is left or one is bad."""
    cdef side_t* side = <side_t*>arg
    cdef int64_t k = kb_take(&side.split.range, False)
    while k >= 0 and _parse_taken(side, k):
        k = kb_take(&side.split.range, False)


cdef struct join_t:
    # Back batches first .. end to move behind the front's headers, batch
    # ``first``'s going to ``out[at]``.
    const split_t* split
    const batch_t* bp
    const uint8_t* skip
    record_t* records
    header_t* out
    const header_t* back
    int64_t first
    int64_t end
    int64_t at


cdef void _join_range(void* arg) noexcept nogil:
    """Move a join_t's header rows and renumber its batches' records."""
    cdef join_t* j = <join_t*>arg
    cdef int64_t k, r, first, count, delta, at = j.at
    for k in range(j.first, j.end):
        count = j.split.hend[k] - j.split.hstart[k]
        delta = at - j.split.hstart[k]
        memcpy(j.out + at, j.back + j.split.hstart[k], count * sizeof(header_t))
        if delta != 0 and not j.bp[k].is_control and not (j.skip != NULL and j.skip[k]):
            first = j.bp[k].first_record
            for r in range(first, first + j.bp[k].record_count):
                j.records[r].headers_start += delta
        at += count


cdef int _join_sides(_Worker parser, split_t* split, batch_t* bp, int64_t end, const uint8_t* skip,
                     rows_t* rows, header_buf_t* front, const header_buf_t* back) except -1:
    """After a split parse: the rows of batches ``0 .. end`` with one header
    buffer, ``front``. Batches below the front's end of the range are the
    front's, and their headers are in place; the back's follow, moved over
    in batch order, half of them by the (idle) parse thread."""
    cdef int64_t k, total, mid
    cdef int64_t split_at = min(<int64_t><uint32_t>split.range, end)
    cdef join_t here, there
    here.split = split
    here.bp = bp
    here.skip = skip
    here.records = rows.records
    here.back = back.rows
    here.first = split_at
    here.end = end
    here.at = split.hend[split_at - 1] if split_at > 0 else 0
    total = here.at
    for k in range(split_at, end):
        total += split.hend[k] - split.hstart[k]
    if not _reserve(<void**>&front.rows, &front.capacity, total, sizeof(header_t)):
        raise MemoryError()
    here.out = front.rows
    front.size = total
    if end - split_at < 2:
        _join_range(&here)
        return 0
    mid = split_at + (end - split_at) // 2
    there = here
    there.first = mid
    for k in range(split_at, mid):
        there.at += split.hend[k] - split.hstart[k]
    here.end = mid
    parser.submit(_join_range, &there, False)
    with nogil:
        _join_range(&here)
    parser.wait(False)
    return 0


cdef object _parse_split(_Worker parser, parse_job_t* job, int64_t* bad, rows_t* rows):
    """Place, check and parse uncompressed batches ``0 .. bad[0]`` (in
    ``job.base``, the input) on two threads (see above). Returns the exception of the first bad batch, and
    lowers ``bad[0]`` to it, or None; ``rows`` and ``job.hb`` hold the rows
    of the batches before it either way."""
    cdef int64_t n = bad[0], need = 0, placed, crc_end = n, end, checked = 0, stop, k, head_start
    cdef const uint8_t* buf = job.base
    cdef uint64_t s
    cdef bint good
    cdef error_t place_err, crc_err, err
    cdef const error_t* first_err = NULL
    cdef split_t split
    cdef side_t front, back
    cdef header_buf_t back_hb
    cdef int64_t[::1] marks = np.empty(2 * n, dtype=np.int64)
    memset(&place_err, 0, sizeof(error_t))
    memset(&crc_err, 0, sizeof(error_t))
    memset(&back_hb, 0, sizeof(header_buf_t))
    placed = _place_rows(job.base, job.bp, 0, n, job.pstart, job.pend, job.last_inner, job.skip, &need,
                         &place_err)
    split.range = <uint64_t>placed << 32
    split.front_failed = 0
    split.hstart = &marks[0]
    split.hend = &marks[n]
    front.job = job[0]
    front.split = &split
    front.from_back = False
    back.job = job[0]
    back.job.hb = &back_hb
    back.split = &split
    back.from_back = True
    try:
        if not (_reserve(<void**>&rows.records, &rows.capacity, need, sizeof(record_t))
                and _reserve(<void**>&job.hb.rows, &job.hb.capacity, need, sizeof(header_t))
                and _reserve(<void**>&back_hb.rows, &back_hb.capacity, need // 2, sizeof(header_t))):
            raise MemoryError()
        # The back. The CRCs of the front's batches are checked a few batches
        # ahead of it (so that it parses them from cache), each batch taken
        # from the back just before it is parsed here. (Tests may have the
        # back take batches before the front starts.)
        if job.verify_crc and placed < n and _check_crcs(buf, job.bp, placed, placed + 1, job.skip, &crc_err) == placed:
            crc_end = placed  # its CRC error outranks the bad count found in it
        head_start = _SPLIT_BACK_FIRST
        if head_start == 0:
            parser.submit(_parse_front, &front, False)
        while True:
            s = kb_load(&split.range)
            if job.verify_crc:
                stop = min(<int64_t><uint32_t>s + CRC_AHEAD, <int64_t>(s >> 32), crc_end)
                if checked < stop:
                    checked = _check_crcs(buf, job.bp, checked, stop, job.skip, &crc_err)
                    if checked < stop:  # the lowest bad CRC: nothing above it is wanted
                        crc_end = checked
                        kb_cut(&split.range, <uint32_t>crc_end)
            if kb_load(&split.front_failed):
                break
            k = kb_take(&split.range, True)
            if k < 0:
                break
            if job.verify_crc and _check_crcs(buf, job.bp, k, k + 1, job.skip, &err) == k:
                if k < crc_end:
                    crc_end = k
                    crc_err = err
                continue
            with nogil:
                good = _parse_taken(&back, k)
            head_start -= 1
            if head_start == 0:
                parser.submit(_parse_front, &front, False)
            if not good:
                break
        if head_start > 0:
            parser.submit(_parse_front, &front, False)
        if job.verify_crc:  # the rest of the front's batches
            s = kb_load(&split.range)
            stop = min(<int64_t>(s >> 32), crc_end)
            if checked < stop and _check_crcs(buf, job.bp, checked, stop, job.skip, &crc_err) < stop:
                crc_end = crc_err.batch_index
        parser.wait(False)
        # The earliest bad batch wins; at the same batch, its CRC error.
        end = n
        if front.job.err.code and front.job.err.batch_index < end:
            end = front.job.err.batch_index
            first_err = &front.job.err
        if back.job.err.code and back.job.err.batch_index < end:
            end = back.job.err.batch_index
            first_err = &back.job.err
        if placed < end:
            end = placed
            first_err = &place_err
        if crc_end <= end and crc_end < n:
            end = crc_end
            first_err = &crc_err
        _join_sides(parser, &split, job.bp, end, job.skip, rows, job.hb, &back_hb)
        rows.size = job.bp[end].first_record if end < placed else need
    finally:
        parser.wait(False)  # the front may still be parsing if the CRC check raised
        free(back_hb.rows)
    bad[0] = end
    if first_err == NULL:
        return None
    return _make_error(first_err, IN_INPUT, 0, 0)


def _usable_cpus():
    """Cores kbatch may keep busy: ``KBATCH_THREADS`` if set (1 = the calling
    thread only), else the cores this process may run on (taskset, cpuset)."""
    try:
        return max(1, int(os.environ["KBATCH_THREADS"]))
    except (KeyError, ValueError):
        pass
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_CPUS = _usable_cpus()


def set_threads(int n):
    """Set how many threads kbatch may keep busy; return the previous setting.

    Parameters
    ----------
    n : int
        1 keeps decode and encode on the calling thread; 2 or more lets large
        decodes and encodes use a second thread (kbatch never uses more than
        two). The default is ``KBATCH_THREADS`` if set, else the cores this
        process may run on.

    Returns
    -------
    int

    Examples
    --------
    >>> previous = set_threads(1)
    >>> set_threads(previous)
    1
    """
    global _CPUS
    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    previous = _CPUS
    _CPUS = n
    return previous


def get_threads():
    """How many threads kbatch may keep busy (see :func:`set_threads`)."""
    return _CPUS


ctypedef void (*work_fn)(void* arg) noexcept nogil

cdef extern from "pythread.h":
    # (Cython's declarations lack nogil; neither needs the GIL)
    unsigned long PyThread_start_new_thread(void (*func)(void*) noexcept nogil, void* arg) nogil
    void PyThread_free_lock(PyThread_type_lock lock) nogil


# The plain-list encode's window (docs/DESIGN.md, Threads). From the first
# borrowed item pointer _gather_plain takes to the last byte written from
# one, the calling thread keeps the GIL and calls no Python code, so no
# other Python thread can run and drop an item; and the cyclic GC is off,
# since allocating a tracked object may start a collection, whose finalizers
# are Python code that may hand the GIL over. _gil_may_go() marks every place
# on the encode path where another thread could run next (the GIL let go,
# Python code called): debug builds (KBATCH_DEBUG=1 keeps C asserts) abort
# there while the window is open.
cdef extern from *:
    """
    #include <assert.h>
    #define KB_ASSERT_WINDOW_CLOSED(open) \
        assert(!(open) && "kbatch: another thread may run while encode holds borrowed item pointers")
    """
    void KB_ASSERT_WINDOW_CLOSED(bint window_open) noexcept nogil

cdef bint _window_open = False
cdef int _window_gc = 0   # the GC was enabled when the window opened


cdef inline void _open_window() noexcept:
    global _window_open, _window_gc
    _window_gc = PyGC_Disable()
    _window_open = True


cdef inline void _close_window() noexcept:
    global _window_open
    if _window_open:
        _window_open = False
        if _window_gc:
            PyGC_Enable()


cdef inline void _gil_may_go() noexcept nogil:
    """Another Python thread may run next: the window must be closed."""
    KB_ASSERT_WINDOW_CLOSED(_window_open)


def _window_is_open():
    """Tests: whether the plain-list encode's window is open (never, between calls)."""
    return bool(_window_open)


cdef struct worker_t:
    PyThread_type_lock ready   # released by submit: a job (or quit) is there
    PyThread_type_lock done    # released by the thread: the job is finished
    work_fn fn
    void* arg
    bint quit


cdef void _worker_main(void* state) noexcept nogil:
    """The worker thread: plain C, never touches Python. It owns ``state``
    once told to quit, and frees it on its way out."""
    cdef worker_t* w = <worker_t*>state
    while True:
        PyThread_acquire_lock(w.ready, WAIT_LOCK)
        if w.quit:
            break
        w.fn(w.arg)
        PyThread_release_lock(w.done)
    PyThread_free_lock(w.ready)
    PyThread_free_lock(w.done)
    free(w)


cdef class _Worker:
    """A thread of its own for pure C jobs (no GIL, no Python object).

    One job at a time: :meth:`submit` hands one over, :meth:`wait` blocks
    (uninterruptibly: the job writes into buffers the caller owns) until it
    is done. With ``threaded`` False, or when no thread can be started, jobs
    run inline in :meth:`submit`. The thread is started with
    ``PyThread_start_new_thread`` and never needs the GIL, so a caller that
    holds the GIL throughout (the plain-list encoder) cannot deadlock with
    it; :meth:`close` (also run when the object is freed) tells it to exit.
    """

    cdef worker_t* w
    cdef bint busy

    def __cinit__(self, bint threaded):
        self.w = NULL
        self.busy = False
        if not threaded:
            return
        cdef worker_t* w = <worker_t*>malloc(sizeof(worker_t))
        if w == NULL:
            return  # inline then
        memset(w, 0, sizeof(worker_t))
        w.ready = PyThread_allocate_lock()
        w.done = PyThread_allocate_lock()
        if w.ready != NULL and w.done != NULL:
            PyThread_acquire_lock(w.ready, WAIT_LOCK)
            PyThread_acquire_lock(w.done, WAIT_LOCK)
            if PyThread_start_new_thread(_worker_main, w) != <unsigned long>-1:
                self.w = w
                return
        if w.ready != NULL:
            PyThread_free_lock(w.ready)
        if w.done != NULL:
            PyThread_free_lock(w.done)
        free(w)

    def __dealloc__(self):
        self.close(True)

    @property
    def threaded(self):
        return self.w != NULL

    cdef void submit(self, work_fn fn, void* arg, bint keep_gil) noexcept:
        """Start ``fn(arg)``; inline, it is done on return (``keep_gil``: without
        letting go of the GIL)."""
        if self.w == NULL:
            if keep_gil:
                fn(arg)
            else:
                _gil_may_go()
                with nogil:
                    fn(arg)
            return
        self.w.fn = fn
        self.w.arg = arg
        self.busy = True
        PyThread_release_lock(self.w.ready)

    cdef void wait(self, bint keep_gil) noexcept:
        """Block until the job submitted last is finished (``keep_gil``: holding
        the GIL, so that no other Python thread runs meanwhile)."""
        if not keep_gil:
            _gil_may_go()
        if not self.busy:
            return
        if keep_gil:
            PyThread_acquire_lock(self.w.done, WAIT_LOCK)
        else:
            with nogil:
                PyThread_acquire_lock(self.w.done, WAIT_LOCK)
        self.busy = False

    def wait_idle(self):
        """Python-callable :meth:`wait` (the arena calls it before it moves)."""
        self.wait(False)

    cdef void close(self, bint keep_gil) noexcept:
        """Wait for the job, then let the thread go (it frees its state)."""
        cdef worker_t* w = self.w
        if w == NULL:
            return
        self.wait(keep_gil)
        self.w = NULL
        w.quit = True
        PyThread_release_lock(w.ready)


def decode(object data, *, bint verify_crc=True, object max_decompressed_size=None, object skip_batches=None,
           bint keep_skipped_rows=True):
    """Decode a buffer of Kafka record batches; see :func:`kbatch.decode`.

    Parameters
    ----------
    data : buffer
        Batches back to back.
    verify_crc : bool, default True
    max_decompressed_size : int, optional
        See :func:`kbatch.decode`.
    skip_batches : array of bool, optional
        One flag per complete batch of ``data`` (the rows :func:`scan` lists
        for it). A skipped batch keeps its batch row (header fields as
        :func:`scan` fills them, ``first_record`` where its records would
        start), but none of its records is parsed or decompressed, its
        CRC is not checked, and a skipped control batch's ``control_type``
        stays -1.
    keep_skipped_rows : bool, default True
        False: the skipped batches have no rows in the table either
        (``records["batch"]`` numbers the batch rows kept; ``next_offset`` is
        still the one after the last batch of ``data``). Errors still give
        batch indexes in ``data``.

    Returns
    -------
    RecordTable
    """
    cdef object mv = _byte_view(data)
    cdef const uint8_t[::1] view = mv
    cdef int64_t n = view.shape[0]
    cdef const uint8_t* buf = &view[0] if n > 0 else NULL
    cdef int64_t consumed = 0, count = 0, bad, k, j, chunk, stop, need
    cdef int rc
    cdef error_t err
    cdef batch_t* bp = NULL
    cdef rows_t rows
    cdef header_buf_t hb
    # Per batch: where its records are parsed from (pstart/pend: in the input,
    # or in the arena once decompressed), where they are in the input (istart),
    # and a legacy wrapper's last inner offset.
    cdef int64_t[::1] pstart
    cdef int64_t[::1] pend
    cdef int64_t[::1] istart
    cdef int64_t[::1] last_inner
    cdef const uint8_t* base = buf
    cdef const uint8_t[::1] arena_view
    cdef bint in_arena = False, split
    cdef object batches, arena = None, exc = None, limit = None, skip_arr = None
    cdef const uint8_t[::1] skip_view
    cdef const uint8_t* skip = NULL
    cdef int32_t[::1] kept_index
    cdef const int32_t* remap = NULL
    cdef _Worker parser
    cdef int64_t chunk_bytes
    cdef parse_job_t pjob
    cdef parse_job_t* job = &pjob
    cdef int64_t planned
    memset(&err, 0, sizeof(err))
    memset(&hb, 0, sizeof(hb))
    memset(&rows, 0, sizeof(rows))

    with nogil:
        count = _count_entries(buf, n, &consumed)
    if skip_batches is not None:
        skip_arr = np.ascontiguousarray(skip_batches, dtype=np.bool_)
        if skip_arr.ndim != 1 or skip_arr.shape[0] != count:
            raise ValueError(f"skip_batches has {skip_arr.size} entries but data holds {count} complete batches")
        if count:
            skip_view = skip_arr.view(np.uint8)
            skip = &skip_view[0]
            if not keep_skipped_rows:
                # a kept batch's row number once the skipped rows are gone
                kept_index = np.cumsum(~skip_arr, dtype=np.int32) - 1
                remap = &kept_index[0]
    batches = np.zeros(count, dtype=BATCH_DTYPE)
    pstart = np.empty(count, dtype=np.int64)
    pend = np.empty(count, dtype=np.int64)
    last_inner = np.zeros(count, dtype=np.int64)
    bad = count
    if count:
        bp = <batch_t*>_row_ptr(batches)
        with nogil:
            bad = _fill_batches(buf, n, bp, count, &pstart[0], &pend[0], &err)
        if err.code:
            exc = _make_error(&err, IN_INPUT, 0, 0)
    istart = np.asarray(pstart).copy()

    need = 0
    for k in range(bad):
        if skip != NULL and skip[k]:
            continue
        if bp[k].compression != 0:
            in_arena = True
        elif not bp[k].is_control:
            # A count the bytes cannot hold is reported per chunk below;
            # never let it size an allocation.
            need += min(bp[k].record_count, (pend[k] - pstart[k]) // MIN_RECORD_SIZE)
    if in_arena:
        from kbatch import _compression
        limit = (_compression.DEFAULT_MAX_DECOMPRESSED_SIZE if max_decompressed_size is None
                 else int(max_decompressed_size))
        # Pages are only touched as they are written, so reserving for a
        # typical compression ratio costs address space, not memory; it saves
        # growing (and copying) the arena while decoding.
        arena = _compression.Arena(min(8 * n + 65536, limit), allocate=_arena_block)
    # Exact for uncompressed input (counts are checked against batch sizes
    # before any row is written); grown per chunk for compressed input.
    if not _reserve(<void**>&rows.records, &rows.capacity, need, sizeof(record_t)) or \
            not _reserve(<void**>&hb.rows, &hb.capacity, need, sizeof(header_t)):
        raise MemoryError()

    memset(job, 0, sizeof(parse_job_t))
    job.bp = bp
    if count:
        job.pstart = &pstart[0]
        job.pend = &pend[0]
        job.last_inner = &last_inner[0]
    job.skip = skip
    job.remap = remap
    job.verify_crc = verify_crc
    job.rows = &rows
    job.hb = &hb
    planned = 0  # rows of the batches handed to the parser so far
    chunk_bytes = _CHUNK_BYTES
    # Two threads: compressed input as a pipeline of chunks (one chunk has
    # nothing to overlap); uncompressed input split by batches.
    split = not in_arena and _CPUS > 1 and 1 < bad < 0xFFFFFFFF and n >= _SPLIT_BYTES
    parser = _Worker(split or (_CPUS > 1 and in_arena and bad > 1 and n > chunk_bytes))
    try:
        if in_arena:
            arena.before_grow = parser.wait_idle
        k = 0
        if split:
            job.base = buf
            exc2 = _parse_split(parser, job, &bad, &rows)
            if exc2 is not None:
                exc = exc2
            k = bad
        while k < bad:
            # Chunk k .. j: checked and decompressed here while the parser
            # may still be busy with the chunk before it.
            j = k
            chunk = 0
            while j < bad and (j == k or chunk < chunk_bytes):
                chunk += LOG_OVERHEAD + bp[j].batch_length
                j += 1
            pending = None  # this chunk's error: it stands only if the parser's chunk is good
            if verify_crc:
                stop = _check_crcs(buf, bp, k, j, skip, &err)
                if stop < j:
                    pending = _make_error(&err, IN_INPUT, 0, 0)
                    j = stop
            if in_arena:
                arena_view = None  # let the arena grow in place
                stop, exc2 = _decompress_payloads(mv, buf, bp, k, j, pstart, pend, arena, limit, skip,
                                                  parser.threaded)
                if exc2 is not None:
                    pending = exc2
                    j = stop
                arena_view = arena.view()
                base = &arena_view[0] if arena_view.shape[0] > 0 else NULL
            # Row counts: v2 counts are claims to check against the bytes;
            # a legacy wrapper's comes from framing its inner message set.
            memset(&err, 0, sizeof(err))
            need = planned
            stop = _place_rows(base, bp, k, j, &pstart[0], &pend[0], &last_inner[0], skip, &need, &err)
            if stop < j:
                pending = _place_error(&err, bp, stop, pstart[stop], istart[stop])
                j = stop
            parser.wait(False)
            if job.err.code:  # the chunk before failed: its error is the earlier one
                break
            if pending is not None:
                exc = pending
                bad = j
            # The parser is idle: the row buffer may move.
            if not _reserve(<void**>&rows.records, &rows.capacity, need, sizeof(record_t)):
                raise MemoryError()
            planned = need
            job.base = base
            job.first = k
            job.end = j
            parser.submit(_parse_chunk, job, False)
            k = j
        parser.wait(False)
        if job.err.code:
            stop = job.err.batch_index
            exc = _make_error(&job.err, IN_INPUT if not in_arena else
                              IN_ARENA_COPY if bp[stop].compression == 0 else IN_ARENA_INFLATED,
                              pstart[stop], istart[stop])
            bad = stop
            # Drop the bad batch's rows.
            hb.size = (rows.records[rows.size - 1].headers_start + rows.records[rows.size - 1].headers_count
                       if rows.size else 0)
        arena_view = None
        out_data = data if arena is None else arena.result()
        kept = batches[:bad]
        if remap != NULL:
            kept = kept[~skip_arr[:bad]]
        table = _table(kept, &rows, &hb, out_data,
                       consumed if exc is None else bp[bad].position,
                       n if exc is None else -1, len(kept))
        if remap != NULL and bad:
            table.next_offset = bp[bad - 1].base_offset + bp[bad - 1].last_offset_delta + 1
    finally:
        parser.close(False)  # first: the parse thread may still be writing rows
        if in_arena:
            arena.before_grow = None
        free(rows.records)
        free(hb.rows)
    if exc is None:
        return table
    exc.partial = table
    raise exc


# ---------------------------------------------------------------------------
# scan: batch headers only

cdef void _scan_control(const uint8_t* buf, batch_t* b, int64_t end) noexcept nogil:
    """``control_type`` / ``coordinator_epoch`` of an uncompressed control batch
    from its first record's key and value, every field bounds-checked against
    the record (and the batch, which ends at ``end``); left -1 where they do
    not parse (decode reports why)."""
    cdef const uint8_t* p = buf + b.position + BATCH_OVERHEAD
    cdef const uint8_t* e = buf + end
    cdef int32_t length, offset_delta, key_length, value_length
    cdef int64_t timestamp_delta
    if b.record_count < 1:
        return
    if _read_varint(&p, e, &length) != E_OK or length < 1 or length > e - p:
        return
    e = p + length
    p += 1  # attributes
    if (_read_varlong(&p, e, &timestamp_delta) != E_OK or _read_varint(&p, e, &offset_delta) != E_OK
            or _read_varint(&p, e, &key_length) != E_OK):
        return
    if key_length < 4 or key_length > e - p:
        return
    b.control_type = <int16_t>_be16(p + 2)
    p += key_length
    if _read_varint(&p, e, &value_length) != E_OK:
        return
    if value_length >= 6 and value_length <= e - p:
        b.coordinator_epoch = <int32_t>_be32(p + 2)


def scan(object data, Py_ssize_t start=0, Py_ssize_t stop=-1):
    """The batch headers of ``data[start:stop]``, without parsing records.

    Frames the batches as :func:`decode` does (an incomplete trailing batch
    ends the scan without an error) and fills each one's header fields; no
    record is parsed, nothing is decompressed and no CRC is computed.

    Parameters
    ----------
    data : buffer
        Any C-contiguous buffer (bytes, memoryview, mmap, NumPy array).
    start : int, default 0
        Where the first batch starts.
    stop : int, default -1
        Where the bytes scanned end (-1 or past the end: the end of ``data``).

    Returns
    -------
    batches : numpy.ndarray
        :data:`BATCH_DTYPE` rows of the complete batches before the first bad
        one; ``position`` is a byte offset in ``data`` (not from ``start``).
        ``first_record`` is -1; a legacy compressed wrapper's
        ``record_count`` is -1 (unknown without decompressing); an
        uncompressed control batch's ``control_type`` and
        ``coordinator_epoch`` are read from its first record's key and value
        (-1 when they do not parse, and always for a compressed one).
    consumed : int
        Bytes from ``start`` that those batches span.
    error : CorruptRecordError or None
        Why scanning stopped before ``stop``, if not at an incomplete tail:
        a frame that cannot be a batch (length, magic, codec, record count,
        a legacy message's fields), with ``position`` and ``batch_position``
        offsets in ``data``.

    Examples
    --------
    >>> import kbatch
    >>> from kbatch._core import scan
    >>> raw = kbatch.encode([b"a", b"b", b"c"], max_batch_records=2)
    >>> rows, consumed, error = scan(raw + raw[:20])
    >>> rows[["position", "base_offset", "record_count"]].tolist(), consumed == len(raw), error
    ([(0, 0, 2), (77, 2, 1)], True, None)
    """
    cdef object mv = _byte_view(data)
    cdef const uint8_t[::1] view = mv
    cdef int64_t n = view.shape[0]
    cdef int64_t count = 0, consumed = 0, good, k
    cdef const uint8_t* buf = NULL
    cdef batch_t* bp = NULL
    cdef int64_t[::1] pstart
    cdef int64_t[::1] pend
    cdef error_t err
    cdef object batches, exc = None
    if stop < 0 or stop > n:
        stop = n
    if start < 0 or start > stop:
        raise ValueError(f"start {start} is outside [0, {stop}]")
    if n > 0:
        buf = &view[0] + start
    memset(&err, 0, sizeof(err))
    with nogil:
        count = _count_entries(buf, stop - start, &consumed)
    batches = np.zeros(count, dtype=BATCH_DTYPE)
    good = count
    if count:
        pstart = np.empty(count, dtype=np.int64)
        pend = np.empty(count, dtype=np.int64)
        bp = <batch_t*>_row_ptr(batches)
        with nogil:
            good = _fill_batches(buf, stop - start, bp, count, &pstart[0], &pend[0], &err)
            for k in range(good):
                bp[k].first_record = -1
                if bp[k].magic < 2:
                    if bp[k].compression != 0:
                        bp[k].record_count = -1
                elif bp[k].is_control and bp[k].compression == 0:
                    _scan_control(buf, bp + k, bp[k].position + LOG_OVERHEAD + bp[k].batch_length)
                bp[k].position += start
        if err.code:
            consumed = bp[good].position if good < count else consumed
            err.position += start
            err.batch_position += start
            exc = _make_error(&err, IN_INPUT, 0, 0)
        if good < count:
            batches = batches[:good]
    return batches, consumed, exc


cdef object _table(object batches, rows_t* rows, header_buf_t* hb, object out_data,
                   int64_t consumed, int64_t n, int64_t nbatches):
    cdef object records = _rows_array(<void**>&rows.records, rows.size, sizeof(record_t), RECORD_DTYPE)
    cdef object headers = _rows_array(<void**>&hb.rows, hb.size, sizeof(header_t), HEADER_DTYPE)
    next_offset = None
    if nbatches:
        last = batches[nbatches - 1]
        next_offset = int(last["base_offset"]) + int(last["last_offset_delta"]) + 1
    return RecordTable(
        records=records,
        batches=batches,
        headers=headers,
        data=out_data,
        consumed_bytes=consumed,
        truncated=n >= 0 and consumed < n,
        next_offset=next_offset,
    )


# Compressed chunks on two threads. Where a payload tells the exact size of
# each piece it decompresses to (a zstd frame that declares its content
# size, as kbatch and librdkafka write them, though Java's streaming frames
# do not; each block of xerial or raw snappy, whose size leads its data; a
# gzip member, by its trailer, checked once inflated), every piece can be
# given its place in the arena before it is decompressed. (Kafka's LZ4 frame
# does not say what its blocks decompress to: lz4 has a way of its own, below.)
# When every batch of a chunk is such a payload, the chunk's room is reserved
# at once and its pieces are decompressed by the calling thread and a helper
# thread together (cramjam runs snappy and inflate, and ctypes libzstd, without the GIL), each
# taking the next piece neither has taken. Anything else, or any failure, and
# the chunk goes through _compression one batch at a time, which says what
# is wrong. The zstd frame and xerial framing are those of
# kbatch/_compression.py's grammar; a raw snappy block starts with its
# uncompressed length (varint32, little-endian base 128).

cdef int64_t _zstd_single_size(const uint8_t* p, int64_t n) noexcept nogil:
    """The content size of a payload that is exactly one well-formed zstd frame
    declaring it (and whose blocks can produce it); -1 for anything else."""
    cdef int64_t pos = 5, fcs = 0, bound = 0, bsize, need
    cdef int fcs_bytes, hlen, btype, i
    cdef uint32_t bh
    cdef uint8_t fhd
    if n < 5 or _le32(p) != <uint32_t>0xFD2FB528:
        return -1
    fhd = p[4]
    if fhd & 0x08 or not (fhd >> 6 or fhd & 0x20):  # reserved bit set; no content size
        return -1
    fcs_bytes = (1 << (fhd >> 6)) if fhd >> 6 else 1  # 1 (single segment), 2, 4, 8
    hlen = (0 if fhd & 0x20 else 1) + ((1 << ((fhd & 3) - 1)) if fhd & 3 else 0) + fcs_bytes
    if n - pos < hlen:
        return -1
    for i in range(fcs_bytes):
        fcs |= <int64_t>p[pos + hlen - fcs_bytes + i] << (8 * i)
    if fcs_bytes == 2:
        fcs += 256
    if fcs < 0:
        return -1
    pos += hlen
    while True:
        if n - pos < 3:
            return -1
        bh = <uint32_t>p[pos] | <uint32_t>p[pos + 1] << 8 | <uint32_t>p[pos + 2] << 16
        pos += 3
        btype = (bh >> 1) & 3
        bsize = bh >> 3
        if btype == 3 or bsize > 131072:
            return -1
        need = 1 if btype == 1 else bsize
        bound += 131072 if btype == 2 else bsize
        if n - pos < need:
            return -1
        pos += need
        if bh & 1:
            break
    if fhd & 0x04:
        pos += 4
    if pos != n or fcs > bound:
        return -1
    return fcs


cdef int64_t _snappy_block_size(const uint8_t* p, int64_t n) noexcept nogil:
    """The declared size of a raw snappy block (-1: no valid length, or more
    than its compressed size can produce, as _compression checks it)."""
    cdef uint64_t size = 0
    cdef int i = 0
    while True:
        if i >= n or i == 5:
            return -1
        size |= <uint64_t>(p[i] & 0x7F) << (7 * i)
        if p[i] < 0x80:
            break
        i += 1
    if size > <uint64_t>0xFFFFFFFF or <int64_t>size > 22 * n + 8:  # _SNAPPY_MAX_RATIO
        return -1
    return <int64_t>size


cdef int64_t _plain_pieces(int codec, const uint8_t* p, int64_t n, int64_t src, list pieces,
                           object decompress) except -2:
    """Append a payload's pieces, ``(start, stop, size, decompress)`` with
    start/stop in the input (the payload starts at ``src``), to ``pieces``;
    their total size, or -1 when the payload is not plain (see above)."""
    cdef int64_t pos, length, size, total = 0
    if codec == 4:
        size = _zstd_single_size(p, n)
        if size >= 0:
            pieces.append((src, src + n, size, decompress))
        return size
    if codec == 1:  # taken at its trailer's word (ISIZE), as _compression._gunzip's fast path
        if n < 18 or p[0] != 0x1F or p[1] != 0x8B or p[2] != 8:
            return -1
        size = <int64_t>_le32(p + n - 4)
        if size < 8192 or size > 1032 * n:  # _CRAMJAM_GZIP_MIN, _DEFLATE_MAX_RATIO
            return -1
        pieces.append((src, src + n, size, decompress))
        return size
    if codec != 2 or n == 0:
        return -1
    if n < 16 or memcmp(p, b"\x82SNAPPY\x00", 8) != 0:  # one raw block (librdkafka)
        size = _snappy_block_size(p, n)
        if size >= 0:
            pieces.append((src, src + n, size, decompress))
        return size
    if <int32_t>_be32(p + 8) < 1:  # SnappyCodec.MINIMUM_COMPATIBLE_VERSION
        return -1
    pos = 16
    while pos < n:
        if n - pos < 4:
            return -1
        length = <int32_t>_be32(p + pos)
        pos += 4
        if length <= 0 or length > n - pos:  # (and a second xerial header: inline)
            return -1
        size = _snappy_block_size(p + pos, length)
        if size < 0:
            return -1
        pieces.append((src + pos, src + pos + length, size, decompress))
        total += size
        pos += length
    return total


class _Pieces:
    """Payload pieces to decompress into their places, taken one at a time by either thread."""

    def __init__(self, items):
        self.items = items  # (decompress_into, src, dst)
        self.order = iter(range(len(items)))  # next() on it is atomic under the GIL
        self.failed = False

    def run(self):
        for i in self.order:
            if self.failed:
                return
            decompress, src, dst = self.items[i]
            try:
                if decompress(src, dst) != len(dst):
                    self.failed = True
            except Exception:
                self.failed = True


_helper = None
_helper_pid = 0


def _helper_thread():
    """A one-thread executor for this process (a forked child makes its own)."""
    global _helper, _helper_pid
    if _helper is None or _helper_pid != os.getpid():
        from concurrent.futures import ThreadPoolExecutor
        _helper = ThreadPoolExecutor(1, thread_name_prefix="kbatch-inflate")
        _helper_pid = os.getpid()
    return _helper


#: Codec id -> decompress-into-a-buffer, for the payloads _plain_pieces takes: cramjam's,
#: and for zstd _compression's (libzstd's one-shot decoder, no window besides the output),
#: set at the first use.
_DECOMPRESS_INTO = {1: _cramjam.gzip.decompress_into, 2: _cramjam.snappy.decompress_raw_into, 4: None}


cdef bint _inflate_chunk(object mv, const uint8_t* base, batch_t* bp, int64_t first, int64_t end,
                         int64_t[::1] pstart, int64_t[::1] pend, object arena, object limit,
                         const uint8_t* skip) except -1:
    """Batches ``first .. end`` decompressed on two threads when each payload is
    plain (see above); False, the arena as it was, if not."""
    cdef int64_t k, size, total = 0
    cdef list pieces = [], spans = []
    if _DECOMPRESS_INTO[4] is None:
        from kbatch import _compression
        _DECOMPRESS_INTO[4] = _compression.zstd_decompress_into
    for k in range(first, end):
        if skip != NULL and skip[k]:
            continue
        if bp[k].magic != 2 or bp[k].compression not in _DECOMPRESS_INTO:
            return False
        size = _plain_pieces(bp[k].compression, base + pstart[k], pend[k] - pstart[k], pstart[k], pieces,
                             _DECOMPRESS_INTO[bp[k].compression])
        if size < 0:
            return False
        spans.append((k, total, size))
        total += size
    if len(pieces) < 2 or total > limit - arena.size:
        return False
    start = arena.size
    with arena.reserve(total) as out:
        items = []
        at = 0
        for a, b, size, decompress in pieces:
            items.append((decompress, mv[a:b], out[at:at + size]))
            at += size
        work = _Pieces(items)
        helper = _helper_thread().submit(work.run)
        try:
            work.run()
        finally:
            # Not started yet (busy with another caller's chunk): nothing left for it to do.
            # Started: it writes into ``out``, so wait for it whatever happens.
            if not helper.cancel():
                helper.result()
            del items, work.items
    if work.failed:
        return False
    for k, at, size in spans:
        pstart[k] = start + at
        pend[k] = start + at + size
    arena.commit(total)
    return True


# LZ4 frames in C. Kafka's LZ4 frame (kbatch/_compression.py has its grammar)
# does not say what its blocks decompress to, so an lz4 chunk cannot be laid
# out piece by piece as above. But no block decompresses to more than the
# frame's maximum block size, which bounds each batch. The calling thread
# takes a chunk's batches from the front, each right behind the one before;
# a helper thread takes them from the back, each into its slot (the bounds of
# the batches before it); then the back's batches are moved down behind the
# front's (a memmove of what the back did, in cache). Every v2 frame of
# independent blocks takes this path, as Java and librdkafka write them (FLG
# 0x60), kafka-python (0x68: a content size, skipped as Java does) and aiokafka
# (0x70: block checksums), and each is checked as _compression checks it: the
# descriptor's HC; with any checksum flag (where _compression hands the frame
# to liblz4's frame decoder) every block checksum, the content checksum and
# a content size. The blocks go through liblz4's LZ4_decompress_safe, which
# never reads or writes outside the buffers it is given, and the checksums
# through its XXH32, both in the lz4 package's own extension modules (which
# export liblz4). Without them, for anything else (magic 0 and 1, dependent
# blocks, a dictionary id) or on any failure, _compression decodes the chunk
# one block at a time and says what is wrong.

ctypedef int (*lz4_decompress_fn)(const char* src, char* dst, int src_size, int dst_capacity) noexcept nogil
ctypedef uint32_t (*xxh32_fn)(const void* data, size_t size, uint32_t seed) noexcept nogil

cdef lz4_decompress_fn _lz4_found = NULL       # what _lz4_load found
cdef lz4_decompress_fn _lz4_decompress = NULL  # what is used (tests turn it off)
cdef xxh32_fn _xxh32 = NULL
cdef bint _lz4_tried = False                   # _lz4_load has run
cdef int64_t _lz4_c_chunks = 0                 # chunks decompressed this way (tests)


def _lz4_load():
    """Find liblz4's LZ4_decompress_safe and XXH32 in the lz4 package; check both.

    Through ctypes (its dlopen), on the first lz4 chunk: called from here,
    dlopen/dlsym would tie a wheel built on glibc 2.34 or later to that glibc.
    """
    global _lz4_found, _lz4_decompress, _lz4_tried, _xxh32
    _lz4_tried = True
    from kbatch import _compression
    try:
        import ctypes
        import lz4.block
        import lz4.block._block as block_module
        import lz4.frame._frame as frame_module

        def address(module, name):
            lib = ctypes.CDLL(module.__file__, mode=os.RTLD_NOW | os.RTLD_NOLOAD)  # loaded already
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0

        decompress_at = address(block_module, "LZ4_decompress_safe")
        xxh32_at = address(frame_module, "XXH32")
    except (ImportError, OSError, AttributeError):  # no ctypes, no such module or symbol
        return
    if not decompress_at or not xxh32_at:
        return
    cdef lz4_decompress_fn f = <lz4_decompress_fn><uintptr_t>decompress_at
    cdef xxh32_fn h = <xxh32_fn><uintptr_t>xxh32_at
    cdef bytes raw = b"kbatch: LZ4_decompress_safe " * 40
    cdef bytes block = lz4.block.compress(raw, store_size=False)
    cdef bytearray out = bytearray(len(raw) + 16)
    cdef char* o = out
    if f(block, o, len(block), len(out)) != len(raw) or bytes(out[:len(raw)]) != raw:
        return
    if (h(<const char*>raw, 10, 0) >> 8) & 0xFF != _compression._lz4_hc(raw[:10]):
        return
    _xxh32 = h
    _lz4_found = _lz4_decompress = f


def _lz4_in_c(object use=None):
    """Tests: whether LZ4 frames are decompressed in C (see above), and how
    many chunks were; ``use`` False turns it off, True back on (when found)."""
    global _lz4_decompress
    if not _lz4_tried:
        _lz4_load()
    if use is not None:
        _lz4_decompress = _lz4_found if use else NULL
    return _lz4_decompress != NULL, _lz4_c_chunks


cdef enum:
    LZ4_BLOCK_CHECKSUM = 0x10    # FLG bits
    LZ4_CONTENT_SIZE = 0x08
    LZ4_CONTENT_CHECKSUM = 0x04


cdef int64_t _lz4_frame_bound(const uint8_t* p, int64_t n) noexcept nogil:
    """A bound on what an LZ4 frame of independent blocks decompresses to, its
    descriptor and framing checked; -1 for anything else (see above)."""
    cdef int64_t pos, bound = 0, size, max_block, tail
    cdef uint32_t word
    cdef uint8_t flg, bd
    if n < 11 or _le32(p) != 0x184D2204:
        return -1
    flg = p[4]
    bd = p[5]
    if flg >> 6 != 1 or flg & 0x03 or not flg & 0x20 or bd & 0x8F or bd >> 4 < 4:
        return -1
    pos = 15 if flg & LZ4_CONTENT_SIZE else 7
    if n < pos + 4 or (_xxh32(p + 4, pos - 5, 0) >> 8) & 0xFF != p[pos - 1]:
        return -1
    max_block = <int64_t>1 << (2 * (bd >> 4) + 8)
    tail = 4 if flg & LZ4_BLOCK_CHECKSUM else 0
    while True:
        if n - pos < 4:
            return -1
        word = _le32(p + pos)
        pos += 4
        size = word & 0x7FFFFFFF
        if size == 0:  # EndMark: nothing may follow it (_compression says what is wrong)
            if pos + (4 if flg & LZ4_CONTENT_CHECKSUM else 0) != n:
                return -1
            return bound
        if size > max_block or size + tail > n - pos:
            return -1
        bound += size if word >> 31 else max_block  # stored: as it is
        pos += size + tail


cdef int64_t _lz4_frame_into(const uint8_t* p, int64_t n, uint8_t* out, int64_t room) noexcept nogil:
    """Decompress a frame of ``n`` bytes that _lz4_frame_bound took into ``out``
    (``room``: its bound); the bytes written, or -1 if a block or a checksum is
    bad. Every field is read once here and checked against ``n`` and ``room``
    again: the payload may be another thread's ``bytearray``, rewritten since
    _lz4_frame_bound read it (then -1 or garbage, never a read or write
    outside the two buffers)."""
    cdef uint8_t flg
    cdef int64_t pos, at = 0, size, tail
    cdef int max_block, got
    cdef bint checked
    cdef uint32_t word
    if n < 11:
        return -1
    flg = p[4]
    max_block = 1 << (2 * ((p[5] >> 4) & 7) + 8)
    pos = 15 if flg & LZ4_CONTENT_SIZE else 7
    tail = 4 if flg & LZ4_BLOCK_CHECKSUM else 0
    checked = (flg & (LZ4_BLOCK_CHECKSUM | LZ4_CONTENT_CHECKSUM)) != 0
    while True:
        if n - pos < 4:
            return -1
        word = _le32(p + pos)
        pos += 4
        size = word & 0x7FFFFFFF
        if size == 0:
            break
        if size + tail > n - pos:
            return -1
        if tail and _xxh32(p + pos, size, 0) != _le32(p + pos + size):
            return -1
        if word >> 31:  # stored uncompressed
            if size > room - at:
                return -1
            memcpy(out + at, p + pos, size)
            at += size
        else:
            got = _lz4_decompress(<const char*>p + pos, <char*>out + at, <int>size,
                                  <int>min(<int64_t>max_block, room - at))
            if got < 0:
                return -1
            at += got
        pos += size + tail
    if flg & LZ4_CONTENT_CHECKSUM and (n - pos < 4 or _xxh32(out, at, 0) != _le32(p + pos)):
        return -1
    # liblz4's frame decoder (_compression's path for frames with checksums) holds
    # the output to a content size; the one without checksums skips it, as Java does.
    if checked and flg & LZ4_CONTENT_SIZE and <uint64_t>at != (<uint64_t>_le32(p + 6) | (<uint64_t>_le32(p + 10) << 32)):
        return -1
    return at


cdef struct lz4_job_t:
    const uint8_t* src      # the input
    const int64_t* pstart   # payloads in the input, by batch
    const int64_t* pend
    const uint8_t* skip     # by batch; may be NULL
    int64_t first           # the chunk's first batch; what follows is by batch - first
    uint64_t range          # batches not yet taken (see kb_take)
    uint8_t* out            # the chunk's room
    const int64_t* slot     # where a batch taken from the back goes (the bounds before it)
    int64_t* at             # where each batch went
    int64_t* size           # what each decompressed to
    int64_t used            # the front's bytes, one batch after the other from ``out``
    int64_t back_first      # the first batch the back took
    bint front_failed, back_failed


cdef bint _lz4_take(lz4_job_t* job, bint from_back) noexcept nogil:
    """Decompress batches taken from one end of the chunk until none is left;
    False (and the rest of the range dropped) at a corrupt block."""
    cdef int64_t i, k, got
    cdef uint8_t* dst
    i = kb_take(&job.range, from_back)
    while i >= 0:
        k = job.first + i
        if job.skip == NULL or not job.skip[k]:
            dst = job.out + (job.slot[i] if from_back else job.used)
            got = _lz4_frame_into(job.src + job.pstart[k], job.pend[k] - job.pstart[k], dst,
                                  job.slot[i + 1] - job.slot[i])
            if got < 0:
                kb_cut(&job.range, 0)
                return False
            job.at[i] = dst - job.out
            job.size[i] = got
            if not from_back:
                job.used += got
        if from_back:
            job.back_first = i
        i = kb_take(&job.range, from_back)
    return True


cdef void _lz4_back(void* arg) noexcept nogil:
    cdef lz4_job_t* job = <lz4_job_t*>arg
    job.back_failed = not _lz4_take(job, True)


#: Idle C threads that take lz4 batches from the back of a chunk (one per concurrent
#: decode; beyond _LZ4_HELPERS_KEPT, those handed back are let go).
_lz4_helpers = []
_lz4_helpers_pid = 0
_LZ4_HELPERS_KEPT = 4


cdef _Worker _lz4_helper():
    global _lz4_helpers, _lz4_helpers_pid
    if _lz4_helpers_pid != os.getpid():  # (a forked child has none of its parent's threads)
        _lz4_helpers = []
        _lz4_helpers_pid = os.getpid()
    try:
        return _lz4_helpers.pop()  # atomic under the GIL
    except IndexError:
        return _Worker(True)


cdef bint _inflate_lz4_chunk(const uint8_t* src, batch_t* bp, int64_t first, int64_t end,
                             int64_t[::1] pstart, int64_t[::1] pend, object arena, object limit,
                             const uint8_t* skip, bint two) except -1:
    """Batches ``first .. end`` decompressed in C when each is a v2 LZ4 frame of
    independent blocks (see above), on two threads with ``two``; False, the
    arena as it was, if not."""
    global _lz4_c_chunks
    cdef int64_t i, k, bound, count = end - first, start, used = 0
    cdef int64_t[::1] slot = np.empty(count + 1, np.int64)
    cdef int64_t[::1] at = np.zeros(count, np.int64)
    cdef int64_t[::1] size = np.zeros(count, np.int64)
    cdef lz4_job_t job
    cdef _Worker helper = None
    cdef uint8_t[::1] room
    if not _lz4_tried:
        _lz4_load()
    if _lz4_decompress == NULL or count == 0:
        return False
    slot[0] = 0
    for i in range(count):
        k = first + i
        bound = 0
        if skip == NULL or not skip[k]:
            if bp[k].magic != 2 or bp[k].compression != 3:
                return False
            bound = _lz4_frame_bound(src + pstart[k], pend[k] - pstart[k])
            if bound < 0:
                return False
        slot[i + 1] = slot[i] + bound
    if slot[count] == 0 or slot[count] > limit - arena.size:
        return False  # nothing to write; or too much, maybe not in fact: _compression knows
    memset(&job, 0, sizeof(job))
    job.src = src
    job.pstart = &pstart[0]
    job.pend = &pend[0]
    job.skip = skip
    job.first = first
    job.range = <uint64_t>count << 32
    job.slot = &slot[0]
    job.at = &at[0]
    job.size = &size[0]
    job.back_first = count
    if two and count > 1:
        helper = _lz4_helper()
    start = arena.size
    with arena.reserve(slot[count]) as out:
        room = out
        job.out = &room[0]
        if helper is not None:
            helper.submit(_lz4_back, &job, False)
        with nogil:
            job.front_failed = not _lz4_take(&job, False)
        if helper is not None:
            helper.wait(False)
            if len(_lz4_helpers) < _LZ4_HELPERS_KEPT:
                _lz4_helpers.append(helper)
        used = job.used
        if not (job.front_failed or job.back_failed):
            # The back's batches, each at its slot, moved down behind the front's.
            for i in range(job.back_first, count):
                memmove(job.out + used, job.out + at[i], size[i])
                at[i] = used
                used += size[i]
        room = None  # (before ``out`` is released)
    if job.front_failed or job.back_failed:
        return False
    for i in range(count):
        k = first + i
        if skip == NULL or not skip[k]:
            pstart[k] = start + at[i]
            pend[k] = pstart[k] + size[i]
    arena.commit(used)
    _lz4_c_chunks += 1
    return True


cdef tuple _decompress_payloads(object mv, const uint8_t* base, batch_t* bp, int64_t first, int64_t end,
                                int64_t[::1] pstart, int64_t[::1] pend, object arena, object limit,
                                const uint8_t* skip, bint two):
    """Append batches ``first .. end``'s records to the arena, decompressed.

    Uncompressed batches are copied so that every payload of the buffer lives
    in one place. ``pstart``/``pend`` become offsets into the arena. Batches
    with ``skip[k]`` set (``skip`` may be NULL) are left out. Returns
    ``(end or the first bad batch, exception or None)``.
    """
    from kbatch import _compression

    cdef int64_t k, start, stop
    if two and _inflate_chunk(mv, base, bp, first, end, pstart, pend, arena, limit, skip):
        return end, None
    if _inflate_lz4_chunk(base, bp, first, end, pstart, pend, arena, limit, skip, two):
        return end, None
    for k in range(first, end):
        if skip != NULL and skip[k]:
            continue
        start = pstart[k]
        stop = pend[k]
        pstart[k] = arena.size
        try:
            _compression.decompress_into(bp[k].compression, mv[start:stop], arena, limit, magic=bp[k].magic)
        except KBatchError as cause:
            # (a codec error that knows its place in the payload has it as its position)
            exc = type(cause)(cause.reason, start + max(cause.position, 0), k, cause.field or "records",
                              batch_position=bp[k].position)
            exc.__cause__ = cause
            return k, exc
        pend[k] = arena.size
    return end, None


# ---------------------------------------------------------------------------
# Encoding
#
# Every input (Python sequences, Arrow-style columns, one record at a time)
# is first gathered into C rows: a pointer and length per key and value, a
# timestamp, and a range of header rows. Planning (splitting into batches
# under the limits) and writing are then plain C without the GIL, straight
# into the output bytes; each batch's CRC-32C is computed once it is final.

cdef struct rec_in_t:
    int64_t timestamp
    const uint8_t* key
    const uint8_t* value
    int64_t key_length       # -1 = null
    int64_t value_length     # -1 = null
    int64_t headers_first    # first row in the header rows
    int64_t headers_count
    int64_t headers_size     # encoded bytes of the headers, without their count
    int64_t body_size        # _body_size in its batch: set by _plan (or append), used by _write_record


cdef struct hdr_in_t:
    const uint8_t* key
    const uint8_t* value
    int64_t key_length
    int64_t value_length     # -1 = null


cdef struct plan_t:
    int64_t first           # index of the batch's first record
    int64_t end             # one past its last record
    int64_t size            # bytes of the uncompressed batch, header included


cdef enum:
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20
    MAX_BATCH_SIZE = 0x7FFFFFFF   # batchLength is an int32


cdef class _Inputs:
    """C rows describing the records to encode, and the objects their pointers point into."""

    cdef rec_in_t* recs
    cdef hdr_in_t* hdrs
    cdef int64_t n, nh, hcap
    cdef list keep

    def __cinit__(self, int64_t n):
        # Spare blocks (pages already mapped): a large encode's rows are written once and read twice.
        self.recs = <rec_in_t*>_take_block(max(n, 1) * sizeof(rec_in_t))
        self.hdrs = NULL
        self.n = n
        self.nh = 0
        self.hcap = 0
        self.keep = []

    def __dealloc__(self):
        _give_block(self.recs)
        _give_block(self.hdrs)

    cdef bint room_for_headers(self, int64_t count) noexcept:
        """Make room for ``count`` more header rows (False when out of memory)."""
        cdef int64_t cap = self.hcap
        cdef hdr_in_t* grown
        if self.nh + count <= cap:
            return True
        cap = max(2 * cap, self.nh + count, 16)
        grown = <hdr_in_t*>_alloc_block(cap * sizeof(hdr_in_t))
        if grown == NULL:
            return False
        if self.nh:
            memcpy(grown, self.hdrs, self.nh * sizeof(hdr_in_t))
        _give_block(self.hdrs)
        self.hdrs = grown
        self.hcap = cap
        return True

    cdef hdr_in_t* add_headers(self, int64_t count) except NULL:
        if not self.room_for_headers(count):
            raise MemoryError()
        self.nh += count
        return self.hdrs + self.nh - count


cdef int _bytes_of_other(object obj, const uint8_t** ptr, int64_t* length, _Inputs inp,
                         str what, Py_ssize_t index) except -1:
    """_bytes_of for anything but exact bytes: None, or a buffer copied once."""
    if obj is None:
        ptr[0] = NULL
        length[0] = -1
        return 0
    if PyUnicode_Check(obj) or not PyObject_CheckBuffer(obj):
        raise TypeError(f"{what} {index} must be bytes-like or None, got {type(obj).__name__}")
    obj = bytes(memoryview(obj).cast("B"))
    inp.keep.append(obj)
    ptr[0] = <const uint8_t*>PyBytes_AS_STRING(obj)
    length[0] = PyBytes_GET_SIZE(obj)
    return 0


cdef inline int _bytes_of(object obj, const uint8_t** ptr, int64_t* length, _Inputs inp,
                          str what, Py_ssize_t index) except -1:
    """Point at a bytes-like item (None: null). Non-bytes buffers are copied once."""
    if PyBytes_CheckExact(obj):  # the common case, inlined; the rest out of line
        ptr[0] = <const uint8_t*>PyBytes_AS_STRING(obj)
        length[0] = PyBytes_GET_SIZE(obj)
        return 0
    # (``inp`` rather than ``inp.keep``: no reference counting on the fast path)
    return _bytes_of_other(obj, ptr, length, inp, what, index)


cdef inline object _header_pairs(object headers, list keep):
    if headers is None:
        return ()
    if type(headers) is list or type(headers) is tuple:
        return headers
    # dicts, generators, ...: materialise once and keep the pairs alive
    pairs = tuple(headers.items()) if isinstance(headers, dict) else tuple(headers)
    keep.append(pairs)
    return pairs


cdef inline object _item(object seq, Py_ssize_t i):
    """``seq[i]`` for a list or tuple, always bounds-checked: Python code run
    while gathering (``__index__``, iterating a header pair) may shrink a list."""
    if PyList_CheckExact(seq):
        if i < PyList_GET_SIZE(seq):
            return <object>PyList_GET_ITEM(seq, i)
    elif PyTuple_CheckExact(seq):
        if i < PyTuple_GET_SIZE(seq):
            return <object>PyTuple_GET_ITEM(seq, i)
    return PySequence_GetItem(seq, i)


cdef enum:
    PREFETCH_AHEAD = 8


cdef inline bint _point_plain(PyObject* o, PyObject* none, const uint8_t** ptr, int64_t* length) noexcept:
    """None or exact bytes: point at it (True); anything else: False."""
    if o == none:
        ptr[0] = NULL
        length[0] = -1
        return True
    if _is_bytes(o):
        ptr[0] = <const uint8_t*>_bytes_data(o)
        length[0] = _bytes_size(o)
        return True
    return False


cdef int _gather_plain(_Inputs inp, int64_t i, PyObject* key, PyObject* value, PyObject* timestamp,
                       PyObject* headers, PyObject* none, int64_t now) noexcept:
    """:func:`_gather` for plain items through borrowed pointers: 0, or 1 at
    anything else (errors included), for the caller to start again with
    :func:`_gather` (which then says what is wrong). Runs no Python code and
    creates no Python object."""
    cdef rec_in_t* r = inp.recs + i
    cdef hdr_in_t* h
    cdef PyObject** pairs
    cdef PyObject* pair
    cdef PyObject* hkey
    cdef Py_ssize_t j, count = 0, klen
    cdef int64_t size = 0
    cdef int overflow = 0
    if not (_point_plain(key, none, &r.key, &r.key_length) and _point_plain(value, none, &r.value, &r.value_length)):
        return 1
    if timestamp == none:
        r.timestamp = now
    elif _is_int(timestamp):
        r.timestamp = _int_value(timestamp, &overflow)
        if overflow:
            return 1
    else:
        return 1
    if headers != none:
        if not (_is_list(headers) or _is_tuple(headers)):
            return 1
        count = _items_size(headers)
    r.headers_first = inp.nh
    r.headers_count = count
    if count:
        if not inp.room_for_headers(count):
            return 1
        h = inp.hdrs + inp.nh
        inp.nh += count
        pairs = _items(headers)
        for j in range(count):
            pair = pairs[j]
            if not (_is_tuple(pair) and _items_size(pair) == 2):
                return 1
            hkey = _items(pair)[0]
            if _is_str(hkey):
                if _is_ascii(hkey):
                    h.key = <const uint8_t*>_str_data(hkey)
                    h.key_length = _str_length(hkey)
                else:
                    h.key = <const uint8_t*>_str_utf8(hkey, &klen)
                    if h.key == NULL:
                        PyErr_Clear()
                        return 1
                    h.key_length = klen
            elif _is_bytes(hkey):
                h.key = <const uint8_t*>_bytes_data(hkey)
                h.key_length = _bytes_size(hkey)
            else:
                return 1
            if not _point_plain(_items(pair)[1], none, &h.value, &h.value_length):
                return 1
            size += (_varint_size(<int32_t>h.key_length) + h.key_length
                     + _varint_size(<int32_t>h.value_length) + (h.value_length if h.value_length > 0 else 0))
            h += 1
    if r.key_length > MAX_BATCH_SIZE or r.value_length > MAX_BATCH_SIZE or size > MAX_BATCH_SIZE:
        return 1
    r.headers_size = size
    return 0


cdef int _gather(_Inputs inp, int64_t i, object key, object value, object timestamp, object headers,
                 int64_t now) except -1:
    """Point record ``i``'s C row at its key, value and headers (any
    bytes-like items; Python code they run is fine: the caller holds
    snapshots). :func:`_gather_plain` is the fast path for plain items."""
    cdef rec_in_t* r = inp.recs + i
    cdef hdr_in_t* h
    cdef Py_ssize_t klen, j, count
    cdef int64_t size = 0
    _bytes_of(key, &r.key, &r.key_length, inp, "key", i)
    _bytes_of(value, &r.value, &r.value_length, inp, "value", i)
    r.timestamp = now if timestamp is None else <int64_t>timestamp
    pairs = _header_pairs(headers, inp.keep)
    count = PyList_GET_SIZE(pairs) if PyList_CheckExact(pairs) else len(pairs)
    r.headers_first = inp.nh
    r.headers_count = count
    if count:
        if inp.nh + count <= inp.hcap:  # room already: skip the method call
            h = inp.hdrs + inp.nh
            inp.nh += count
        else:
            h = inp.add_headers(count)
        for j in range(count):
            pair = _item(pairs, j)
            if PyTuple_CheckExact(pair) and PyTuple_GET_SIZE(pair) == 2:
                hkey = <object>PyTuple_GET_ITEM(pair, 0)
                hvalue = <object>PyTuple_GET_ITEM(pair, 1)
            else:
                hkey, hvalue = pair
            if PyUnicode_Check(hkey):
                if PyUnicode_IS_COMPACT_ASCII(hkey):  # its UTF-8 is its data
                    h.key = <const uint8_t*>PyUnicode_DATA(hkey)
                    h.key_length = PyUnicode_GET_LENGTH(hkey)
                else:
                    h.key = <const uint8_t*>PyUnicode_AsUTF8AndSize(hkey, &klen)
                    h.key_length = klen
            elif PyBytes_CheckExact(hkey):
                h.key = <const uint8_t*>PyBytes_AS_STRING(hkey)
                h.key_length = PyBytes_GET_SIZE(hkey)
            else:
                raise TypeError(f"header key of record {i} must be str or bytes, got {type(hkey).__name__}")
            _bytes_of(hvalue, &h.value, &h.value_length, inp, "header value of record", i)
            size += (_varint_size(<int32_t>h.key_length) + h.key_length
                     + _varint_size(<int32_t>h.value_length) + (h.value_length if h.value_length > 0 else 0))
            h += 1
    if r.key_length > MAX_BATCH_SIZE or r.value_length > MAX_BATCH_SIZE or size > MAX_BATCH_SIZE:
        raise ValueError(f"record {i} is larger than a batch can hold (2 GiB)")
    r.headers_size = size
    return 0


cdef inline int64_t _body_size(const rec_in_t* r, int64_t timestamp_delta, int32_t offset_delta) noexcept nogil:
    """Bytes of a record after its length varint."""
    return (1 + _varlong_size(timestamp_delta) + _varint_size(offset_delta)
            + _varint_size(<int32_t>r.key_length) + (r.key_length if r.key_length > 0 else 0)
            + _varint_size(<int32_t>r.value_length) + (r.value_length if r.value_length > 0 else 0)
            + _varint_size(<int32_t>r.headers_count) + r.headers_size)


cdef inline uint8_t* _put_bytes(uint8_t* p, const uint8_t* src, int64_t length) noexcept nogil:
    p = _write_varint(p, <int32_t>length)
    if 8 <= length <= 16:
        # Keys and header fields are mostly this short: two overlapping 8-byte
        # copies (fixed-size memcpy compiles to one load and store) instead of
        # a call into libc.
        memcpy(p, src, 8)
        memcpy(p + length - 8, src + length - 8, 8)
        p += length
    elif length > 0:
        memcpy(p, src, length)
        p += length
    return p


cdef uint8_t* _write_record(uint8_t* p, const rec_in_t* r, const hdr_in_t* hdrs, int64_t timestamp_delta,
                            int32_t offset_delta) noexcept nogil:
    cdef const hdr_in_t* h = hdrs + r.headers_first
    cdef int64_t j
    p = _write_varint(p, <int32_t>r.body_size)
    p[0] = 0  # attributes
    p = _write_varlong(p + 1, timestamp_delta)
    p = _write_varint(p, offset_delta)
    p = _put_bytes(p, r.key, r.key_length)
    p = _put_bytes(p, r.value, r.value_length)
    p = _write_varint(p, <int32_t>r.headers_count)
    for j in range(r.headers_count):
        p = _put_bytes(p, h[j].key, h[j].key_length)
        p = _put_bytes(p, h[j].value, h[j].value_length)
    return p


cdef uint8_t* _write_records(uint8_t* p, const rec_in_t* recs, const hdr_in_t* hdrs, int64_t first,
                             int64_t end) noexcept nogil:
    cdef int64_t i, base_ts = recs[first].timestamp
    for i in range(first, end):
        p = _write_record(p, recs + i, hdrs, recs[i].timestamp - base_ts, <int32_t>(i - first))
    return p


cdef void _write_batch_header(uint8_t* p, int64_t base_offset, int64_t size, int32_t leader_epoch,
                              int16_t attributes, int32_t last_offset_delta, int64_t base_timestamp,
                              int64_t max_timestamp, int64_t producer_id, int16_t producer_epoch,
                              int32_t base_sequence, int32_t record_count) noexcept nogil:
    _put64(p, <uint64_t>base_offset)
    _put32(p + 8, <uint32_t>(size - LOG_OVERHEAD))
    _put32(p + 12, <uint32_t>leader_epoch)
    p[16] = 2
    _put32(p + 17, 0)  # crc, filled once the batch is complete
    _put16(p + 21, <uint16_t>attributes)
    _put32(p + 23, <uint32_t>last_offset_delta)
    _put64(p + 27, <uint64_t>base_timestamp)
    _put64(p + 35, <uint64_t>max_timestamp)
    _put64(p + 43, <uint64_t>producer_id)
    _put16(p + 51, <uint16_t>producer_epoch)
    _put32(p + 53, <uint32_t>base_sequence)
    _put32(p + 57, <uint32_t>record_count)


cdef inline void _seal(_Span span, uint8_t* batch, Py_ssize_t size) except *:
    """Write the CRC-32C of a finished batch (attributes .. end)."""
    _put32(batch + 17, _span_crc32c(span, batch + 21, size - 21, 0))


cdef int64_t _plan(rec_in_t* recs, int64_t n, int64_t max_records, int64_t max_bytes,
                   plan_t* plans) noexcept nogil:
    """Split records into batches under the limits; return the number of batches.

    Also stores each record's body size in its batch for _write_record.
    """
    cdef int64_t i = 0, nb = 0, first, size, rsize, body
    while i < n:
        first = i
        size = BATCH_OVERHEAD
        while i < n and i - first < max_records:
            # (a record that starts the next batch instead is sized again there)
            body = _body_size(recs + i, recs[i].timestamp - recs[first].timestamp, <int32_t>(i - first))
            recs[i].body_size = body
            rsize = _varint_size(<int32_t>body) + body
            if i > first and size + rsize > max_bytes:
                break
            size += rsize
            i += 1
        plans[nb].first = first
        plans[nb].end = i
        plans[nb].size = size
        nb += 1
    return nb


cdef struct plan_job_t:
    # Records first .. end planned into ``plans`` (batch indices from 0,
    # record indices absolute); ``nb`` batches.
    rec_in_t* recs
    int64_t first
    int64_t end
    int64_t max_records
    int64_t max_bytes
    plan_t* plans
    int64_t nb


cdef void _plan_range(void* arg) noexcept nogil:
    cdef plan_job_t* job = <plan_job_t*>arg
    cdef int64_t k
    job.nb = _plan(job.recs + job.first, job.end - job.first, job.max_records, job.max_bytes, job.plans)
    for k in range(job.nb):
        job.plans[k].first += job.first
        job.plans[k].end += job.first


cdef int64_t _plan_records(rec_in_t* recs, int64_t n, int64_t max_records, int64_t max_bytes,
                           plan_t* plans, bint hold_gil) except -1:
    """:func:`_plan` (``plans`` has room for ``n``), the second half on a worker
    thread when record counts set the batch boundaries; ``hold_gil``: without
    letting go of the GIL (the plain-list encode's window).

    The back half starts at a multiple of ``max_records``, as if a batch
    began there. It did if the front's last batch could not have taken its
    first record (full, or that record would pass ``max_bytes``); otherwise
    the back is planned again from that last batch.
    """
    cdef plan_job_t front, back
    cdef const plan_t* last
    cdef int64_t split = n // 2, body
    cdef _Worker worker
    if max_records < split:
        split -= split % max_records
    if not (_CPUS > 1 and n >= PARALLEL_RECORDS_MIN and 0 < max_records <= split):
        if hold_gil:
            return _plan(recs, n, max_records, max_bytes, plans)
        _gil_may_go()
        with nogil:
            return _plan(recs, n, max_records, max_bytes, plans)
    front.recs = back.recs = recs
    front.max_records = back.max_records = max_records
    front.max_bytes = back.max_bytes = max_bytes
    front.first = 0
    front.end = back.first = split
    back.end = n
    front.plans = plans
    back.plans = plans + split  # the front needs at most ``split`` entries
    worker = _Worker(True)
    worker.submit(_plan_range, &back, hold_gil)
    if hold_gil:
        _plan_range(&front)
    else:
        _gil_may_go()
        with nogil:
            _plan_range(&front)
    worker.close(hold_gil)
    last = plans + front.nb - 1
    body = _body_size(recs + split, recs[split].timestamp - recs[last.first].timestamp,
                      <int32_t>(split - last.first)) if split - last.first < max_records else 0
    if split - last.first >= max_records or last.size + _varint_size(<int32_t>body) + body > max_bytes:
        memmove(plans + front.nb, back.plans, back.nb * sizeof(plan_t))
        return front.nb + back.nb
    back.first = last.first  # the front's last batch goes on: plan again from there
    back.plans = plans + front.nb - 1
    if hold_gil:
        _plan_range(&back)
    else:
        _gil_may_go()
        with nogil:
            _plan_range(&back)
    return front.nb - 1 + back.nb


cdef struct batch_opts_t:
    int64_t base_offset
    int64_t producer_id
    int16_t producer_epoch
    int32_t base_sequence
    int32_t leader_epoch
    int16_t attributes
    int64_t max_records
    int64_t max_bytes


cdef enum:
    # Below these a second thread costs more than it saves.
    PARALLEL_COMPRESS_MIN_BYTES = 1 << 20
    # Outputs from this size on have their pages mapped in one call first.
    POPULATE_MIN_BYTES = 4 << 20
    # ... and from this size on in huge pages: above glibc's largest mmap
    # threshold (32 MiB on 64-bit), an output is always a fresh mapping.
    HUGE_MIN_BYTES = 32 << 20
    PARALLEL_WRITE_MIN_BYTES = 1 << 22
    # Records from which an encode's columns are gathered and its batches
    # planned on two threads.
    PARALLEL_RECORDS_MIN = 1 << 15


cdef struct write_job_t:
    # Planned batches for a writer: _write_raw writes batches first .. end,
    # records only; _write_front takes whole batches (CRC left 0) from the
    # front of ``range`` (see kb_take), publishing in ``front_done`` one past
    # the last it has written. Batch k goes to ``out + at[k]``.
    const rec_in_t* recs
    const hdr_in_t* hdrs
    const plan_t* plans
    const batch_opts_t* opts
    const int64_t* at
    uint8_t* out
    int64_t first
    int64_t end
    uint64_t range
    uint64_t front_done
    int64_t populate        # _write_front maps out[0 .. populate) first (0: no)


cdef class _CompressJob:
    """Compress a range of planned batches (the encoder's compressed path).

    Runs on the calling thread and, for large inputs, on a second one at the
    same time (the codecs release the GIL). Each batch's records come from
    ``raw`` when they were all written there up front, else they are written
    from ``inp`` batch by batch; the caller keeps ``plans`` and whatever
    ``inp`` points into alive until every run has returned.
    """

    cdef _Inputs inp
    cdef batch_opts_t opts
    cdef const plan_t* plans
    cdef int compression
    cdef object level
    cdef object raw           # memoryview of every batch's records back to back, or None
    cdef int64_t[::1] raw_at  # where batch k's records start in raw
    cdef object codec         # _compression.compress
    cdef int64_t raw_bytes    # of every batch's records, uncompressed
    cdef int64_t next_batch   # the next batch to compress, by either thread
    cdef int64_t end_batch
    cdef list payloads

    cdef void write_all(self, int64_t nb, int64_t total):
        """Write every batch's records into one (pooled) block, the second half
        on the C worker when it pays, without letting go of the GIL: after
        this the inputs are no longer read, and Python code may run."""
        cdef int64_t k, pos = 0
        cdef uint8_t[::1] block = _arena_block(total)
        cdef write_job_t job, here
        cdef _Worker worker = None
        self.raw_at = np.empty(nb, dtype=np.int64)
        for k in range(nb):
            self.raw_at[k] = pos
            pos += self.plans[k].size - BATCH_OVERHEAD
        memset(&job, 0, sizeof(job))
        job.recs = self.inp.recs
        job.hdrs = self.inp.hdrs
        job.plans = self.plans
        job.at = &self.raw_at[0]
        job.out = &block[0]
        job.first = nb
        job.end = nb
        here = job
        here.first = 0
        if _CPUS > 1 and nb > 1 and total >= PARALLEL_WRITE_MIN_BYTES:
            job.first = here.end = _halve(self.plans, nb, total)
            worker = _Worker(True)
            worker.submit(_write_raw, &job, True)
        _write_raw(&here)
        if worker is not None:
            worker.close(True)
        self.raw = memoryview(block)
        _close_window()  # the inputs are no longer read

    cdef list run(self, int64_t nb):
        """Compress batches ``0 .. nb`` here and, for large inputs, on a
        second thread at the same time; the compressed payloads in order."""
        cdef _Beside beside = None
        self.payloads = [None] * nb
        self.next_batch = 0
        self.end_batch = nb
        if _CPUS > 1 and nb > 1 and self.raw_bytes >= PARALLEL_COMPRESS_MIN_BYTES:
            try:
                beside = _Beside(self.take_batches)
            except RuntimeError:  # no thread to be had: all of them here
                pass
        try:
            self.take()
        finally:
            if beside is not None:
                beside.result()  # always waited for: it reads ``plans``
        return self.payloads

    def take_batches(self):
        self.take()

    cdef void take(self) except *:
        """Compress the next batch neither thread has taken until none is left
        (the GIL makes taking one atomic); the first error stops both."""
        cdef int64_t k, first, end, size
        cdef object raw
        cdef uint8_t* p
        cdef const rec_in_t* recs = self.inp.recs
        _gil_may_go()  # (the codec: Python code, and it lets go of the GIL)
        while self.next_batch < self.end_batch:
            k = self.next_batch
            self.next_batch = k + 1
            first = self.plans[k].first
            end = self.plans[k].end
            size = self.plans[k].size - BATCH_OVERHEAD
            if self.raw is not None:
                raw = self.raw[self.raw_at[k]:self.raw_at[k] + size]
            else:
                raw = PyBytes_FromStringAndSize(NULL, size)
                p = <uint8_t*>PyBytes_AS_STRING(raw)
                with nogil:
                    _write_records(p, recs, self.inp.hdrs, first, end)
            try:
                payload = self.codec(self.compression, raw, self.level)
            except BaseException:
                self.next_batch = self.end_batch
                raise
            self.payloads[k] = payload if PyBytes_CheckExact(payload) else bytes(payload)  # assemble needs bytes

    cdef object assemble(self, list payloads):
        """The batches (header, compressed records, CRC) in one new ``bytes``,
        each payload copied once."""
        cdef int64_t k, first, end, size, total = 0
        cdef Py_ssize_t nb = len(payloads)
        cdef const uint8_t* src
        cdef uint8_t* p
        cdef const rec_in_t* recs = self.inp.recs
        cdef const batch_opts_t* o = &self.opts
        cdef _Span span = _Span()
        for payload in payloads:
            if BATCH_OVERHEAD + PyBytes_GET_SIZE(payload) > MAX_BATCH_SIZE:
                raise ValueError("batch is larger than a batch can hold (2 GiB)")
            total += BATCH_OVERHEAD + PyBytes_GET_SIZE(payload)
        out = PyBytes_FromStringAndSize(NULL, total)
        p = <uint8_t*>PyBytes_AS_STRING(out)
        for k in range(nb):
            payload = <object>PyList_GET_ITEM(payloads, k)
            first = self.plans[k].first
            end = self.plans[k].end
            size = BATCH_OVERHEAD + PyBytes_GET_SIZE(payload)
            _write_batch_header(p, o.base_offset + first, size, o.leader_epoch, o.attributes,
                                <int32_t>(end - first - 1), recs[first].timestamp,
                                _max_timestamp(recs, first, end), o.producer_id, o.producer_epoch,
                                _sequence_at(o.base_sequence, <int32_t>first), <int32_t>(end - first))
            src = <const uint8_t*>PyBytes_AS_STRING(payload)
            memcpy(p + BATCH_OVERHEAD, src, size - BATCH_OVERHEAD)
            _seal(span, p, size)
            p += size
        return out


cdef void _write_raw(void* arg) noexcept nogil:
    """A write_job_t's records only (no batch header), batch k at ``at[k]`` in ``out``."""
    cdef write_job_t* job = <write_job_t*>arg
    cdef int64_t k
    for k in range(job.first, job.end):
        _write_records(job.out + job.at[k], job.recs, job.hdrs, job.plans[k].first, job.plans[k].end)


cdef inline int64_t _max_timestamp(const rec_in_t* recs, int64_t first, int64_t end) noexcept nogil:
    cdef int64_t i, max_ts = recs[first].timestamp
    for i in range(first + 1, end):
        if recs[i].timestamp > max_ts:
            max_ts = recs[i].timestamp
    return max_ts


cdef object _encode_inputs(_Inputs inp, batch_opts_t* o, int compression, object level, object codec,
                           bint hold_gil=False):
    """Plan and write the gathered records as one or more batches.

    ``codec``: :func:`_codec`'s, for a compressed encode. ``hold_gil``: the
    rows point into objects nothing keeps alive but the caller's
    (unsnapshotted) sequences, and the caller has opened the window: write
    every record without releasing the GIL or running Python code
    (compressed: into one block first, then close the window and compress
    from there).
    """
    cdef int64_t nb, k, total = 0
    cdef plan_t* plans
    cdef _CompressJob job
    if inp.n == 0:
        return b""
    plans = <plan_t*>malloc(inp.n * sizeof(plan_t))
    if plans == NULL:
        raise MemoryError()
    try:
        nb = _plan_records(inp.recs, inp.n, o.max_records, o.max_bytes, plans, hold_gil)
        for k in range(nb):
            if plans[k].size > MAX_BATCH_SIZE:
                raise ValueError(f"record {plans[k].first} is larger than a batch can hold (2 GiB)")
            total += plans[k].size
        if compression:
            job = _CompressJob()
            job.inp = inp
            job.opts = o[0]
            job.plans = plans
            job.compression = compression
            job.level = level
            job.codec = codec
            job.raw_bytes = total - nb * BATCH_OVERHEAD
            if hold_gil:
                job.write_all(nb, job.raw_bytes)
            return job.assemble(job.run(nb))
        return _write_uncompressed(inp, o, plans, nb, total, hold_gil)
    finally:
        free(plans)


cdef object _write_uncompressed(_Inputs inp, const batch_opts_t* o, const plan_t* plans, int64_t nb,
                                int64_t total, bint hold_gil):
    """The planned batches, uncompressed, in one new ``bytes``.

    Each batch's CRC is computed (through crc32c, with the GIL) right after
    the batch is written, while it is still in cache. On two threads, a C
    worker writes batches from the front and the calling thread from the
    back; the calling thread also seals the front's batches as they are
    published. With ``hold_gil`` the GIL is held throughout, waits included.
    """
    cdef object out = PyBytes_FromStringAndSize(NULL, total)
    cdef uint8_t* out_ptr = <uint8_t*>PyBytes_AS_STRING(out)
    cdef int64_t* at = <int64_t*>malloc(nb * sizeof(int64_t))
    cdef int64_t k, pos = 0, sealed = 0, mine = 0
    cdef bint two = _CPUS > 1 and nb > 1 and total >= PARALLEL_WRITE_MIN_BYTES
    cdef _Worker worker = None
    cdef _Span span = _Span()
    cdef write_job_t job
    if at == NULL:
        raise MemoryError()
    try:
        for k in range(nb):
            at[k] = pos
            pos += plans[k].size
        memset(&job, 0, sizeof(job))
        job.recs = inp.recs
        job.hdrs = inp.hdrs
        job.plans = plans
        job.opts = o
        job.at = at
        job.out = out_ptr
        job.range = <uint64_t>nb << 32
        if total >= HUGE_MIN_BYTES:
            kb_huge(out_ptr, total)
        if two:
            # The worker maps the first half's pages, this thread the second's.
            mine = at[_halve(plans, nb, total)]
            if total >= POPULATE_MIN_BYTES:
                job.populate = mine
            worker = _Worker(True)
            worker.submit(_write_front, &job, hold_gil)
        if total >= POPULATE_MIN_BYTES:
            kb_populate(out_ptr + mine, total - mine)
        try:
            k = kb_take(&job.range, two)
            while k >= 0:
                if hold_gil:
                    _write_batch(&job, k)
                else:
                    _gil_may_go()
                    with nogil:
                        _write_batch(&job, k)
                _seal(span, out_ptr + at[k], plans[k].size)
                if two:
                    pos = <int64_t>kb_load(&job.front_done)
                    while sealed < pos:
                        _seal(span, out_ptr + at[sealed], plans[sealed].size)
                        sealed += 1
                k = kb_take(&job.range, two)
        finally:
            if worker is not None:
                worker.close(hold_gil)
        if two:
            for k in range(sealed, <int64_t>job.front_done):
                _seal(span, out_ptr + at[k], plans[k].size)
        return out
    finally:
        free(at)


cdef int64_t _halve(const plan_t* plans, int64_t nb, int64_t total) noexcept nogil:
    """The first batch of the second half: two halves of about the same bytes, neither empty."""
    cdef int64_t k = 0, half = 0
    while k < nb - 1 and 2 * (half + plans[k].size) <= total:
        half += plans[k].size
        k += 1
    return k if k > 0 else 1




cdef extern from *:
    """
    #if defined(__linux__)
    #include <sys/mman.h>
    #include <unistd.h>
    #ifndef MADV_POPULATE_WRITE
    #define MADV_POPULATE_WRITE 23  /* Linux 5.14; older kernels refuse it (EINVAL) */
    #endif
    #ifndef MADV_HUGEPAGE
    #define MADV_HUGEPAGE 14
    #endif
    static int kb_pages(void* p, size_t n, uintptr_t align, uintptr_t* start, uintptr_t* end) {
        long page = sysconf(_SC_PAGESIZE);
        if (page <= 0) return 0;
        if (align < (uintptr_t)page) align = (uintptr_t)page;
        *start = ((uintptr_t)p + align - 1) & ~(align - 1);
        *end = ((uintptr_t)p + n) & ~(align - 1);
        return *end > *start;
    }
    /* Map the pages of [p, p + n) in one call, not one page fault at a time
       as they are first written: a large new output (beyond malloc's mmap
       threshold) gets fresh pages every time. Best effort: errors ignored. */
    static void kb_populate(void* p, size_t n) {
        uintptr_t start, end;
        if (kb_pages(p, n, 0, &start, &end))
            (void)madvise((void*)start, end - start, MADV_POPULATE_WRITE);
    }
    /* Ask for transparent huge pages over the 2 MiB-aligned part of
       [p, p + n) (where THP is "madvise"): 512 times fewer faults, so that
       zeroing the fresh pages is most of what mapping them costs. Only for
       an output certain to be a mapping of its own (HUGE_MIN_BYTES), never
       for the middle of malloc's heap. Best effort: errors ignored. */
    static void kb_huge(void* p, size_t n) {
        uintptr_t start, end;
        if (kb_pages(p, n, (uintptr_t)2 << 20, &start, &end))
            (void)madvise((void*)start, end - start, MADV_HUGEPAGE);
    }
    #else
    static void kb_populate(void* p, size_t n) { (void)p; (void)n; }
    static void kb_huge(void* p, size_t n) { (void)p; (void)n; }
    #endif
    """
    void kb_populate(void* p, size_t n) noexcept nogil
    void kb_huge(void* p, size_t n) noexcept nogil


cdef void _write_batch(const write_job_t* job, int64_t k) noexcept nogil:
    """Batch ``k``, whole but for its CRC, at ``job.out + job.at[k]``."""
    cdef const batch_opts_t* o = job.opts
    cdef uint8_t* p = job.out + job.at[k]
    cdef int64_t first = job.plans[k].first, end = job.plans[k].end
    _write_records(p + BATCH_OVERHEAD, job.recs, job.hdrs, first, end)
    _write_batch_header(p, o.base_offset + first, job.plans[k].size, o.leader_epoch, o.attributes,
                        <int32_t>(end - first - 1), job.recs[first].timestamp,
                        _max_timestamp(job.recs, first, end), o.producer_id, o.producer_epoch,
                        _sequence_at(o.base_sequence, <int32_t>first), <int32_t>(end - first))


cdef void _write_front(void* arg) noexcept nogil:
    """The writer thread's side: batches from the front until none is left."""
    cdef write_job_t* job = <write_job_t*>arg
    cdef int64_t k
    if job.populate:
        kb_populate(job.out, job.populate)
    k = kb_take(&job.range, False)
    while k >= 0:
        _write_batch(job, k)
        kb_store(&job.front_done, <uint64_t>(k + 1))
        k = kb_take(&job.range, False)


cdef class _Beside:
    """``fn(*args)`` on a new thread; :meth:`result` waits for it and returns its value.

    The wait cannot be interrupted (KeyboardInterrupt included): the caller
    must not release what the thread reads before it has finished.
    """

    cdef PyThread_type_lock finished
    cdef object value
    cdef object error

    def __cinit__(self, fn, *args):
        _gil_may_go()
        self.finished = PyThread_allocate_lock()
        if self.finished == NULL:
            raise MemoryError()
        PyThread_acquire_lock(self.finished, WAIT_LOCK)
        _thread.start_new_thread(self._run, (fn, args))

    def __dealloc__(self):
        if self.finished != NULL:
            PyThread_free_lock(self.finished)

    def _run(self, fn, args):
        try:
            self.value = fn(*args)
        except BaseException as e:
            self.error = e
        finally:
            PyThread_release_lock(self.finished)

    cdef object result(self):
        with nogil:
            PyThread_acquire_lock(self.finished, WAIT_LOCK)
        PyThread_release_lock(self.finished)
        if self.error is not None:
            raise self.error
        return self.value


cdef object _finish_batch(object records, int compression, object level, int64_t base_offset,
                          batch_opts_t* o, int64_t count, int64_t base_ts, int64_t max_ts, int64_t seq_delta):
    """Header + (compressed) records + CRC: one finished batch as bytes."""
    cdef object payload = records
    cdef object out
    cdef uint8_t* p
    cdef int64_t size
    if compression:
        from kbatch import _compression
        payload = _compression.compress(compression, records, level)
    size = BATCH_OVERHEAD + len(payload)
    if size > MAX_BATCH_SIZE:
        raise ValueError("batch is larger than a batch can hold (2 GiB)")
    out = PyBytes_FromStringAndSize(NULL, size)
    p = <uint8_t*>PyBytes_AS_STRING(out)
    _write_batch_header(p, base_offset, size, o.leader_epoch, o.attributes, <int32_t>(count - 1), base_ts,
                        max_ts, o.producer_id, o.producer_epoch, _sequence_at(o.base_sequence, <int32_t>seq_delta),
                        <int32_t>count)
    memcpy(p + BATCH_OVERHEAD, PyBytes_AS_STRING(payload), len(payload))
    _seal(_Span(), p, size)
    return out


cdef object _sized(object seq, Py_ssize_t n, str name):
    """A list or tuple as it is, anything else as a tuple; ``n`` items either way."""
    if seq is None:
        return None
    if type(seq) is not list and type(seq) is not tuple:
        seq = tuple(seq)
    if len(seq) != n:
        raise ValueError(f"{name} has {len(seq)} items but values has {n}")
    return seq


cdef inline object _snapshot(object seq):
    # A tuple holds every item alive whatever Python code later runs (an
    # item's __index__, a codec releasing the GIL for other threads).
    return seq if seq is None or type(seq) is tuple else tuple(seq)


def _now_ms():
    return time.time_ns() // 1_000_000


cdef object _codec():
    # kbatch._compression.compress (imported here: _compression imports this module)
    from kbatch import _compression
    return _compression.compress


cdef void _set_opts(batch_opts_t* o, int64_t base_offset, int64_t producer_id, int16_t producer_epoch,
                    int32_t base_sequence, bint transactional, int32_t partition_leader_epoch, int timestamp_type,
                    int64_t max_batch_records, int64_t max_batch_bytes, int compression, bint control):
    o.base_offset = base_offset
    o.producer_id = producer_id
    o.producer_epoch = producer_epoch
    o.base_sequence = base_sequence
    o.leader_epoch = partition_leader_epoch
    o.attributes = <int16_t>((compression & 0x07) | (timestamp_type << 3)
                             | (ATTR_TRANSACTIONAL if transactional else 0) | (ATTR_CONTROL if control else 0))
    o.max_records = max_batch_records if max_batch_records > 0 else 0x7FFFFFFF
    o.max_bytes = max_batch_bytes if 0 < max_batch_bytes < MAX_BATCH_SIZE else MAX_BATCH_SIZE


def encode(object values, object keys=None, object timestamps=None, object headers=None, *,
           int64_t base_offset=0, int64_t producer_id=-1, int16_t producer_epoch=-1,
           int32_t base_sequence=-1, bint transactional=False, int32_t partition_leader_epoch=-1,
           int timestamp_type=0, int64_t max_batch_records=0, int64_t max_batch_bytes=0,
           int compression=0, object compression_level=None, bint control=False):
    """Encode records as RecordBatch v2 bytes; see :func:`kbatch.encode`."""
    cdef batch_opts_t o
    cdef const int64_t[::1] ts_array
    cdef bint ts_fast = False
    cdef Py_ssize_t n, i
    cdef int64_t now
    cdef _Inputs inp
    cdef bint strict
    cdef PyObject* none
    cdef PyObject** vitems
    cdef PyObject** kitems
    cdef PyObject** titems
    cdef PyObject** hitems
    if type(values) is not list and type(values) is not tuple:
        values = tuple(values)
    n = len(values)
    keys = _sized(keys, n, "keys")
    headers = _sized(headers, n, "headers")
    if timestamps is not None and isinstance(timestamps, np.ndarray):
        if timestamps.dtype.kind not in "iu":
            raise TypeError(f"timestamps must be integers, got dtype {timestamps.dtype}")
        ts_array = np.ascontiguousarray(timestamps, dtype=np.int64)
        if ts_array.shape[0] != n:
            raise ValueError(f"timestamps has {ts_array.shape[0]} items but values has {n}")
        ts_fast = True
    else:
        timestamps = _sized(timestamps, n, "timestamps")
    _set_opts(&o, base_offset, producer_id, producer_epoch, base_sequence, transactional,
              partition_leader_epoch, timestamp_type, max_batch_records, max_batch_bytes, compression, control)
    now = _now_ms()
    codec = _codec() if compression else None  # (an import: Python code, before the window)
    # The C rows point into the items. Plain items (bytes, int, str, lists and
    # tuples of them) are read inside the window (see _open_window: the GIL
    # kept, no Python code, the cyclic GC off) and every byte is written from
    # them before it closes: nothing can drop an item meanwhile, so the
    # caller's lists are used as they are (a compressed encode writes every
    # record before it calls a codec). Anything else first takes a tuple
    # snapshot of each sequence, which keeps every item alive.
    strict = True
    inp = _Inputs(n)
    none = <PyObject*>None
    _open_window()
    try:
        vitems = _items(<PyObject*>values)
        kitems = NULL if keys is None else _items(<PyObject*>keys)
        titems = NULL if timestamps is None or ts_fast else _items(<PyObject*>timestamps)
        hitems = NULL if headers is None else _items(<PyObject*>headers)
        # Python code ran since ``n`` was taken (a generator of keys, ...): a
        # list of another length now goes the checked way.
        strict = (_items_size(<PyObject*>values) == n
                  and (kitems == NULL or _items_size(<PyObject*>keys) == n)
                  and (titems == NULL or _items_size(<PyObject*>timestamps) == n)
                  and (hitems == NULL or _items_size(<PyObject*>headers) == n))
        for i in range(n if strict else 0):
            # The items are scattered objects: ask for those of a few records
            # ahead while this one is read (the gather is bound by these misses).
            if i + PREFETCH_AHEAD < n:
                __builtin_prefetch(vitems[i + PREFETCH_AHEAD])
                if kitems != NULL:
                    __builtin_prefetch(kitems[i + PREFETCH_AHEAD])
                if hitems != NULL:
                    __builtin_prefetch(hitems[i + PREFETCH_AHEAD])
            if _gather_plain(inp, i, none if kitems == NULL else kitems[i], vitems[i],
                             none if titems == NULL else titems[i], none if hitems == NULL else hitems[i],
                             none, now):
                strict = False
                break
            if ts_fast:
                inp.recs[i].timestamp = ts_array[i]
        if not strict:
            _close_window()  # Python code ahead: the snapshots hold every item
            values = _snapshot(values)
            keys = _snapshot(keys)
            headers = _snapshot(headers)
            if not ts_fast:
                timestamps = _snapshot(timestamps)
            inp = _Inputs(n)
            for i in range(n):
                _gather(inp, i,
                        None if keys is None else _item(keys, i),
                        _item(values, i),
                        ts_array[i] if ts_fast else (None if timestamps is None else _item(timestamps, i)),
                        None if headers is None else _item(headers, i),
                        now)
        return _encode_inputs(inp, &o, compression, compression_level, codec, strict)
    finally:
        _close_window()


# Encoding from Arrow-style columns. Each binary column is ``offsets``
# (int32 or int64, n + 1 entries, into ``data``), ``data`` and an optional
# ``valid`` mask; headers are a list column (``header_offsets``, n + 1, into
# the header rows) over two binary columns. One pass turns them into the
# encoder's C rows, checking every range it will read as it goes (so the
# offsets need not be checked first), on two threads for large inputs.

cdef struct bin_col_t:
    const uint8_t* base     # NULL when the column is absent (all null)
    const void* offsets
    const uint8_t* valid    # NULL: no nulls
    int64_t size            # bytes in the data
    bint wide               # int64 offsets, else int32


cdef struct gather_t:
    bin_col_t value
    bin_col_t key
    bin_col_t hkey
    bin_col_t hval
    const void* hoff        # NULL: no headers
    bint hwide
    int64_t nh              # header rows
    const int64_t* ts       # NULL: now
    int64_t now
    rec_in_t* recs
    hdr_in_t* hdrs
    int64_t first           # records first .. end
    int64_t end
    int64_t bad             # the first bad record (end: none), and ...
    int bad_field           # ... what is wrong with it (GATHER_*)


cdef enum:
    GATHER_VALUE = 1
    GATHER_KEY = 2
    GATHER_HEADERS = 3
    GATHER_HEADER_KEY = 4
    GATHER_HEADER_VALUE = 5
    GATHER_TOO_LARGE = 6

_GATHER_FIELDS = {
    GATHER_VALUE: "its value offsets decrease or point outside the value data",
    GATHER_KEY: "its key offsets decrease or point outside the key data",
    GATHER_HEADERS: "its header_offsets decrease or point outside the header rows",
    GATHER_HEADER_KEY: "a header's key offsets decrease or point outside their data",
    GATHER_HEADER_VALUE: "a header's value offsets decrease or point outside their data",
    GATHER_TOO_LARGE: "a field over 2 GiB",
}


cdef inline int64_t _offset_at(const void* offsets, bint wide, int64_t i) noexcept nogil:
    return (<const int64_t*>offsets)[i] if wide else (<const int32_t*>offsets)[i]


cdef inline bint _point_at(const bin_col_t* c, int64_t i, const uint8_t** ptr, int64_t* length) noexcept nogil:
    """Entry ``i`` of a binary column (null: NULL, -1); False if its range is not inside the data."""
    cdef int64_t start, stop
    if c.base == NULL or (c.valid != NULL and not c.valid[i]):
        ptr[0] = NULL
        length[0] = -1
        return True
    start = _offset_at(c.offsets, c.wide, i)
    stop = _offset_at(c.offsets, c.wide, i + 1)
    if start < 0 or stop < start or stop > c.size:
        return False
    ptr[0] = c.base + start
    length[0] = stop - start
    return True


cdef inline void _gather_fail(gather_t* g, int64_t i, int field) noexcept nogil:
    g.bad = i
    g.bad_field = field


cdef void _gather_columns(void* arg) noexcept nogil:
    """Records ``first .. end`` of a gather_t as C rows; stops at the first bad one."""
    # A copy on the stack: the row stores cannot alias it, so its fields stay in registers.
    cdef gather_t g = (<gather_t*>arg)[0]
    cdef rec_in_t* r
    cdef hdr_in_t* h
    cdef int64_t i, j, hfirst, hend, size
    g.bad = g.end
    for i in range(g.first, g.end):
        r = g.recs + i
        r.timestamp = g.ts[i] if g.ts != NULL else g.now
        if not _point_at(&g.value, i, &r.value, &r.value_length):
            _gather_fail(&g, i, GATHER_VALUE)
            break
        if not _point_at(&g.key, i, &r.key, &r.key_length):
            _gather_fail(&g, i, GATHER_KEY)
            break
        r.headers_first = 0
        r.headers_count = 0
        size = 0
        if g.hoff != NULL:
            hfirst = _offset_at(g.hoff, g.hwide, i)
            hend = _offset_at(g.hoff, g.hwide, i + 1)
            if hfirst < 0 or hend < hfirst or hend > g.nh:
                _gather_fail(&g, i, GATHER_HEADERS)
                break
            for j in range(hfirst, hend):
                h = g.hdrs + j
                if not _point_at(&g.hkey, j, &h.key, &h.key_length) or h.key == NULL:
                    _gather_fail(&g, i, GATHER_HEADER_KEY)
                    break
                if not _point_at(&g.hval, j, &h.value, &h.value_length):
                    _gather_fail(&g, i, GATHER_HEADER_VALUE)
                    break
                size += (_varint_size(<int32_t>h.key_length) + h.key_length
                         + _varint_size(<int32_t>h.value_length)
                         + (h.value_length if h.value_length > 0 else 0))
            if g.bad != g.end:
                break
            r.headers_first = hfirst
            r.headers_count = hend - hfirst
        r.headers_size = size
        if r.value_length > MAX_BATCH_SIZE or r.key_length > MAX_BATCH_SIZE or size > MAX_BATCH_SIZE:
            _gather_fail(&g, i, GATHER_TOO_LARGE)
            break
    (<gather_t*>arg).bad = g.bad
    (<gather_t*>arg).bad_field = g.bad_field


cdef object _offsets_array(object offsets, int64_t n, str name):
    """``offsets`` as a contiguous int32 or int64 array of ``n + 1`` entries (other types: int64)."""
    off = np.asarray(offsets)
    if off.dtype not in (np.int32, np.int64) or off.ndim != 1:
        off = np.asarray(offsets, dtype=np.int64)
    off = np.ascontiguousarray(off)
    if off.shape[0] != n + 1:
        raise ValueError(f"{name} has {off.shape[0]} entries, expected {n + 1}")
    return off


cdef int _set_binary(bin_col_t* c, object offsets, object data, object valid, int64_t n, str name, str entry,
                     list keep) except -1:
    """Fill ``c`` from one binary column of ``n`` entries (``offsets`` None:
    absent); checks shapes only. ``keep`` gets what ``c`` points into."""
    cdef const uint8_t[::1] view
    cdef object off, mask
    memset(c, 0, sizeof(bin_col_t))
    if offsets is None:
        return 0
    off = _offsets_array(offsets, n, f"{name}_offsets")
    view = _byte_view(data)
    keep.extend([off, data])
    c.offsets = <const void*>(<size_t>off.ctypes.data)
    c.wide = off.dtype == np.int64
    c.size = view.shape[0]
    c.base = &view[0] if view.shape[0] else <const uint8_t*>c  # any non-NULL: no byte is read at size 0
    if valid is not None:
        mask = np.ascontiguousarray(valid).view(np.uint8)
        if mask.ndim != 1 or mask.shape[0] != n:
            raise ValueError(f"{name}_valid must have one entry per {entry}")
        keep.append(mask)
        if mask.shape[0]:
            c.valid = <const uint8_t*>(<size_t>mask.ctypes.data)
    return 0


def encode_arrays(object value_offsets, object value_data, object value_valid=None,
                  object key_offsets=None, object key_data=None, object key_valid=None,
                  object timestamps=None, *, object header_offsets=None, object hkey_offsets=None,
                  object hkey_data=None, object hval_offsets=None, object hval_data=None,
                  object hval_valid=None, int64_t base_offset=0, int64_t producer_id=-1,
                  int16_t producer_epoch=-1, int32_t base_sequence=-1, bint transactional=False,
                  int32_t partition_leader_epoch=-1, int timestamp_type=0, int64_t max_batch_records=0,
                  int64_t max_batch_bytes=0, int compression=0, object compression_level=None):
    """Encode records given as Arrow-style columns (no Python object per record).

    Binary columns are ``offsets`` (int32 or int64, n + 1 entries, into
    ``data``), ``data`` (any byte buffer) and an optional ``valid`` mask
    (uint8/bool, 0 = null); keys may be left out (all null). Headers:
    ``header_offsets`` (n + 1) ranges per record into the flat header columns
    ``hkey_*`` / ``hval_*``. ``timestamps``: int64 per record (None: now).
    Batch options are those of :func:`kbatch.encode`.
    """
    cdef batch_opts_t o
    cdef gather_t g, second
    cdef object hoff, ts = None
    cdef int64_t n = len(value_offsets) - 1
    cdef _Inputs inp
    cdef _Worker worker = None
    cdef list keep = []
    if n < 0:
        raise ValueError("value_offsets needs at least one entry")
    _set_opts(&o, base_offset, producer_id, producer_epoch, base_sequence, transactional,
              partition_leader_epoch, timestamp_type, max_batch_records, max_batch_bytes, compression, False)
    memset(&g, 0, sizeof(g))
    _set_binary(&g.value, value_offsets, value_data, value_valid, n, "value", "record", keep)
    _set_binary(&g.key, key_offsets, key_data, key_valid, n, "key", "record", keep)
    if timestamps is not None:
        ts = np.ascontiguousarray(timestamps, dtype=np.int64)
        if ts.ndim != 1 or ts.shape[0] != n:
            raise ValueError("timestamps must have one entry per record")
        if n:
            g.ts = <const int64_t*>(<size_t>ts.ctypes.data)
    if header_offsets is not None:
        hoff = _offsets_array(header_offsets, n, "header_offsets")
        g.nh = len(hkey_offsets) - 1
        if len(hval_offsets) - 1 != g.nh:
            raise ValueError("hkey_offsets and hval_offsets must have the same length")
        _set_binary(&g.hkey, hkey_offsets, hkey_data, None, g.nh, "hkey", "header", keep)
        _set_binary(&g.hval, hval_offsets, hval_data, hval_valid, g.nh, "hval", "header", keep)
        keep.append(hoff)
        g.hoff = <const void*>(<size_t>hoff.ctypes.data)
        g.hwide = hoff.dtype == np.int64
    g.now = _now_ms()
    inp = _Inputs(n)
    inp.keep.extend(keep)
    inp.keep.append(ts)
    if g.nh > 0:
        inp.add_headers(g.nh)
    g.recs = inp.recs
    g.hdrs = inp.hdrs
    g.end = n
    if _CPUS > 1 and n >= PARALLEL_RECORDS_MIN:
        second = g
        second.first = g.end = n // 2
        worker = _Worker(True)
        worker.submit(_gather_columns, &second, False)
    try:
        with nogil:
            _gather_columns(&g)
    finally:
        if worker is not None:
            worker.close(False)
    if g.bad == g.end and worker is not None:
        g = second
    if g.bad < g.end:
        raise ValueError(f"record {g.bad}: {_GATHER_FIELDS[g.bad_field]}")
    return _encode_inputs(inp, &o, compression, compression_level, _codec() if compression else None)


_CONTROL_TYPES = {"abort": 0, "commit": 1}


def encode_control(str kind, int64_t producer_id, int16_t producer_epoch, *, int32_t coordinator_epoch=0,
                   int64_t base_offset=0, object timestamp=None, int32_t partition_leader_epoch=-1):
    """Encode a transaction marker: a control batch with one COMMIT or ABORT record.

    Parameters
    ----------
    kind : {"commit", "abort"}
    producer_id, producer_epoch : int
        The transactional producer the marker ends a transaction for.
    coordinator_epoch : int
        Written into the EndTransactionMarker value.
    base_offset : int
        Offset of the marker.
    timestamp : int, optional
        Milliseconds since the epoch (now when None).
    partition_leader_epoch : int
        Written into the batch header.

    Examples
    --------
    >>> import kbatch
    >>> t = kbatch.decode(kbatch.encode_control("abort", 7, 0, base_offset=42))
    >>> len(t), t.batches[["is_control", "control_type", "producer_id"]].tolist(), t.next_offset
    (0, [(True, 0, 7)], 43)
    """
    if kind.lower() not in _CONTROL_TYPES:
        raise ValueError(f"kind must be 'commit' or 'abort', got {kind!r}")
    cdef uint8_t key[4]
    cdef uint8_t value[6]
    _put16(key, 0)
    _put16(key + 2, <uint16_t>_CONTROL_TYPES[kind.lower()])
    _put16(value, 0)
    _put32(value + 2, <uint32_t>coordinator_epoch)
    return encode(
        [PyBytes_FromStringAndSize(<char*>value, 6)],
        [PyBytes_FromStringAndSize(<char*>key, 4)],
        [timestamp],
        None,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        partition_leader_epoch=partition_leader_epoch,
        control=True,
    )


cdef class BatchBuilder:
    """Build one RecordBatch by appending records one at a time.

    Parameters are those of :func:`kbatch.encode` that describe a batch.

    Examples
    --------
    >>> import kbatch
    >>> b = kbatch.BatchBuilder(base_offset=10)
    >>> b.append(b"first", key=b"k", timestamp=1000)
    10
    >>> b.append(b"second", timestamp=999, headers=[("h", None)])
    11
    >>> t = kbatch.decode(b.build())
    >>> t.records[["offset", "timestamp"]].tolist(), t.headers(1)
    ([(10, 1000), (11, 999)], [('h', None)])
    """

    cdef uint8_t* buf
    cdef int64_t size, capacity
    cdef readonly int64_t base_offset
    cdef int64_t first_timestamp, max_timestamp
    cdef int32_t count
    cdef batch_opts_t opts
    cdef int compression
    cdef object level
    cdef bint built

    def __cinit__(self):
        self.buf = NULL

    def __init__(self, *, int64_t base_offset=0, int64_t producer_id=-1, int16_t producer_epoch=-1,
                 int32_t base_sequence=-1, bint transactional=False, int32_t partition_leader_epoch=-1,
                 object timestamp_type="create", object compression=None, object compression_level=None):
        import kbatch
        self.base_offset = base_offset
        self.compression = kbatch._code("compression", compression, kbatch.COMPRESSION_CODECS)
        self.level = compression_level
        _set_opts(&self.opts, base_offset, producer_id, producer_epoch, base_sequence, transactional,
                  partition_leader_epoch, kbatch._code("timestamp_type", timestamp_type, kbatch.TIMESTAMP_TYPES),
                  0, 0, self.compression, False)
        self.count = 0
        self.size = 0
        self.built = False

    def __dealloc__(self):
        free(self.buf)

    def __len__(self):
        return self.count

    @property
    def size_in_bytes(self):
        """Bytes of the batch built now, before compression."""
        return BATCH_OVERHEAD + self.size

    def append(self, value, key=None, timestamp=None, headers=None):
        """Append one record; return the offset it gets."""
        cdef _Inputs inp = _Inputs(1)
        cdef rec_in_t* r = inp.recs
        cdef int64_t need, cap
        cdef uint8_t* grown
        if self.built:
            raise RuntimeError("this BatchBuilder has already been built")
        if self.count == 0x7FFFFFFF:
            raise OverflowError("a batch holds at most 2**31-1 records")
        _gather(inp, 0, key, value, timestamp, headers, _now_ms() if timestamp is None else 0)
        if self.count == 0:
            self.first_timestamp = self.max_timestamp = r.timestamp
        r.body_size = _body_size(r, r.timestamp - self.first_timestamp, self.count)
        need = self.size + _varint_size(<int32_t>r.body_size) + r.body_size
        if need + BATCH_OVERHEAD > MAX_BATCH_SIZE:
            raise ValueError("record does not fit: a batch holds at most 2 GiB")
        if need > self.capacity:
            cap = self.capacity * 2 if self.capacity else 4096
            while cap < need:
                cap *= 2
            grown = <uint8_t*>realloc(self.buf, cap)
            if grown == NULL:
                raise MemoryError()
            self.buf = grown
            self.capacity = cap
        _write_record(self.buf + self.size, r, inp.hdrs, r.timestamp - self.first_timestamp, self.count)
        self.size = need
        if r.timestamp > self.max_timestamp:
            self.max_timestamp = r.timestamp
        self.count += 1
        return self.base_offset + self.count - 1

    def build(self):
        """Return the finished batch as bytes (b"" if nothing was appended)."""
        if self.count == 0:
            return b""
        out = _finish_batch(PyBytes_FromStringAndSize(<char*>self.buf, self.size), self.compression,
                            self.level, self.base_offset, &self.opts, self.count, self.first_timestamp,
                            self.max_timestamp, 0)
        self.built = True
        return out


# ---------------------------------------------------------------------------
# Bulk materialisation (the slow conveniences, made as fast as Python allows)

def slices(object data, const int64_t[::1] starts, const int32_t[::1] lengths):
    """``[bytes(data[s:s+n]) or None for s, n in zip(starts, lengths)]``, in C."""
    cdef object mv = _byte_view(data)
    cdef const uint8_t[::1] view = mv
    cdef Py_ssize_t i, n = starts.shape[0], size = view.shape[0]
    cdef const char* base = <const char*>&view[0] if size > 0 else NULL
    cdef list out = [None] * n
    if lengths.shape[0] != n:
        raise ValueError("starts and lengths differ in length")
    for i in range(n):
        if lengths[i] >= 0:
            if starts[i] < 0 or starts[i] + lengths[i] > size:
                raise IndexError(f"slice {i} is outside the buffer")
            out[i] = PyBytes_FromStringAndSize(base + starts[i], lengths[i])
    return out
