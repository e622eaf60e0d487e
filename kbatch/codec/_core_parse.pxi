# _core_parse.pxi: records into rows, part of kbatch/codec/_core.pyx.
#
# provides: _reserve (grow a C row buffer); the v2 record parser (_parse_body_fast for the
#           common shape, _parse_body in full, _parse_records over one batch's records);
#           the legacy parser (_parse_legacy_message, _frame_legacy_inner for a decompressed
#           wrapper's inner message set, _parse_legacy)
# uses:     kbatch/_wire.pxd (readers, offsets), _core_wire (varints), _core_errors (_fail),
#           _core_frame (_crc32_ieee)

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
    if unlikely(n < RECORD_OVERHEAD_V0):
        return _fail(err, E_LEGACY_TOO_SMALL, m - base, "size", i, n, 0)
    magic = <int8_t>m[LEGACY_MAGIC_OFFSET]
    if unlikely(magic != 0 and magic != 1):
        return _fail(err, E_INNER_MAGIC, m + LEGACY_MAGIC_OFFSET - base, "magic", i, magic, 0)
    if unlikely(magic == 1 and n < RECORD_OVERHEAD_V1):
        return _fail(err, E_LEGACY_TOO_SMALL, m - base, "size", i, n, 1)
    attributes = <int8_t>m[LEGACY_ATTRIBUTES_OFFSET]
    if inner:
        if unlikely(attributes & 0x07):
            return _fail(err, E_NESTED_COMPRESSION, m + LEGACY_ATTRIBUTES_OFFSET - base, "attributes", i, attributes & 0x07, 0)
        if verify_crc:
            computed = _crc32_ieee(m + LEGACY_MAGIC_OFFSET, n - LEGACY_MAGIC_OFFSET)
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
        r.timestamp = <int64_t>_be64(m + LEGACY_TIMESTAMP_OFFSET) if magic == 1 else -1
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
        size = <int32_t>_be32(p + LENGTH_OFFSET)
        if unlikely(size < RECORD_OVERHEAD_V0):
            return _fail(err, E_ENTRY_TOO_SMALL, p + LENGTH_OFFSET - base, "size", count, size, 0)
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
        size = <int32_t>_be32(p + LENGTH_OFFSET)
        if unlikely(size < 0 or size > base + end - p - LOG_OVERHEAD):
            return _fail(err, E_INNER_TRUNCATED, p - base, "size", i, size, base + end - p - LOG_OVERHEAD)
        if _parse_legacy_message(base, p + LOG_OVERHEAD, p + LOG_OVERHEAD + size,
                                 <int64_t>(<uint64_t>_be64(p) + <uint64_t>delta), True, verify_crc,
                                 forced, b.max_timestamp, i, batch_index, out + i, hb.size, err) != 0:
            return -1
        p += LOG_OVERHEAD + size
    return 0
