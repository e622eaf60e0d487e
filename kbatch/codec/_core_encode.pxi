# _core_encode.pxi: planning and writing batches, part of kbatch/codec/_core.pyx.
#
# provides: encode, encode_arrays, encode_control, BatchBuilder (public); the record and
#           batch-header writers, _seal (CRC-32C), _plan/_plan_records (batches under the
#           limits), _CompressJob, _encode_inputs, _write_uncompressed (two writer threads
#           for large outputs), _finish_batch
# uses:     kbatch/_wire.pxd (writers, offsets), _core_wire (varints), _core_frame (_Span), _core_gather
#           (C rows), _core_memory, _core_threads (Helper, the GIL window), _core_output (_Output),
#           kbatch/_threads.pxd (kb_take, kb_load, kb_store)

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
    ZSTD_CODEC = 4
    # Below these a second thread costs more than it saves.
    PARALLEL_COMPRESS_MIN_BYTES = 1 << 20
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


# zstd in C: libzstd's ZSTD_compressCCtx, found through ctypes in python-zstandard's
# cffi module (which exports libzstd's symbols; its C backend hides them), as the
# decoder finds it (_zstd._oneshot) and liblz4 (_lz4_load). Called without
# the GIL and without a Python object per batch, so both threads compress at once.
# Checked at load: its frames must be byte for byte python-zstandard's at the same
# level (one frame, content size, no checksum), else the Python codec is used.
# (zstd_create_fn, zstd_free_fn, zstd_is_error_fn: see _core_inflate, the decoder's.)

ctypedef size_t (*zstd_compress_fn)(void* cctx, void* dst, size_t capacity, const void* src, size_t size,
                                    int level) noexcept nogil
ctypedef size_t (*zstd_bound_fn)(size_t size) noexcept nogil
ctypedef const char* (*zstd_error_name_fn)(size_t code) noexcept nogil


cdef struct zstd_api_t:
    zstd_create_fn create
    zstd_free_fn free
    zstd_compress_fn compress
    zstd_bound_fn bound
    zstd_is_error_fn is_error
    zstd_error_name_fn error_name


cdef zstd_api_t _zc_found      # what _zc_load found (compress NULL: nothing)
cdef zstd_api_t _zc            # what is used (tests turn it off)
cdef bint _zc_tried = False
cdef object _zc_lib = None     # the ctypes.CDLL, held


def _zc_load():
    """Find libzstd's compressor in python-zstandard's cffi module; check its output."""
    global _zc_tried, _zc_lib, _zc_found, _zc
    _zc_tried = True
    try:
        import ctypes
        import zstandard
        lib = _compression.zstd_library()
        if lib is None:
            return
        at = [ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0
              for name in ("ZSTD_createCCtx", "ZSTD_freeCCtx", "ZSTD_compressCCtx", "ZSTD_compressBound",
                           "ZSTD_isError", "ZSTD_getErrorName")]
    except (ImportError, OSError, AttributeError):  # no ctypes, no such module or symbol
        return
    if not all(at):
        return
    cdef zstd_api_t api
    api.create = <zstd_create_fn><uintptr_t>at[0]
    api.free = <zstd_free_fn><uintptr_t>at[1]
    api.compress = <zstd_compress_fn><uintptr_t>at[2]
    api.bound = <zstd_bound_fn><uintptr_t>at[3]
    api.is_error = <zstd_is_error_fn><uintptr_t>at[4]
    api.error_name = <zstd_error_name_fn><uintptr_t>at[5]
    cdef bytes raw = b"kbatch: ZSTD_compressCCtx " * 400
    cdef bytearray out = bytearray(api.bound(len(raw)))
    cdef char* o = out
    cdef void* cctx = api.create()
    cdef size_t n
    if cctx == NULL:
        return
    try:
        for level in (3, 1, -5, 9):
            n = api.compress(cctx, o, len(out), <const char*>raw, len(raw), level)
            if api.is_error(n) or bytes(out[:n]) != zstandard.ZstdCompressor(level=level).compress(raw):
                return
    finally:
        api.free(cctx)
    _zc_lib = lib
    _zc_found = _zc = api


cdef zstd_api_t _zc_off():
    cdef zstd_api_t off
    memset(&off, 0, sizeof(off))
    return off


cdef struct zstd_job_t:
    # Batches to compress, taken from the front or the back of ``range`` (see
    # kb_take). Batch k's records are at ``raw + raw_at[k]`` (raw: all written
    # up front), else written into the side's scratch from ``recs``; its
    # compressed records go to ``out + out_at[k]`` (room: up to out_at[k + 1])
    # and their size to ``sizes[k]``.
    const rec_in_t* recs
    const hdr_in_t* hdrs
    const plan_t* plans
    const uint8_t* raw
    const int64_t* raw_at
    uint8_t* out
    const int64_t* out_at
    int64_t* sizes
    uint64_t range
    uint64_t failed          # set by the first side that fails: both stop
    int level


cdef struct zstd_side_t:
    zstd_job_t* job
    bint from_back
    size_t error             # a libzstd error code, or 0
    bint no_memory


cdef void _zstd_side(void* arg) noexcept nogil:
    """One thread's share of a zstd_job_t: batches until none is left."""
    cdef zstd_side_t* side = <zstd_side_t*>arg
    cdef zstd_job_t* job = side.job
    cdef void* cctx = _zc.create()
    cdef uint8_t* scratch = NULL
    cdef int64_t k, size, room = 0
    cdef const uint8_t* src
    cdef size_t n
    if cctx == NULL:
        side.no_memory = True
        kb_store(&job.failed, 1)
        return
    k = kb_take(&job.range, side.from_back)
    while k >= 0 and not kb_load(&job.failed):
        size = job.plans[k].size - BATCH_OVERHEAD
        if job.raw != NULL:
            src = job.raw + job.raw_at[k]
        else:
            if size > room:
                free(scratch)
                room = size
                scratch = <uint8_t*>malloc(room if room > 0 else 1)
                if scratch == NULL:
                    side.no_memory = True
                    kb_store(&job.failed, 1)
                    break
            _write_records(scratch, job.recs, job.hdrs, job.plans[k].first, job.plans[k].end)
            src = scratch
        n = _zc.compress(cctx, job.out + job.out_at[k], <size_t>(job.out_at[k + 1] - job.out_at[k]),
                           src, <size_t>size, job.level)
        if _zc.is_error(n):
            side.error = n
            kb_store(&job.failed, 1)
            break
        job.sizes[k] = <int64_t>n
        k = kb_take(&job.range, side.from_back)
    free(scratch)
    _zc.free(cctx)


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
        cdef Helper worker = None
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
            worker = take_helper(True, False)
            worker.submit(_write_raw, &job, True)
        _write_raw(&here)
        if worker is not None:
            give_back(worker, True)
        self.raw = memoryview(block)
        _close_window()  # the inputs are no longer read

    cdef list run(self, int64_t nb):
        """Compress batches ``0 .. nb`` here and, for large inputs, on a
        second thread at the same time; the compressed payloads in order."""
        cdef Helper helper = None
        self.payloads = [None] * nb
        self.next_batch = 0
        self.end_batch = nb
        if _CPUS > 1 and nb > 1 and self.raw_bytes >= PARALLEL_COMPRESS_MIN_BYTES:
            helper = take_helper(True, False)
            helper.start(self.take_batches)
        try:
            self.take()
        finally:
            if helper is not None:
                give_back(helper, False, True)  # waited for once started: it reads ``plans``
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

    cdef int assemble(self, list payloads, _Output output) except -1:
        """The batches (header, compressed records, CRC) into ``output``,
        each payload copied once."""
        cdef int64_t k, size, total = 0
        cdef Py_ssize_t nb = len(payloads)
        cdef uint8_t* p
        cdef _Span span = _Span()
        for payload in payloads:
            if BATCH_OVERHEAD + PyBytes_GET_SIZE(payload) > MAX_BATCH_SIZE:
                raise ValueError("batch is larger than a batch can hold (2 GiB)")
            total += BATCH_OVERHEAD + PyBytes_GET_SIZE(payload)
        output.open(total)
        p = output.ptr
        for k in range(nb):
            payload = <object>PyList_GET_ITEM(payloads, k)
            size = PyBytes_GET_SIZE(payload)
            self.put_batch(p, k, <const uint8_t*>PyBytes_AS_STRING(payload), size, span)
            p += BATCH_OVERHEAD + size
        return 0

    cdef void put_batch(self, uint8_t* p, int64_t k, const uint8_t* payload, int64_t size,
                        _Span span) except *:
        """Batch ``k`` at ``p``: its header, ``size`` bytes of compressed records, its CRC."""
        cdef const rec_in_t* recs = self.inp.recs
        cdef const batch_opts_t* o = &self.opts
        cdef int64_t first = self.plans[k].first, end = self.plans[k].end
        _write_batch_header(p, o.base_offset + first, BATCH_OVERHEAD + size, o.leader_epoch, o.attributes,
                            <int32_t>(end - first - 1), recs[first].timestamp,
                            _max_timestamp(recs, first, end), o.producer_id, o.producer_epoch,
                            _sequence_at(o.base_sequence, <int32_t>first), <int32_t>(end - first))
        memcpy(p + BATCH_OVERHEAD, payload, size)
        _seal(span, p, BATCH_OVERHEAD + size)

    cdef int run_zstd(self, int64_t nb, int level, _Output output) except -1:
        """Every batch compressed by libzstd in C (_zstd_side) and assembled
        into ``output``: no GIL and no Python object per batch, so for large
        inputs a second thread takes batches from the back at the same time."""
        cdef zstd_job_t job
        cdef zstd_side_t front, back
        cdef int64_t k, total = 0
        cdef int64_t* out_at = <int64_t*>malloc((nb + 1) * sizeof(int64_t))
        cdef int64_t* sizes = <int64_t*>malloc(nb * sizeof(int64_t) + 1)
        cdef uint8_t* out
        cdef uint8_t* p
        cdef const uint8_t[::1] raw
        cdef uint8_t[::1] block
        cdef Helper worker = None
        cdef _Span span = _Span()
        try:
            if out_at == NULL or sizes == NULL:
                raise MemoryError()
            out_at[0] = 0
            for k in range(nb):
                out_at[k + 1] = out_at[k] + <int64_t>_zc.bound(<size_t>(self.plans[k].size - BATCH_OVERHEAD))
            block = _arena_block(out_at[nb] + 1)  # (pooled: its pages mapped already)
            out = &block[0]
            memset(&job, 0, sizeof(job))
            job.recs = self.inp.recs
            job.hdrs = self.inp.hdrs
            job.plans = self.plans
            if self.raw is not None:
                raw = self.raw
                job.raw = &raw[0]
                job.raw_at = &self.raw_at[0]
            job.out = out
            job.out_at = out_at
            job.sizes = sizes
            job.range = <uint64_t>nb << 32
            job.level = level
            memset(&front, 0, sizeof(front))
            memset(&back, 0, sizeof(back))
            front.job = back.job = &job
            back.from_back = True
            if _CPUS > 1 and nb > 1 and self.raw_bytes >= PARALLEL_COMPRESS_MIN_BYTES:
                worker = take_helper(True, False)
                worker.submit(_zstd_side, &back, False)
            try:
                _gil_may_go()
                with nogil:
                    _zstd_side(&front)
            finally:
                if worker is not None:
                    give_back(worker, False)
            if front.no_memory or back.no_memory:
                raise MemoryError()
            if front.error or back.error:
                raise ValueError("zstd compression failed: "
                                 + _zc.error_name(front.error or back.error).decode("ascii", "replace"))
            for k in range(nb):
                if BATCH_OVERHEAD + sizes[k] > MAX_BATCH_SIZE:
                    raise ValueError("batch is larger than a batch can hold (2 GiB)")
                total += BATCH_OVERHEAD + sizes[k]
            output.open(total)
            p = output.ptr
            if output.fresh:
                kb_populate(p, total)
            for k in range(nb):
                self.put_batch(p, k, out + out_at[k], sizes[k], span)
                p += BATCH_OVERHEAD + sizes[k]
            return 0
        finally:
            free(out_at)
            free(sizes)


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
                           _Output output, bint hold_gil=False):
    """Plan and write the gathered records as one or more batches, into
    ``output``; its result (the new bytes, or the size written).

    ``codec``: :func:`_codec`'s, for a compressed encode. ``hold_gil``: the
    rows point into objects nothing keeps alive but the caller's
    (unsnapshotted) sequences, and the caller has opened the window: write
    every record without releasing the GIL or running Python code
    (compressed: into one block first, then close the window and compress
    from there); :meth:`_Output.open` runs no Python code.
    """
    cdef int64_t nb, k, total = 0
    cdef plan_t* plans
    cdef _CompressJob job
    if inp.n == 0:
        output.open(0)
        return output.result()
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
            if (compression == ZSTD_CODEC and _zc.compress != NULL
                    and (level is None or (type(level) is int and -131072 <= level <= 22))):
                job.run_zstd(nb, 3 if level is None else level, output)  # (3: Kafka's default)
            else:
                job.assemble(job.run(nb), output)
        else:
            _write_uncompressed(inp, o, plans, nb, total, hold_gil, output)
        return output.result()
    finally:
        free(plans)


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


cdef object _finish_batch(object records, int compression, object level, int64_t base_offset,
                          batch_opts_t* o, int64_t count, int64_t base_ts, int64_t max_ts, int64_t seq_delta):
    """Header + (compressed) records + CRC: one finished batch as bytes."""
    cdef object payload = records
    cdef object out
    cdef uint8_t* p
    cdef int64_t size
    if compression:
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
    if not _zc_tried:
        _zc_load()
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
           int compression=0, object compression_level=None, bint control=False, object out=None):
    """Encode records as RecordBatch v2 bytes; see :func:`kbatch.encode` (``out``: :class:`_Output`)."""
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
    cdef _Output output
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
    # (exporting ``out`` may run Python code: before the window too. No keep_apart: the rows
    # point only into bytes, str and copies, never into a writable buffer.)
    output = _Output(out)
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
        return _encode_inputs(inp, &o, compression, compression_level, codec, output, strict)
    finally:
        _close_window()
        output.close()


def encode_arrays(object value_offsets, object value_data, object value_valid=None,
                  object key_offsets=None, object key_data=None, object key_valid=None,
                  object timestamps=None, *, object header_offsets=None, object hkey_offsets=None,
                  object hkey_data=None, object hval_offsets=None, object hval_data=None,
                  object hval_valid=None, int64_t base_offset=0, int64_t producer_id=-1,
                  int16_t producer_epoch=-1, int32_t base_sequence=-1, bint transactional=False,
                  int32_t partition_leader_epoch=-1, int timestamp_type=0, int64_t max_batch_records=0,
                  int64_t max_batch_bytes=0, int compression=0, object compression_level=None,
                  object out=None):
    """Encode records given as Arrow-style columns (no Python object per record).

    Binary columns are ``offsets`` (int32 or int64, n + 1 entries, into
    ``data``), ``data`` (any byte buffer) and an optional ``valid`` mask
    (uint8/bool, 0 = null); keys may be left out (all null). Headers:
    ``header_offsets`` (n + 1) ranges per record into the flat header columns
    ``hkey_*`` / ``hval_*``. ``timestamps``: int64 per record (None: now).
    Batch options are those of :func:`kbatch.encode`. ``out``: a writable
    buffer to write the batches into (see :class:`_Output`), the result then
    the number of bytes written.
    """
    cdef batch_opts_t o
    cdef gather_t g, second
    cdef _Output output = _Output(out)
    cdef object hoff, ts = None
    cdef int64_t n = len(value_offsets) - 1
    cdef _Inputs inp
    cdef Helper worker = None
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
        worker = take_helper(True, False)
        worker.submit(_gather_columns, &second, False)
    try:
        with nogil:
            _gather_columns(&g)
    finally:
        if worker is not None:
            give_back(worker, False)
    if g.bad == g.end and worker is not None:
        g = second
    if g.bad < g.end:
        raise ValueError(f"record {g.bad}: {_GATHER_FIELDS[g.bad_field]}")
    output.keep_apart(g.value.base, g.value.size, "value")
    output.keep_apart(g.key.base, g.key.size, "key")
    output.keep_apart(g.hkey.base, g.hkey.size, "header key")
    output.keep_apart(g.hval.base, g.hval.size, "header value")
    try:
        return _encode_inputs(inp, &o, compression, compression_level, _codec() if compression else None, output)
    finally:
        output.close()


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
        self.base_offset = base_offset
        self.compression = _codec_id(compression)
        self.level = compression_level
        _set_opts(&self.opts, base_offset, producer_id, producer_epoch, base_sequence, transactional,
                  partition_leader_epoch, _timestamp_type_id(timestamp_type),
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
