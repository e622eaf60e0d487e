# _core_write.pxi: records and batches written, part of kbatch/codec/_core.pyx.
#
# provides: the record and batch-header writers (_write_record(s), _write_batch_header: the
#           Record and RecordBatch of the grammar in _core.pyx's docstring), _seal (CRC-32C),
#           _plan/_plan_records (batches under the limits), batch_opts_t, write_job_t,
#           _write_raw (records only), _write_uncompressed (two writer threads for large
#           outputs), _halve, _max_timestamp
# uses:     kbatch/_wire.pxd (writers, offsets), _core_wire (varints), _core_frame (_Span),
#           _core_parse (_sequence_at), _core_gather (C rows, plan_t), _core_threads (Helper,
#           the GIL window), _core_output (_Output, kb_populate), kbatch/_threads.pxd (kb_take,
#           kb_load, kb_store)

cdef inline int64_t _body_size(const rec_in_t* r, int64_t timestamp_delta, int32_t offset_delta) noexcept nogil:
    """Bytes of a record after its length varint."""
    return 1 + _varlong_size(timestamp_delta) + _varint_size(offset_delta) + r.fixed_size


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
    _put32(p + LENGTH_OFFSET, <uint32_t>(size - LOG_OVERHEAD))
    _put32(p + PARTITION_LEADER_EPOCH_OFFSET, <uint32_t>leader_epoch)
    p[MAGIC_OFFSET] = 2
    _put32(p + CRC_OFFSET, 0)  # crc, filled once the batch is complete
    _put16(p + ATTRIBUTES_OFFSET, <uint16_t>attributes)
    _put32(p + LAST_OFFSET_DELTA_OFFSET, <uint32_t>last_offset_delta)
    _put64(p + BASE_TIMESTAMP_OFFSET, <uint64_t>base_timestamp)
    _put64(p + MAX_TIMESTAMP_OFFSET, <uint64_t>max_timestamp)
    _put64(p + PRODUCER_ID_OFFSET, <uint64_t>producer_id)
    _put16(p + PRODUCER_EPOCH_OFFSET, <uint16_t>producer_epoch)
    _put32(p + BASE_SEQUENCE_OFFSET, <uint32_t>base_sequence)
    _put32(p + RECORDS_COUNT_OFFSET, <uint32_t>record_count)


cdef inline void _seal(_Span span, uint8_t* batch, Py_ssize_t size) except *:
    """Write the CRC-32C of a finished batch (attributes .. end)."""
    _put32(batch + CRC_OFFSET, _span_crc32c(span, batch + ATTRIBUTES_OFFSET, size - ATTRIBUTES_OFFSET, 0))


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
    cdef Helper worker
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
    worker = take_helper(True, False)
    worker.submit(_plan_range, &back, hold_gil)
    if hold_gil:
        _plan_range(&front)
    else:
        _gil_may_go()
        with nogil:
            _plan_range(&front)
    give_back(worker, hold_gil)
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
    # Below this a second writer thread costs more than it saves.
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


cdef int _write_uncompressed(_Inputs inp, const batch_opts_t* o, const plan_t* plans, int64_t nb,
                             int64_t total, bint hold_gil, _Output output) except -1:
    """The planned batches, uncompressed, into ``output``.

    Each batch's CRC is computed (through crc32c, with the GIL) right after
    the batch is written, while it is still in cache. On two threads, a C
    worker writes batches from the front and the calling thread from the
    back; the calling thread also seals the front's batches as they are
    published. With ``hold_gil`` the GIL is held throughout, waits included.
    """
    cdef uint8_t* out_ptr
    cdef int64_t* at = <int64_t*>malloc(nb * sizeof(int64_t))
    cdef int64_t k, pos = 0, sealed = 0, mine = 0
    cdef bint two = _CPUS > 1 and nb > 1 and total >= PARALLEL_WRITE_MIN_BYTES
    cdef Helper worker = None
    cdef _Span span = _Span()
    cdef write_job_t job
    if at == NULL:
        raise MemoryError()
    try:
        output.open(total)
        out_ptr = output.ptr
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
        if two:
            # The worker maps the first half's pages, this thread the second's.
            mine = at[_halve(plans, nb, total)]
            if output.fresh:
                job.populate = mine
            worker = take_helper(True, False)
            worker.submit(_write_front, &job, hold_gil)
        if output.fresh:
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
                give_back(worker, hold_gil)
        if two:
            for k in range(sealed, <int64_t>job.front_done):
                _seal(span, out_ptr + at[k], plans[k].size)
        return 0
    finally:
        free(at)


cdef int64_t _halve(const plan_t* plans, int64_t nb, int64_t total) noexcept nogil:
    """The first batch of the second half: two halves of about the same bytes, neither empty."""
    cdef int64_t k = 0, half = 0
    while k < nb - 1 and 2 * (half + plans[k].size) <= total:
        half += plans[k].size
        k += 1
    return k if k > 0 else 1


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
