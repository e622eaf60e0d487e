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

This file is the extension's table of contents: the cimports and C
declarations every part shares, the tunables, the test hooks, and the parts,
one concern each, ``include``d in dependency order into this one module (one
translation unit: no call cost between parts). Each part opens with what it provides and
what it uses::

    _core_rows.pxi     row dtypes (the NumPy views of _core.pxd's structs)
    _core_wire.pxi     varints (the byte-order readers/writers: kbatch/_wire.pxd)
    _core_errors.pxi   error_t filled without the GIL, raised with it
    _core_frame.pxi    batch headers (v2 and legacy; offsets: kbatch/_wire.pxd), CRCs
    _core_parse.pxi    records into rows (v2, legacy)
    _core_memory.pxi   spare blocks, the arena (_Block), rows to NumPy
    _core_threads.pxi  thread budget, the GIL window, the helper thread (Helper)
    _core_decode.pxi   decode, scan, slices: the chunked and split parse
    _core_inflate.pxi  payload decompression (zstd/snappy/gzip sizing, LZ4 in C)
    _core_stamps.pxi   stamps: offsets and timestamps walked, no row built (scans)
    _core_gather.pxi   an encode's input gathered into C rows
    _core_output.pxi   where an encode's batches go: a new bytes or out=
    _core_write.pxi    records and batch headers written, batches planned, uncompressed batches
    _core_compress.pxi an encode's batches compressed (zstd in C, the other codecs in Python)
    _core_encode.pxi   the encoders: encode, encode_arrays, encode_control, BatchBuilder
"""

cimport cython
from cpython.buffer cimport (
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_SIMPLE,
    PyBUF_WRITABLE,
    PyBuffer_FillInfo,
    PyBuffer_Release,
    PyObject_CheckBuffer,
    PyObject_GetBuffer,
)
from cpython.bytearray cimport PyByteArray_CheckExact, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_CheckExact, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_CheckExact, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.pythread cimport (
    NOWAIT_LOCK,
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
    INT32_MAX, INT64_MAX, SIZE_MAX, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t,
)
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memmove, memset
# The wire primitives and frame offsets shared with the other compiled modules (kbatch/_wire.pxd);
# the parts use the readers and writers under their old local names.
from kbatch._wire cimport (
    ATTRIBUTES_OFFSET, BASE_SEQUENCE_OFFSET, BASE_TIMESTAMP_OFFSET, BATCH_OVERHEAD, CRC_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC, LAST_OFFSET_DELTA_OFFSET, LEGACY_ATTRIBUTES_OFFSET, LEGACY_CRC_OFFSET,
    LEGACY_KEY_SIZE_OFFSET_V0, LEGACY_KEY_SIZE_OFFSET_V1, LEGACY_MAGIC_OFFSET,
    LEGACY_TIMESTAMP_OFFSET, LENGTH_OFFSET, LOG_OVERHEAD, MAGIC_OFFSET, MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET, PRODUCER_EPOCH_OFFSET, PRODUCER_ID_OFFSET, RECORDS_COUNT_OFFSET,
    RECORD_OVERHEAD_V0, RECORD_OVERHEAD_V1,
)
from kbatch._wire cimport be16 as _be16, be32 as _be32, be64 as _be64, le32 as _le32
from kbatch._wire cimport put16 as _put16, put32 as _put32, put64 as _put64
# The atomics the helper thread and the calling thread share work through.
from kbatch._threads cimport kb_cut, kb_load, kb_store, kb_swap, kb_take

import atexit
import os
import time

import numpy as np
import cramjam as _cramjam
from crc32c import crc32c as _crc32c

from kbatch.codec import _compression
from kbatch.codec._options import codec_id as _codec_id, timestamp_type_id as _timestamp_type_id
from kbatch.codec._table import RecordTable
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
# Tunables: thresholds production runs with
#
# Module globals read at call time, so that tests can shrink them
# (monkeypatch.setattr(kbatch.codec._core, name, value)). Two live in their part,
# beside the state they steer:
#   _CPUS               _core_threads.pxi  the thread budget (set_threads; from _usable_cpus())
#   _LZ4_SOLO_CHUNKS    _core_inflate.pxi  chunks the calling thread decompresses alone after
#                                          the helper found nothing (_lz4_solo_left counts them)
# Python modules keep theirs at their top: kbatch.arrow (_THREAD_CHUNK, _kernels),
# kbatch.codec._zstd (_oneshot).

#: Input bytes per chunk (CRC'd, decompressed and parsed together; a parse
#: thread's unit of work): a sixteenth of the input (the two threads' pipeline
#: fills and drains once per input), at least _CHUNK_BYTES (below it the
#: hand-overs per chunk cost more than they share), at most _CHUNK_BYTES_MAX.
_CHUNK_BYTES = 1 << 18
_CHUNK_BYTES_MAX = 1 << 20
_CHUNKS_PER_INPUT = 16
#: Uncompressed input from this size on is parsed on two threads (when
#: allowed); below it, starting a thread costs more than it saves.
_SPLIT_BYTES = 1 << 20


# ---------------------------------------------------------------------------
# Test hooks: everything in the core that exists only for tests
#
# Defined here, before the parts: they share this module's namespace, so the
# parts read and bump these globals, and these functions reach the parts'
# state (Cython resolves module-level names over the whole module). Nothing
# outside tests/ uses them.

#: Batches the calling thread parses from the back before the parse thread
#: starts (_core_decode.pxi, _parse_split), so that the join of the two sides
#: is certain to run. 0 in production.
_SPLIT_BACK_FIRST = 0

#: Chunks whose LZ4 / zstd frames were decompressed in C (_core_inflate.pxi,
#: _inflate_lz4_chunk); read through _lz4_in_c() / _zstd_in_c().
cdef int64_t _lz4_c_chunks = 0
cdef int64_t _zstd_c_chunks = 0


def _lz4_in_c(object use=None):
    """Whether LZ4 frames are decompressed in C (_core_inflate.pxi), and how
    many chunks were; ``use`` False turns it off, True back on (when found)."""
    global _lz4_decompress
    if not _lz4_tried:
        _lz4_load()
    if use is not None:
        _lz4_decompress = _lz4_found if use else NULL
    return _lz4_decompress != NULL, _lz4_c_chunks


def _zstd_in_c(object use=None):
    """Whether zstd frames are decompressed in C (_core_inflate.pxi), and how
    many chunks were; ``use`` False turns it off, True back on (when found)."""
    global _zstd_decompress
    if not _zstd_tried:
        _zstd_load()
    if use is not None:
        _zstd_decompress = _zstd_found if use else NULL
    return _zstd_decompress != NULL, _zstd_c_chunks


def _zstd_encode_in_c(object use=None):
    """Whether zstd batches are compressed in C (_core_compress.pxi); ``use``
    False turns it off, True back on (when found)."""
    global _zc
    if not _zc_tried:
        _zc_load()
    if use is not None:
        _zc = _zc_found if use else _zc_off()
    return _zc.compress != NULL


def _window_is_open():
    """Whether the plain-list encode's GIL window (_core_threads.pxi) is open
    (never, between calls)."""
    return bool(_window_open)


def _spare_sizes():
    """The capacities of the spare blocks (_core_memory.pxi), largest first."""
    return sorted([_block_capacity(_spares[i]) for i in range(SPARE_BLOCKS) if _spares[i] != NULL], reverse=True)


def _release_spare():
    """Free the spare blocks (_core_memory.pxi) now."""
    cdef int i
    for i in range(SPARE_BLOCKS):
        _free_block(_spares[i])
        _spares[i] = NULL


def _decode_varint(data, Py_ssize_t pos=0):
    """Read one zigzag varint (_core_wire.pxi); return ``(value, next_pos)``."""
    return _one_varint(data, pos, False)


def _decode_varlong(data, Py_ssize_t pos=0):
    """Read one zigzag varlong (_core_wire.pxi); return ``(value, next_pos)``."""
    return _one_varint(data, pos, True)


def _encode_varint(int32_t value):
    """Zigzag varint bytes of ``value`` (_core_wire.pxi)."""
    cdef uint8_t buf[5]
    cdef uint8_t* end = _write_varint(buf, value)
    return PyBytes_FromStringAndSize(<char*>buf, end - buf)


def _encode_varlong(int64_t value):
    """Zigzag varlong bytes of ``value`` (_core_wire.pxi)."""
    cdef uint8_t buf[10]
    cdef uint8_t* end = _write_varlong(buf, value)
    return PyBytes_FromStringAndSize(<char*>buf, end - buf)


# ---------------------------------------------------------------------------
# The parts

include "_core_rows.pxi"
include "_core_wire.pxi"
include "_core_errors.pxi"
include "_core_frame.pxi"
include "_core_parse.pxi"
include "_core_memory.pxi"
include "_core_threads.pxi"
include "_core_decode.pxi"
include "_core_inflate.pxi"
include "_core_stamps.pxi"
include "_core_gather.pxi"
include "_core_output.pxi"
include "_core_write.pxi"
include "_core_compress.pxi"
include "_core_encode.pxi"
