# _core_frame.pxi: batch framing and checksums, part of kbatch/codec/_core.pyx.
#
# provides: MIN_RECORD_SIZE, MIN_HEADER_SIZE; _count_entries (complete
#           entries in a buffer), _fill_batches (every batch header into a batch_t row, v2 and
#           legacy outer entries, with the byte range its records are parsed from),
#           _fill_legacy; _crc32_ieee (magic 0/1) and _span_crc32c over a _Span (magic 2)
# uses:     kbatch/_wire.pxd (readers, header offsets), _core_errors (_fail)

cdef enum:
    # Record (magic 2)
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
        length = <int32_t>_be32(buf + pos + LENGTH_OFFSET)
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
        length = <int32_t>_be32(p + LENGTH_OFFSET)
        if length < RECORD_OVERHEAD_V0:
            _fail(err, E_ENTRY_TOO_SMALL, pos + LENGTH_OFFSET, "batchLength", -1, length, 0)
            return k
        if unlikely(length > n - pos - LOG_OVERHEAD):  # (likewise)
            _fail(err, E_TRUNCATED_FIELD, pos + LENGTH_OFFSET, "batchLength", -1, length, n - pos - LOG_OVERHEAD)
            return k
        magic = <int8_t>p[MAGIC_OFFSET]
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
            _fail(err, E_UNKNOWN_MAGIC, pos + MAGIC_OFFSET, "magic", -1, magic, 0)
            return k
        if length + LOG_OVERHEAD < BATCH_OVERHEAD:
            _fail(err, E_BATCH_TOO_SMALL, pos + LENGTH_OFFSET, "batchLength", -1, length + LOG_OVERHEAD, 0)
            return k
        attributes = <int16_t>_be16(p + ATTRIBUTES_OFFSET)
        b.partition_leader_epoch = <int32_t>_be32(p + PARTITION_LEADER_EPOCH_OFFSET)
        b.crc = _be32(p + CRC_OFFSET)
        b.attributes = attributes
        b.last_offset_delta = <int32_t>_be32(p + LAST_OFFSET_DELTA_OFFSET)
        b.base_timestamp = <int64_t>_be64(p + BASE_TIMESTAMP_OFFSET)
        b.max_timestamp = <int64_t>_be64(p + MAX_TIMESTAMP_OFFSET)
        b.producer_id = <int64_t>_be64(p + PRODUCER_ID_OFFSET)
        b.producer_epoch = <int16_t>_be16(p + PRODUCER_EPOCH_OFFSET)
        b.base_sequence = <int32_t>_be32(p + BASE_SEQUENCE_OFFSET)
        b.record_count = <int32_t>_be32(p + RECORDS_COUNT_OFFSET)
        b.compression = attributes & 0x07
        b.timestamp_type = (attributes >> 3) & 1
        b.is_transactional = (attributes >> 4) & 1
        b.is_control = (attributes >> 5) & 1
        b.has_delete_horizon = (attributes >> 6) & 1
        if b.compression > 4:
            _fail(err, E_UNKNOWN_COMPRESSION, pos + ATTRIBUTES_OFFSET, "attributes", -1, b.compression, 0)
            return k
        if b.record_count < 0:
            _fail(err, E_NEGATIVE_COUNT, pos + RECORDS_COUNT_OFFSET, "recordCount", -1, b.record_count, 0)
            return k
        pstart[k] = pos + BATCH_OVERHEAD
        pend[k] = pos + LOG_OVERHEAD + length
        pos += LOG_OVERHEAD + length
    return count


cdef inline int64_t _legacy_key_offset(int8_t magic) noexcept nogil:
    # crc(4) magic(1) attributes(1) [timestamp(8)]: where the key length is, from the crc
    return LEGACY_KEY_SIZE_OFFSET_V0 if magic == 0 else LEGACY_KEY_SIZE_OFFSET_V1


cdef int _fill_legacy(const uint8_t* buf, int64_t pos, batch_t* b, int64_t* pstart, int64_t* pend,
                      error_t* err) noexcept nogil:
    """Header fields of a magic 0/1 outer entry (the message starts at pos + 12)."""
    cdef const uint8_t* m = buf + pos + LOG_OVERHEAD   # the message: crc onwards
    cdef const uint8_t* end = m + b.batch_length
    cdef const uint8_t* q
    cdef int32_t key_length, value_length
    cdef int8_t attributes = <int8_t>m[LEGACY_ATTRIBUTES_OFFSET]
    if b.batch_length < _legacy_key_offset(b.magic) + 8:
        return _fail(err, E_LEGACY_TOO_SMALL, pos + LENGTH_OFFSET, "batchLength", -1, b.batch_length, b.magic)
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
        b.base_timestamp = b.max_timestamp = <int64_t>_be64(m + LEGACY_TIMESTAMP_OFFSET)
    else:
        b.timestamp_type = -1
        b.base_timestamp = b.max_timestamp = -1
    if b.compression == 4:
        return _fail(err, E_LEGACY_ZSTD, pos + LOG_OVERHEAD + LEGACY_ATTRIBUTES_OFFSET, "attributes", -1, b.magic, 0)
    if b.compression > 4:
        return _fail(err, E_UNKNOWN_COMPRESSION, pos + LOG_OVERHEAD + LEGACY_ATTRIBUTES_OFFSET, "attributes", -1, b.compression, 0)
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
            start = batches[k].position + ATTRIBUTES_OFFSET
            computed = _span_crc32c(span, buf + start, stop - start, -1)
        else:
            start = batches[k].position + LOG_OVERHEAD + LEGACY_MAGIC_OFFSET
            computed = _crc32_ieee(buf + start, stop - start)
        if computed != batches[k].crc:
            err.batch_index = k
            err.batch_position = batches[k].position
            _fail(err, E_CRC if batches[k].magic == 2 else E_CRC32,
                  batches[k].position + (CRC_OFFSET if batches[k].magic == 2 else LOG_OVERHEAD + LEGACY_CRC_OFFSET),
                  "crc", -1, batches[k].crc, computed)
            return k
    return end
