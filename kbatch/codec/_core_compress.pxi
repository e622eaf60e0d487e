# _core_compress.pxi: an encode's batches compressed, part of kbatch/codec/_core.pyx.
#
# provides: zstd in C (zstd_api_t, _zc_load, _zc, _zc_off: libzstd's compressor; _zstd_side, a
#           thread's share of the batches), _CompressJob (the planned batches' records
#           compressed on one or two threads, through libzstd in C or kbatch.codec._compression,
#           and assembled with their headers and CRCs), _codec
# uses:     _core_write (the writers, _seal, batch_opts_t, write_job_t, _write_raw, _halve,
#           _max_timestamp), _core_gather (C rows, plan_t), _core_frame (_Span), _core_parse
#           (_sequence_at), _core_inflate (the decoder's zstd function types), _core_memory
#           (_arena_block), _core_threads (Helper, the GIL window), _core_output (_Output,
#           kb_populate), kbatch/_threads.pxd (kb_take, kb_load, kb_store),
#           kbatch.codec._compression (compress, zstd_library)

cdef enum:
    ZSTD_CODEC = 4
    # Below this a second compressing thread costs more than it saves.
    PARALLEL_COMPRESS_MIN_BYTES = 1 << 20


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


cdef object _codec():
    if not _zc_tried:
        _zc_load()
    return _compression.compress
