# _core_stamps.pxi: the stamps walk, part of kbatch/codec/_core.pyx.
#
# provides: stamps (public): per record its offset and timestamp, per batch its least record
#           timestamp and whether the walk vouches for it, without building a record row;
#           the STAMPS_* statuses
# uses:     _core_frame (_count_entries, _fill_batches, _check_crcs), _core_wire (varints),
#           _core_inflate (_lz4_frame_bound, _lz4_declared_size, _lz4_frame_into,
#           _zstd_frame_bound, _zstd_frame_into and their loaders), _core_parse (_reserve),
#           _core_memory (_rows_array, _row_ptr), _core_threads (Helper, take_helper,
#           give_back, _CPUS), kbatch/_threads.pxd (kb_take, kb_cut); the tunables
#           _CHUNK_BYTES, _CHUNK_BYTES_MAX, _CHUNKS_PER_INPUT in _core.pyx, _LZ4_SOLO_CHUNKS;
#           zlib's inflate (gzip payloads; the extension links zlib already for its CRC-32)
#
# What the walk reads of a v2 batch (the grammar of kbatch/codec/_core.pyx; only the fields
# marked * are kept, every other length is read only to be checked and stepped over)::
#
#     RecordBatch header     baseOffset*, magic, crc, attributes (codec, timestampType*,
#                            control), baseTimestamp*, maxTimestamp*, recordCount
#     records                decompressed (none, gzip, lz4, zstd) into one scratch buffer
#     Record =>
#         length             varint   0 <= length <= bytes left in the records
#         attributes         int8
#         timestampDelta*    varlong  timestamp = baseTimestamp + delta (CreateTime),
#                                     maxTimestamp for every record (LogAppendTime)
#         offsetDelta*       varint   offset = baseOffset + delta
#         keyLength, key     varint, bytes   (a control batch's first key: >= 4 bytes,
#                                             version int16 >= 0)
#         valueLength, value varint, bytes
#         headersCount       varint   >= 0, at most (bytes left) / 2
#         Header => headerKeyLength (>= 0), headerKey, headerValueLength, headerValue
#     then: exactly recordCount records, ending where the records end
#
# A batch is vouched for (STAMPS_OK) only when every check decode makes of it holds: its
# CRC (with verify_crc), its payload decompressed by the same C path decode takes first
# (liblz4's frame of independent blocks, libzstd's one-shot decoder) or by what has the last
# word there (zlib, for a gzip payload of exactly one member: _gzip._gunzip_stream),
# within max_decompressed_size, the record count against the bytes, and every record's fields
# as decode's parser checks them (_parse_body). Anything else gets a status saying why not
# and no rows: legacy (magic 0/1) batches, snappy (cramjam, with the GIL: decode's path),
# payloads C does not take alone (several gzip members, ...), corrupt bytes. The caller
# decodes those with decode, which raises the error that names the byte, the batch and the
# field.
#
# Memory: one scratch buffer per thread, as large as the largest payload it decompressed (at
# most max_decompressed_size), reused batch after batch; the output grows with the records found.
#
# Threads: the input in chunks (as decode's); each chunk's CRCs checked by the calling thread
# (crc32c), then its batches walked without the GIL by the calling thread from the front and,
# on two or more cores, kbatch's helper thread from the back (kb_take), each side into its own
# scratch and record arrays; the records are put in batch order at the end. When the helper
# took nothing of a chunk (no core free for it), the next _LZ4_SOLO_CHUNKS chunks go without it.

#: Statuses of :func:`stamps`, per batch.
STAMPS_OK = 0          # vouched for: its records' offsets and timestamps are in the arrays
STAMPS_SKIPPED = 1     # skip_batches said so
STAMPS_LEGACY = 2      # magic 0 or 1
STAMPS_CODEC = 3       # snappy, or a payload the C decompressors do not take alone
STAMPS_TOO_LARGE = 4   # it would decompress to more than max_decompressed_size
STAMPS_CORRUPT = 5     # a bad frame, CRC, payload or record (decode says which)

cdef enum:
    W_OK = 0
    W_SKIPPED = 1
    W_LEGACY = 2
    W_CODEC = 3
    W_TOO_LARGE = 4
    W_CORRUPT = 5
    W_NO_MEMORY = -1


cdef extern from "zlib.h":
    ctypedef struct z_stream:
        unsigned char* next_in
        unsigned int avail_in
        unsigned char* next_out
        unsigned int avail_out
    int Z_OK, Z_STREAM_END, Z_BUF_ERROR, Z_NO_FLUSH
    int inflateInit2(z_stream* strm, int window_bits) nogil
    int inflateReset(z_stream* strm) nogil
    int inflate(z_stream* strm, int flush) nogil
    int inflateEnd(z_stream* strm) nogil


cdef struct walk_t:
    int64_t* offsets         # per record kept
    int64_t* timestamps
    int64_t size             # records kept
    int64_t capacity
    int64_t offsets_capacity
    uint8_t* scratch         # one batch's records, decompressed
    int64_t scratch_capacity
    int64_t cap              # max_decompressed_size
    void* dctx               # libzstd's context, when a batch is zstd
    z_stream zs              # zlib's, when a batch is gzip (zs_ready: initialised)
    bint zs_ready


cdef inline bint _walk_body(const uint8_t* p, const uint8_t* e, bint control_key, int64_t* timestamp_delta,
                            int32_t* offset_delta) noexcept nogil:
    """Check one record body (attributes .. end of headers) as _parse_body does; read its
    timestampDelta and offsetDelta. ``control_key``: the first record of a control batch."""
    cdef int32_t key_length, value_length, header_count, h, hk_length, hv_length
    cdef const uint8_t* key
    if p >= e:
        return False
    p += 1  # attributes
    if _read_varlong(&p, e, timestamp_delta) or _read_varint(&p, e, offset_delta):
        return False
    if _read_varint(&p, e, &key_length):
        return False
    key = p
    if key_length >= 0:
        if key_length > e - p:
            return False
        p += key_length
    if control_key and (key_length < 4 or <int16_t>_be16(key) < 0):
        return False
    if _read_varint(&p, e, &value_length):
        return False
    if value_length >= 0:
        if value_length > e - p:
            return False
        p += value_length
    if _read_varint(&p, e, &header_count) or header_count < 0:
        return False
    if <int64_t>header_count * MIN_HEADER_SIZE > e - p:
        return False
    for h in range(header_count):
        if _read_varint(&p, e, &hk_length) or hk_length < 0 or hk_length > e - p:
            return False
        p += hk_length
        if _read_varint(&p, e, &hv_length):
            return False
        if hv_length >= 0:
            if hv_length > e - p:
                return False
            p += hv_length
    return p == e


cdef int _walk_gzip(walk_t* w, const uint8_t* src, int64_t n, const uint8_t** out, int64_t* size) noexcept nogil:
    """A gzip payload that is exactly one member, inflated by zlib (what decides for decode:
    _gzip._gunzip_stream) into the scratch buffer; W_CODEC for anything else (bytes
    after the member: decode's path for several members)."""
    cdef int rc
    cdef int64_t room, at = 0
    cdef uint8_t* grown
    if n < 18 or n > 0x7FFFFFFF:
        return W_CODEC
    if not w.zs_ready:
        memset(&w.zs, 0, sizeof(z_stream))
        if inflateInit2(&w.zs, 31) != Z_OK:  # 16 + 15: a gzip wrapper, a 32 KiB window
            return W_NO_MEMORY
        w.zs_ready = True
    elif inflateReset(&w.zs) != Z_OK:
        return W_CODEC
    room = min(max(<int64_t>_le32(src + n - 4), <int64_t>65536), w.cap + 1)  # its trailer's ISIZE: a hint
    w.zs.next_in = <unsigned char*>src
    w.zs.avail_in = <unsigned int>n
    while True:
        if room > w.scratch_capacity:
            grown = <uint8_t*>realloc(w.scratch, room)
            if grown == NULL:
                return W_NO_MEMORY
            w.scratch = grown
            w.scratch_capacity = room
        w.zs.next_out = w.scratch + at
        w.zs.avail_out = <unsigned int>min(room - at, <int64_t>0x7FFFFFFF)
        rc = inflate(&w.zs, Z_NO_FLUSH)
        at = w.zs.next_out - w.scratch
        if at > w.cap:
            return W_TOO_LARGE
        if rc == Z_STREAM_END:
            if w.zs.avail_in != 0:
                return W_CODEC
            out[0] = w.scratch
            size[0] = at
            return W_OK
        if (rc != Z_OK and rc != Z_BUF_ERROR) or w.zs.avail_out != 0:
            return W_CORRUPT  # a bad stream, or its input ended inside the member
        room = min(2 * room, w.cap + 1)


cdef int _walk_payload(walk_t* w, const uint8_t* src, int64_t n, int codec, const uint8_t** out,
                       int64_t* size) noexcept nogil:
    """A batch's records, decompressed into the scratch buffer when ``codec`` is lz4 or
    zstd (as decode's C path sizes and decompresses them); a W_ status."""
    cdef int64_t bound, declared, got
    cdef uint8_t* grown
    if codec == 0:
        out[0] = src
        size[0] = n
        return W_OK
    if codec == 1:
        return _walk_gzip(w, src, n, out, size)
    if codec == 3:
        if _lz4_decompress == NULL:
            return W_CODEC
        bound = _lz4_frame_bound(src, n)
        declared = _lz4_declared_size(src, n)
        if 0 < declared < bound:
            bound = declared  # decode's slot: a larger frame goes to _compression there
    elif codec == 4:
        if _zstd_decompress == NULL or w.dctx == NULL:
            return W_CODEC
        bound = _zstd_frame_bound(src, n)
    else:
        return W_CODEC
    if bound <= 0:
        return W_CODEC
    if bound > w.cap:
        return W_TOO_LARGE
    if bound > w.scratch_capacity:
        grown = <uint8_t*>realloc(w.scratch, bound)
        if grown == NULL:
            return W_NO_MEMORY
        w.scratch = grown
        w.scratch_capacity = bound
    if codec == 3:
        got = _lz4_frame_into(src, n, w.scratch, bound)
    else:
        got = _zstd_frame_into(w.dctx, src, n, w.scratch, bound)
    if got < 0:
        return W_CORRUPT
    out[0] = w.scratch
    size[0] = got
    return W_OK


cdef int _walk_batch(walk_t* w, const uint8_t* buf, const batch_t* b, int64_t start, int64_t end,
                     int32_t* kept, int64_t* least) noexcept nogil:
    """Walk one v2 batch's records (``buf[start:end]``, as framed); a W_ status. Its
    records' offsets and timestamps are appended to ``w`` only when it is W_OK."""
    cdef const uint8_t* p
    cdef const uint8_t* e
    cdef int64_t size, timestamp_delta, timestamp, lowest = INT64_MAX
    cdef int32_t i, n = b.record_count, length, offset_delta
    cdef int rc
    cdef bint data = not b.is_control, append_time = b.timestamp_type == 1
    rc = _walk_payload(w, buf + start, end - start, b.compression, &p, &size)
    if rc != W_OK:
        return rc
    if n > size // MIN_RECORD_SIZE:  # decode's E_COUNT_TOO_LARGE
        return W_CORRUPT
    if data and not (_reserve(<void**>&w.offsets, &w.offsets_capacity, w.size + n, sizeof(int64_t))
                     and _reserve(<void**>&w.timestamps, &w.capacity, w.size + n, sizeof(int64_t))):
        return W_NO_MEMORY
    e = p + size
    for i in range(n):
        if _read_varint(&p, e, &length) or length < 0 or length > e - p:
            return W_CORRUPT
        if not _walk_body(p, p + length, not data and i == 0, &timestamp_delta, &offset_delta):
            return W_CORRUPT
        p += length
        if data:
            if append_time:
                timestamp = b.max_timestamp
            else:
                timestamp = <int64_t>(<uint64_t>b.base_timestamp + <uint64_t>timestamp_delta)
            w.offsets[w.size + i] = <int64_t>(<uint64_t>b.base_offset + <uint64_t><int64_t>offset_delta)
            w.timestamps[w.size + i] = timestamp
            if timestamp < lowest:
                lowest = timestamp
    if p != e:
        return W_CORRUPT
    if data:
        w.size += n
        kept[0] = n
    least[0] = lowest
    return W_OK



cdef struct walk_job_t:
    # One chunk's batches ``first + i`` for i in the shared range, taken from either end.
    uint64_t range
    int64_t first
    const uint8_t* buf
    const batch_t* bp
    const int64_t* pstart
    const int64_t* pend
    const uint8_t* unchecked      # 1: not walked (status set), 2: a bad CRC
    int8_t* status
    int32_t* counts
    int64_t* least
    int64_t* rstart               # per batch: its first record in its side's arrays
    uint8_t* rside                # per batch: the side that walked it (0 front, 1 back)
    walk_t* sides                 # [2]
    int64_t back_took             # batches the back took (written by the back only)
    bint out_of_memory


cdef void _walk_side(walk_job_t* job, bint from_back) noexcept nogil:
    """Walk batches taken from one end of the job's range until none is left."""
    cdef walk_t* w = job.sides + (1 if from_back else 0)
    cdef int64_t i, k
    cdef int rc
    i = kb_take(&job.range, from_back)
    while i >= 0:
        k = job.first + i
        if from_back:
            job.back_took += 1
        if job.unchecked[k] == 2:
            job.status[k] = W_CORRUPT
        elif not job.unchecked[k]:
            job.rstart[k] = w.size
            job.rside[k] = 1 if from_back else 0
            rc = _walk_batch(w, job.buf, job.bp + k, job.pstart[k], job.pend[k], job.counts + k, job.least + k)
            if rc == W_NO_MEMORY:
                job.out_of_memory = True
                kb_cut(&job.range, 0)
                return
            job.status[k] = rc
        i = kb_take(&job.range, from_back)


cdef void _walk_back(void* arg) noexcept nogil:
    _walk_side(<walk_job_t*>arg, True)


def stamps(object data, *, object skip_batches=None, bint verify_crc=True, object max_decompressed_size=None):
    """Offsets and timestamps of the records of ``data``, walked without building a row.

    Frames ``data`` as :func:`decode` does and walks the records of each v2 batch it can
    vouch for (see the header of kbatch/codec/_core_stamps.pxi): decompressed into one scratch
    buffer reused batch after batch, with the GIL released, reading each record's
    timestampDelta and offsetDelta and checking every other field as decode does. A batch
    it cannot vouch for (legacy, snappy, a corrupt byte, a CRC mismatch with
    ``verify_crc``) is reported by its status, never raised: decode it with
    :func:`decode` for its rows or its error.

    Parameters
    ----------
    data : buffer
        Batches back to back (an incomplete trailing batch is left out, as decode does).
    skip_batches : array of bool, optional
        One per complete batch: those set are not walked (status ``STAMPS_SKIPPED``).
    verify_crc : bool, default True
        Vouch only for batches whose CRC-32C matches.
    max_decompressed_size : int, optional
        A batch that would decompress to more is not walked (``STAMPS_TOO_LARGE``);
        default as decode's.

    Returns
    -------
    offsets, timestamps : numpy.ndarray of int64
        One per data record of the batches vouched for, in batch order: what
        ``decode(data).records["offset"]`` and ``["timestamp"]`` give for them (a
        LogAppendTime batch's max_timestamp for each of its records).
    counts : numpy.ndarray of int32
        Per batch, its records in ``offsets`` (0 for a control batch and every batch not
        vouched for).
    least : numpy.ndarray of int64
        Per batch vouched for, its least record timestamp (INT64_MAX when it has no data
        record, and for every batch not vouched for).
    status : numpy.ndarray of int8
        Per batch: ``STAMPS_OK`` (0, vouched for), ``STAMPS_SKIPPED``, ``STAMPS_LEGACY``,
        ``STAMPS_CODEC``, ``STAMPS_TOO_LARGE`` or ``STAMPS_CORRUPT`` (a bad frame marks it
        and every batch after it).

    Examples
    --------
    >>> import kbatch
    >>> from kbatch.codec._core import stamps
    >>> raw = kbatch.encode([b"a", b"b", b"c"], timestamps=[5, 3, 4], max_batch_records=2)
    >>> offsets, timestamps, counts, least, status = stamps(raw)
    >>> offsets.tolist(), timestamps.tolist(), counts.tolist(), least.tolist(), status.tolist()
    ([0, 1, 2], [5, 3, 4], [2, 1], [3, 4], [0, 0])
    """
    cdef object mv = _byte_view(data)
    cdef const uint8_t[::1] view = mv
    cdef int64_t n = view.shape[0]
    cdef const uint8_t* buf = &view[0] if n > 0 else NULL
    cdef int64_t consumed = 0, count = 0, good, k, j, c, chunk, chunk_bytes, at
    cdef error_t err
    cdef batch_t* bp = NULL
    cdef int64_t[::1] pstart
    cdef int64_t[::1] pend
    cdef int64_t[::1] rstart
    cdef uint8_t[::1] rside
    cdef int64_t[::1] out_offsets
    cdef int64_t[::1] out_timestamps
    cdef object batches, skip_arr
    cdef int8_t[::1] status
    cdef int32_t[::1] counts
    cdef int64_t[::1] least
    cdef uint8_t[::1] unchecked   # per batch: 1 no CRC to check (decided already), 2 a bad CRC
    cdef walk_t sides[2]
    cdef walk_t* w
    cdef walk_job_t job
    cdef Helper helper = None
    cdef bint lz4 = False, zstd = False, two
    cdef int solo_left = 0
    memset(&err, 0, sizeof(err))
    memset(sides, 0, sizeof(sides))
    memset(&job, 0, sizeof(job))
    with nogil:
        count = _count_entries(buf, n, &consumed)
    status_arr = np.full(count, W_CORRUPT, dtype=np.int8)
    counts_arr = np.zeros(count, dtype=np.int32)
    least_arr = np.full(count, INT64_MAX, dtype=np.int64)
    unchecked_arr = np.zeros(count, dtype=np.uint8)
    if skip_batches is not None:
        skip_arr = np.ascontiguousarray(skip_batches, dtype=np.bool_)
        if skip_arr.ndim != 1 or skip_arr.shape[0] != count:
            raise ValueError(f"skip_batches has {skip_arr.size} entries but data holds {count} complete batches")
        unchecked_arr |= skip_arr.view(np.uint8)
    if count == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64), counts_arr, least_arr, status_arr
    status = status_arr
    counts = counts_arr
    least = least_arr
    unchecked = unchecked_arr
    sides[0].cap = sides[1].cap = (_compression.DEFAULT_MAX_DECOMPRESSED_SIZE if max_decompressed_size is None
                                   else int(max_decompressed_size))
    batches = np.zeros(count, dtype=BATCH_DTYPE)
    pstart = np.empty(count, dtype=np.int64)
    pend = np.empty(count, dtype=np.int64)
    rstart = np.zeros(count, dtype=np.int64)
    rside = np.zeros(count, dtype=np.uint8)
    bp = <batch_t*>_row_ptr(batches)
    with nogil:
        good = _fill_batches(buf, n, bp, count, &pstart[0], &pend[0], &err)
        for k in range(good):
            if unchecked[k]:
                status[k] = W_SKIPPED
            elif bp[k].magic != 2:
                status[k] = W_LEGACY
                unchecked[k] = 1
            elif bp[k].compression == 2:
                status[k] = W_CODEC
                unchecked[k] = 1
            elif bp[k].compression == 3:
                lz4 = True
            elif bp[k].compression == 4:
                zstd = True
    if lz4 and not _lz4_tried:
        _lz4_load()
    if zstd and not _zstd_tried:
        _zstd_load()
    job.buf = buf
    job.bp = bp
    job.pstart = &pstart[0]
    job.pend = &pend[0]
    job.unchecked = &unchecked[0]
    job.status = &status[0]
    job.counts = &counts[0]
    job.least = &least[0]
    job.rstart = &rstart[0]
    job.rside = &rside[0]
    job.sides = sides
    chunk_bytes = min(_CHUNK_BYTES_MAX, max(_CHUNK_BYTES, n // _CHUNKS_PER_INPUT))
    # Two threads (as decode's LZ4 chunks): the calling thread walks a chunk's batches from
    # the front, the helper from the back, each side with its scratch and its records;
    # records are put back in batch order at the end.
    two = _CPUS > 1 and good > 1 and n > chunk_bytes
    try:
        if zstd and _zstd_decompress != NULL:
            for c in range(2 if two else 1):
                sides[c].dctx = _zstd_create()
                if sides[c].dctx == NULL:
                    raise MemoryError()
        if two:
            helper = take_helper(True)
        k = 0
        while k < good:
            # A chunk: its CRCs checked (crc32c, which lets the GIL go for large buffers),
            # then its batches walked without the GIL, from cache.
            j = k
            chunk = 0
            while j < good and (j == k or chunk < chunk_bytes):
                chunk += LOG_OVERHEAD + bp[j].batch_length
                j += 1
            if verify_crc:
                c = k
                while c < j:
                    c = _check_crcs(buf, bp, c, j, &unchecked[0], &err)
                    if c < j:
                        unchecked[c] = 2
                        c += 1
            job.first = k
            job.range = <uint64_t>(j - k) << 32
            job.back_took = 0
            if helper is not None and j - k > 1 and solo_left == 0:
                helper.submit(_walk_back, &job, False)
                with nogil:
                    _walk_side(&job, False)
                if not helper.cancel():
                    helper.wait(False)
                if job.back_took == 0:  # no core was free for it: alone for a while
                    solo_left = _LZ4_SOLO_CHUNKS
            else:
                if solo_left > 0:
                    solo_left -= 1
                with nogil:
                    _walk_side(&job, False)
            if job.out_of_memory:
                raise MemoryError()
            k = j
        if sides[1].size == 0:  # the front's records are in batch order
            offsets = _rows_array(<void**>&sides[0].offsets, sides[0].size, sizeof(int64_t), np.int64)
            timestamps = _rows_array(<void**>&sides[0].timestamps, sides[0].size, sizeof(int64_t), np.int64)
        else:
            offsets = np.empty(sides[0].size + sides[1].size, np.int64)
            timestamps = np.empty(sides[0].size + sides[1].size, np.int64)
            out_offsets = offsets
            out_timestamps = timestamps
            at = 0
            with nogil:
                for k in range(good):
                    if counts[k]:
                        w = sides + rside[k]
                        memcpy(&out_offsets[at], w.offsets + rstart[k], counts[k] * sizeof(int64_t))
                        memcpy(&out_timestamps[at], w.timestamps + rstart[k], counts[k] * sizeof(int64_t))
                        at += counts[k]
    finally:
        if helper is not None:
            give_back(helper, False, True)
        for c in range(2):
            free(sides[c].offsets)
            free(sides[c].timestamps)
            free(sides[c].scratch)
            if sides[c].dctx != NULL:
                _zstd_free(sides[c].dctx)
            if sides[c].zs_ready:
                inflateEnd(&sides[c].zs)
    return offsets, timestamps, counts_arr, least_arr, status_arr
