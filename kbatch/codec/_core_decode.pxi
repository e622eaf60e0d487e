# _core_decode.pxi: decode, scan and slices, part of kbatch/codec/_core.pyx.
#
# provides: decode, scan, slices (public); the chunked parse driver (parse_job_t,
#           _parse_batch, _parse_chunk), the two-ended split parse (_parse_split,
#           _join_sides), _table (rows -> RecordTable)
# uses:     _core_frame (framing, CRC), _core_parse (records), _core_memory (arena, rows),
#           _core_threads (Helper, _CPUS), kbatch/_threads.pxd (kb_take, kb_cut),
#           _core_inflate (_decompress_payloads), _core_errors; the tunables _CHUNK_BYTES,
#           _CHUNK_BYTES_MAX, _CHUNKS_PER_INPUT, _SPLIT_BYTES in _core.pyx
#
# ---------------------------------------------------------------------------

# One pass over the batch headers (no GIL), then the batches in chunks of about
# a sixteenth of the input (256 KiB to 1 MiB, _core.pyx): their CRC-32Cs, their
# payloads (decompressed into one arena when any batch of the buffer is
# compressed), then their records straight into C row buffers (no GIL). Each
# stage stops at the first bad batch, so the earliest error wins and everything
# before it is returned as the error's ``partial`` table.
#
# On a machine with two or more cores, uncompressed input of _SPLIT_BYTES or
# more is parsed from both ends at once (see _parse_split), and compressed
# input is decoded as a two-stage pipeline: while a parse thread turns chunk k into rows (pure C,
# no GIL, no Python object), the calling thread checks and decompresses chunk
# k + 1 (crc32c and the codecs release the GIL for large buffers). The
# calling thread never moves or frees what the parse thread reads or writes
# (the arena, the row buffers) without first waiting for it to go idle.


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
            _fail(err, E_COUNT_TOO_LARGE, b.position + RECORDS_COUNT_OFFSET, "recordCount", -1, b.record_count, pend[k] - pstart[k])
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
# word holding both ends of the range left (kb_take, kbatch/_threads.pxd).

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


cdef int _join_sides(Helper parser, split_t* split, batch_t* bp, int64_t end, const uint8_t* skip,
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


cdef object _parse_split(Helper parser, parse_job_t* job, int64_t* bad, rows_t* rows):
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
        # back take batches before the front starts: _SPLIT_BACK_FIRST, a
        # test hook in _core.pyx.)
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
    cdef Helper parser
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
    chunk_bytes = min(_CHUNK_BYTES_MAX, max(_CHUNK_BYTES, n // _CHUNKS_PER_INPUT))
    # Two threads: compressed input as a pipeline of chunks (one chunk has
    # nothing to overlap); uncompressed input split by batches.
    split = not in_arena and _CPUS > 1 and 1 < bad < 0xFFFFFFFF and n >= _SPLIT_BYTES
    parser = take_helper(split or (_CPUS > 1 and in_arena and bad > 1 and n > chunk_bytes), False)
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
        give_back(parser, False)  # first: the parse thread may still be writing rows
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
    >>> from kbatch.codec._core import scan
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
