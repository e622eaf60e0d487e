# _core_wire.pxi: byte-level readers and writers, part of kbatch/codec/_core.pyx.
#
# provides: zigzag varint/varlong readers (bounded,
#           one-byte fast path: _read_varint, _read_varlong; unbounded _varint_at/_varlong_at
#           for bytes already checked), sizes and writers; _one_varint (one varint read from
#           Python, with its error: behind the test hooks _decode_varint/_decode_varlong in
#           _core.pyx); _byte_view
# uses:     nothing of the other parts (the byte-order readers/writers: kbatch/_wire.pxd)

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
