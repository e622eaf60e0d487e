# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""C loops behind :mod:`kbatch.arrow`.

:func:`spark_columns` builds every column of ``to_arrow`` from a RecordTable's rows in one
pass (two threads for large tables). :func:`gather`, :func:`views` and their two-column
forms build Arrow binary layouts from (start, length) columns given as strided views, so a
field of a structured ``records``/``headers`` array is read in place (no contiguous copy
first); lengths < 0 are nulls (empty slots; the validity bitmap is built by the caller).
:mod:`kbatch.arrow` falls back to NumPy when this module is not compiled.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from cpython.buffer cimport PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.string cimport memcpy, memset

from kbatch.codec._core cimport Helper, give_back, header_t, record_t, take_helper
from kbatch._threads cimport kb_or8, kb_take

cdef extern from *:
    void __builtin_prefetch(const void*) noexcept nogil


import numpy as np


_CHANGED = "the rows changed while they were read (another thread writing them?)"


cdef inline int64_t _check(const uint8_t[::1] data, const int64_t[:] starts, const int32_t[:] lengths,
                           Py_ssize_t n, bint large) except -1:
    cdef Py_ssize_t i
    cdef int64_t size = data.shape[0], total = 0, s, ln
    if lengths.shape[0] != n or starts.shape[0] != n:
        raise ValueError("starts and lengths differ in length")
    for i in range(n):
        ln = lengths[i]
        if ln > 0:
            s = starts[i]
            if s < 0 or s + ln > size:
                raise ValueError(f"slice {i} ({s}, {ln}) reaches outside the data ({size} bytes)")
            total += ln
    if not large and total > 2147483647:
        raise ValueError("values pass 2**31-1 bytes: use large_binary")
    return total


def gather(const uint8_t[::1] data, const int64_t[:] starts, const int32_t[:] lengths, bint large):
    """Copy the slices back to back: ``(offsets int32/int64 [n+1], values uint8)``.

    Raises ValueError when a slice reaches outside ``data`` or (``large`` False) when the
    values pass 2**31-1 bytes.
    """
    cdef Py_ssize_t n = starts.shape[0], i
    cdef int64_t total = _check(data, starts, lengths, n, large), size = data.shape[0], ln
    out = np.empty(total, dtype=np.uint8)
    offsets = np.empty(n + 1, dtype=np.int64 if large else np.int32)
    cdef uint8_t[::1] o = out
    cdef int64_t[::1] o64
    cdef int32_t[::1] o32
    cdef uint8_t* dst = &o[0] if total else NULL
    cdef const uint8_t* src = &data[0] if size else NULL
    cdef int64_t pos = 0, s
    # starts and lengths are read again here (once each, and checked again: another thread may
    # have rewritten them since _check; then an error, never a copy outside either buffer)
    i = n
    if large:
        o64 = offsets
        with nogil:
            o64[0] = 0
            for i in range(n):
                ln = lengths[i]
                if ln > 0:
                    s = starts[i]
                    if s < 0 or ln > size - s or ln > total - pos:
                        break
                    memcpy(dst + pos, src + s, <size_t>ln)
                    pos += ln
                o64[i + 1] = pos
            else:
                i = n
    else:
        o32 = offsets
        with nogil:
            o32[0] = 0
            for i in range(n):
                ln = lengths[i]
                if ln > 0:
                    s = starts[i]
                    if s < 0 or ln > size - s or ln > total - pos:
                        break
                    memcpy(dst + pos, src + s, <size_t>ln)
                    pos += ln
                o32[i + 1] = <int32_t>pos
            else:
                i = n
    if i < n or pos != total:
        raise ValueError(_CHANGED)
    return offsets, out


def views(const uint8_t[::1] data, const int64_t[:] starts, const int32_t[:] lengths,
          int64_t window_step, int64_t window_size):
    """Build Arrow ``binary_view`` structs (16 bytes per row) over ``data``.

    Values of up to 12 bytes are inlined (zero padded); longer ones get their 4-byte prefix,
    buffer index ``start // window_step`` and offset ``start % window_step`` (the caller
    passes buffers ``data[k * window_step : k * window_step + window_size]``).
    """
    cdef Py_ssize_t n = starts.shape[0], i
    cdef int64_t size = data.shape[0], s, ln, w
    if lengths.shape[0] != n:
        raise ValueError("starts and lengths differ in length")
    out = np.zeros((n, 4), dtype=np.int32)
    cdef int32_t[:, ::1] v = out
    cdef const uint8_t* src = &data[0] if size else NULL
    cdef bint bad = False
    cdef Py_ssize_t bad_i = 0
    with nogil:
        for i in range(n):
            ln = lengths[i]
            if ln <= 0:
                continue
            s = starts[i]
            if s < 0 or s + ln > size:
                bad = True
                bad_i = i
                break
            v[i, 0] = <int32_t>ln
            if ln <= 12:
                memcpy(<uint8_t*>&v[i, 1], src + s, <size_t>ln)
            else:
                memcpy(<uint8_t*>&v[i, 1], src + s, 4)
                w = s // window_step
                if s - w * window_step + ln > window_size:
                    bad = True
                    bad_i = i
                    break
                v[i, 2] = <int32_t>w
                v[i, 3] = <int32_t>(s - w * window_step)
    if bad:
        raise ValueError(f"slice {bad_i} ({starts[bad_i]}, {lengths[bad_i]}) reaches outside the data "
                         f"({size} bytes) or its 2 GiB view window")
    return out


cdef inline int _shift(int64_t window_step) except -1:
    cdef int k = 0
    while (<int64_t>1 << k) < window_step:
        k += 1
    if (<int64_t>1 << k) != window_step:
        raise ValueError("window_step must be a power of two")
    return k


cdef inline void _view(int32_t* v, const uint8_t* src, int64_t size, int64_t s, int64_t ln,
                       int shift) noexcept nogil:
    # All 16 bytes written (zeros for an empty value), as two little-endian halves. shift:
    # log2 of the window step (a division per value costs more than the rest).
    cdef uint64_t a = 0, lo, hi
    cdef uint32_t b = 0
    if ln > 12:
        memcpy(&b, src + s, 4)
        lo = <uint32_t>ln | (<uint64_t>b << 32)
        hi = <uint32_t>(s >> shift) | (<uint64_t>(s & ((<int64_t>1 << shift) - 1)) << 32)
        memcpy(v, &lo, 8)
        memcpy(v + 2, &hi, 8)
        return
    if ln > 0 and s + 12 <= size:
        memcpy(&a, src + s, 8)  # fixed-size copies: two loads, then mask the tail off
        memcpy(&b, src + s + 8, 4)
        if ln < 8:
            a &= (<uint64_t>1 << (8 * ln)) - 1
            b = 0
        elif ln < 12:
            b &= (<uint32_t>1 << (8 * (ln - 8))) - 1
    elif ln > 0:  # the last bytes of data: no 12-byte load
        memcpy(&a, src + s, <size_t>(ln if ln < 8 else 8))
        if ln > 8:
            memcpy(&b, src + s + 8, <size_t>(ln - 8))
    lo = <uint32_t>(ln if ln > 0 else 0) | (a << 32)
    hi = (a >> 32) | (<uint64_t>b << 32)
    memcpy(v, &lo, 8)
    memcpy(v + 2, &hi, 8)


def views2(const uint8_t[::1] data, const int64_t[:] s1, const int32_t[:] l1,
           const int64_t[:] s2, const int32_t[:] l2, int64_t window_step, int64_t window_size):
    """:func:`views` of two columns of the same rows in one pass (a record's key and value are
    neighbours in ``data``, so each cache line is read once)."""
    cdef Py_ssize_t n = s1.shape[0], i
    cdef int64_t size = data.shape[0], total
    _check(data, s1, l1, n, True)
    _check(data, s2, l2, n, True)
    if size > window_size:  # keep it simple: the one-column kernel checks the windows
        return views(data, s1, l1, window_step, window_size), views(data, s2, l2, window_step, window_size)
    out1 = np.zeros((n, 4), dtype=np.int32)
    out2 = np.zeros((n, 4), dtype=np.int32)
    cdef int32_t[:, ::1] v1 = out1
    cdef int32_t[:, ::1] v2 = out2
    cdef const uint8_t* src = &data[0] if size else NULL
    cdef int shift = _shift(window_step)
    cdef int64_t s, ln
    cdef bint changed = False
    with nogil:  # (each start and length read once, checked again: see gather)
        for i in range(n):
            ln = l1[i]
            if ln > 0:
                s = s1[i]
                if s < 0 or ln > size - s:
                    changed = True
                    break
                _view(&v1[i, 0], src, size, s, ln, shift)
            ln = l2[i]
            if ln > 0:
                s = s2[i]
                if s < 0 or ln > size - s:
                    changed = True
                    break
                _view(&v2[i, 0], src, size, s, ln, shift)
    if changed:
        raise ValueError(_CHANGED)
    return out1, out2


def gather2(const uint8_t[::1] data, const int64_t[:] s1, const int32_t[:] l1,
            const int64_t[:] s2, const int32_t[:] l2, bint large):
    """:func:`gather` of two columns of the same rows in one pass over ``data``."""
    cdef Py_ssize_t n = s1.shape[0], i
    cdef int64_t size = data.shape[0], t1, t2, p1 = 0, p2 = 0, ln
    t1 = _check(data, s1, l1, n, large)
    t2 = _check(data, s2, l2, n, large)
    out1 = np.empty(t1, dtype=np.uint8)
    out2 = np.empty(t2, dtype=np.uint8)
    off1 = np.empty(n + 1, dtype=np.int64)
    off2 = np.empty(n + 1, dtype=np.int64)
    cdef uint8_t[::1] o1 = out1
    cdef uint8_t[::1] o2 = out2
    cdef int64_t[::1] f1 = off1
    cdef int64_t[::1] f2 = off2
    cdef uint8_t* d1 = &o1[0] if t1 else NULL
    cdef uint8_t* d2 = &o2[0] if t2 else NULL
    cdef const uint8_t* src = &data[0] if size else NULL
    cdef int64_t s
    cdef bint changed = False
    with nogil:  # (each start and length read once, checked again: see gather)
        f1[0] = 0
        f2[0] = 0
        for i in range(n):
            ln = l1[i]
            if ln > 0:
                s = s1[i]
                if s < 0 or ln > size - s or ln > t1 - p1:
                    changed = True
                    break
                memcpy(d1 + p1, src + s, <size_t>ln)
                p1 += ln
            f1[i + 1] = p1
            ln = l2[i]
            if ln > 0:
                s = s2[i]
                if s < 0 or ln > size - s or ln > t2 - p2:
                    changed = True
                    break
                memcpy(d2 + p2, src + s, <size_t>ln)
                p2 += ln
            f2[i + 1] = p2
    if changed or p1 != t1 or p2 != t2:
        raise ValueError(_CHANGED)
    if not large:
        return off1.astype(np.int32), out1, off2.astype(np.int32), out2
    return off1, out1, off2, out2


# ---------------------------------------------------------------------------------------------
# Where kbatch.arrow.to_record_batches cuts a table


def chunk_ends(const uint8_t[::1] records, const uint8_t[::1] headers, bint with_headers,
               Py_ssize_t max_rows, int64_t max_bytes):
    """One past the last record of each chunk of ``to_record_batches``, in one pass over the rows.

    A record weighs 32 bytes plus its key and value bytes and, ``with_headers``, 16 plus the
    key and value bytes of each of its headers (a header range outside ``headers`` weighs
    nothing here: converting the chunk reports it). A chunk takes records while it has fewer
    than ``max_rows`` and stays within ``max_bytes``, and always at least one.

    Parameters
    ----------
    records, headers : uint8 arrays
        The bytes of C-contiguous ``RECORD_DTYPE`` / ``HEADER_DTYPE`` rows.
    with_headers : bool
    max_rows, max_bytes : int
        At least 1.

    Returns
    -------
    numpy.ndarray
        int64, one entry per chunk (none for no records).
    """
    cdef Py_ssize_t n = records.shape[0] // sizeof(record_t), nh = headers.shape[0] // sizeof(header_t)
    cdef Py_ssize_t i, k = 0, first = 0
    cdef int64_t r, hs, hc, size, total = 0
    cdef const record_t* rec = <const record_t*>&records[0] if n else NULL
    cdef const header_t* hdr = <const header_t*>&headers[0] if nh else NULL
    if records.shape[0] % sizeof(record_t) or headers.shape[0] % sizeof(header_t):
        raise ValueError("records/headers are not whole RECORD_DTYPE/HEADER_DTYPE rows")
    if max_rows < 1 or max_bytes < 1:
        raise ValueError("max_rows and max_bytes must be >= 1")
    ends = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] out = ends
    with nogil:
        for i in range(n):
            size = 32 + _positive(rec[i].key_length) + _positive(rec[i].value_length)
            hs = rec[i].headers_start
            hc = rec[i].headers_count
            if with_headers and hc > 0 and 0 <= hs <= nh - hc:
                for r in range(hs, hs + hc):
                    size += 16 + _positive(hdr[r].key_length) + _positive(hdr[r].value_length)
            if i > first and (i - first >= max_rows or total + size > max_bytes):
                out[k] = i
                k += 1
                first = i
                total = 0
            total += size
        if n:
            out[k] = n
            k += 1
    return ends[:k]


cdef inline int64_t _positive(int32_t length) noexcept nogil:
    return length if length > 0 else 0


# ---------------------------------------------------------------------------------------------
# Every column of kbatch.arrow.to_arrow from a RecordTable's rows
#
# The records are converted in chunks. With a helper thread, both threads take the next chunk
# until none is left. Where a chunk's header rows start is known without a pass over the
# records before it only in decode's own layout (a record's headers_start is the running
# header count); a chunked run checks that on every record, and the caller runs again as one
# chunk when it does not hold (a filtered or reordered table) or when anything is wrong.

cdef enum:
    C_KEY = 0      # the binary columns: index into the per-column arrays below
    C_VALUE = 1
    C_HKEY = 2
    C_HVALUE = 3
    C_LIST = 4     # the headers list column (null bits only)
    PREFETCH = 16  # records ahead: each spans about 3 cache lines of data

cdef enum:
    E_CAPACITY = 1  # more header rows than the header outputs hold
    E_LAYOUT = 2    # chunked run: a record's headers_start is not the running header count
    E_SLICE = 3     # a key or value reaches outside data
    E_HEADERS = 4   # a record's headers_start/headers_count reach outside the header rows
    E_BATCH = 5     # a record's batch index is outside the batches
    E_TOO_MANY = 6  # more than 2**31-1 header rows (list offsets are int32)
    E_CHANGED = 7   # gather pass: a row no longer says what the fill pass found


cdef struct part_t:
    # what one chunk found
    int err
    Py_ssize_t bad           # the record err is about
    Py_ssize_t first_row     # the chunk's header rows: first_row .. end_row
    Py_ssize_t end_row
    int64_t nulls[5]
    int64_t total[4]         # bytes per binary column
    int64_t pos[4]           # gather pass: where the chunk's bytes start
    bint non_ascii           # a header key has a byte >= 0x80 (to be checked as UTF-8)


cdef struct job_t:
    # inputs
    const uint8_t* src
    int64_t size
    const record_t* rec
    Py_ssize_t n
    const header_t* hdr
    Py_ssize_t nh
    bint by_batch            # build timestampType from ts_types (else the caller's constant)
    const int32_t* ts_types  # timestamp type per batch
    Py_ssize_t nb
    bint with_headers        # False: every record taken as headerless
    int shift                # log2 of the view window; -1: no views (the bytes are gathered)
    bint large               # gathered offsets are int64
    Py_ssize_t cap           # header rows the header outputs hold
    Py_ssize_t chunk         # records per chunk (a multiple of 8); the last one takes the rest
    Py_ssize_t nchunks
    bint chunked             # nchunks > 1: chunks start at decode's layout positions
    part_t* parts
    # outputs
    int64_t* offset
    int64_t* ts_us
    int32_t* ts_type
    int32_t* list_off
    uint8_t* null_bits[5]    # a set bit per null row (zeroed by the caller)
    int32_t* views[4]        # binary_view structs, 4 int32 per row (views mode)
    uint8_t* dst[4]          # gather pass: bytes
    void* offsets[4]         # gather pass: offsets, int32 or int64


cdef inline bint _outside(int64_t size, int64_t s, int64_t ln) noexcept nogil:
    return ln > 0 and (s < 0 or s > size - ln)


cdef inline bint _ascii(const uint8_t* p, int64_t ln) noexcept nogil:
    cdef uint64_t acc = 0, w
    cdef int64_t k = 0
    while k + 8 <= ln:
        memcpy(&w, p + k, 8)
        acc |= w
        k += 8
    while k < ln:
        acc |= p[k]
        k += 1
    return (acc & 0x8080808080808080ULL) == 0


cdef inline void _slot(const job_t* job, part_t* p, int col, Py_ssize_t row, int64_t s, int64_t ln) noexcept nogil:
    # One value of a binary column: null bit, byte total, view.
    cdef uint8_t bit = <uint8_t>(1 << (row & 7))
    if ln < 0:
        p.nulls[col] += 1
        if col >= C_HKEY and job.chunked:  # two chunks can share a header rows' bitmap byte
            kb_or8(&job.null_bits[col][row >> 3], bit)
        else:
            job.null_bits[col][row >> 3] |= bit
    else:
        p.total[col] += ln
    if job.shift >= 0:
        _view(job.views[col] + 4 * row, job.src, job.size, s, ln, job.shift)


cdef int _fill(const job_t* job, part_t* p, Py_ssize_t first, Py_ssize_t end) noexcept nogil:
    """Fixed-width columns, null bits and (views mode) views of records first .. end."""
    cdef const uint8_t* src = job.src
    cdef int64_t size = job.size, hs, hc, ks, vs
    cdef int32_t kl, vl
    cdef int64_t hbase = job.rec[0].headers_start if job.with_headers else 0
    cdef Py_ssize_t i, r, j = p.first_row
    cdef const record_t* rec
    cdef const header_t* h
    for i in range(first, end):
        rec = &job.rec[i]
        if i + 2 * PREFETCH < job.n:  # the row itself, then the lines of its key and first header
            __builtin_prefetch(&rec[2 * PREFETCH])
            __builtin_prefetch(src + rec[PREFETCH].key_start)
            __builtin_prefetch(src + rec[PREFETCH].value_start + rec[PREFETCH].value_length)
        p.bad = i
        hs = rec.headers_start if job.with_headers else 0
        hc = rec.headers_count if job.with_headers else 0
        # Each field read once: the rows may be another thread's, rewritten meanwhile.
        ks = rec.key_start
        kl = rec.key_length
        vs = rec.value_start
        vl = rec.value_length
        if _outside(size, ks, kl) or _outside(size, vs, vl):
            return E_SLICE
        if hc < 0 or hs < 0 or hs > job.nh - hc:
            return E_HEADERS
        if job.chunked and hs != hbase + j:
            return E_LAYOUT
        if j + hc > job.cap:
            return E_CAPACITY
        if job.by_batch:
            if rec.batch < 0 or rec.batch >= job.nb:
                return E_BATCH
            job.ts_type[i] = job.ts_types[rec.batch]
        job.offset[i] = rec.offset
        job.ts_us[i] = rec.timestamp * 1000
        _slot(job, p, C_KEY, i, ks, kl)
        _slot(job, p, C_VALUE, i, vs, vl)
        if hc == 0:  # Spark's source: null, not an empty list, for a record without headers
            p.nulls[C_LIST] += 1
            job.null_bits[C_LIST][i >> 3] |= <uint8_t>(1 << (i & 7))
        for r in range(hs, hs + hc):
            h = &job.hdr[r]
            ks = h.key_start
            kl = h.key_length
            vs = h.value_start
            vl = h.value_length
            if _outside(size, ks, kl) or _outside(size, vs, vl):
                return E_SLICE
            if kl > 0 and not _ascii(src + ks, kl):
                p.non_ascii = True
            _slot(job, p, C_HKEY, j, ks, kl)
            _slot(job, p, C_HVALUE, j, vs, vl)
            j += 1
        if j > 2147483647:
            return E_TOO_MANY
        job.list_off[i + 1] = <int32_t>j
        p.end_row = j
    return 0


ctypedef fused offset_t:
    int32_t
    int64_t


cdef inline int64_t _copy(uint8_t* dst, int64_t pos, int64_t end, const uint8_t* src, int64_t size,
                          int64_t s, int64_t ln) noexcept nogil:
    # Copy a value to dst[pos:], in 16-byte steps while neither its source nor its destination
    # (the chunk's bytes end at dst[end]) is passed: what a value writes past its end, the next
    # one overwrites.
    cdef int64_t k = 0
    if ln <= 0:
        return pos
    if s < 0 or ln > size - s or ln > end - pos:  # (rewritten since _fill checked it)
        return -1
    if s + ln + 16 <= size and pos + ln + 16 <= end:
        while k < ln:
            memcpy(dst + pos + k, src + s + k, 16)
            k += 16
    else:
        memcpy(dst + pos, src + s, <size_t>ln)
    return pos + ln


cdef int _gather(const job_t* job, const part_t* p, Py_ssize_t first, Py_ssize_t end,
                 offset_t* ko, offset_t* vo, offset_t* hko, offset_t* hvo) noexcept nogil:
    """Binary layout: the bytes of records first .. end (after their _fill); E_CHANGED if a
    row no longer says what _fill found (every range is checked again as it is read)."""
    cdef const uint8_t* src = job.src
    cdef int64_t size = job.size
    cdef int64_t pk = p.pos[0], pv = p.pos[1], phk = p.pos[2], phv = p.pos[3]
    cdef int64_t ek = pk + p.total[0], ev = pv + p.total[1], ehk = phk + p.total[2], ehv = phv + p.total[3]
    cdef Py_ssize_t i, r, j = p.first_row, hs, hc
    cdef const record_t* rec
    cdef const header_t* h
    for i in range(first, end):
        rec = &job.rec[i]
        if i + PREFETCH < job.n:
            __builtin_prefetch(src + rec[PREFETCH].value_start)
        pk = _copy(job.dst[C_KEY], pk, ek, src, size, rec.key_start, rec.key_length)
        pv = _copy(job.dst[C_VALUE], pv, ev, src, size, rec.value_start, rec.value_length)
        if pk < 0 or pv < 0:
            return E_CHANGED
        ko[i + 1] = <offset_t>pk
        vo[i + 1] = <offset_t>pv
        hs = rec.headers_start
        hc = job.list_off[i + 1] - job.list_off[i]
        if hc and (hs < 0 or hs > job.nh - hc):
            return E_CHANGED
        for r in range(hs, hs + hc):
            h = &job.hdr[r]
            phk = _copy(job.dst[C_HKEY], phk, ehk, src, size, h.key_start, h.key_length)
            phv = _copy(job.dst[C_HVALUE], phv, ehv, src, size, h.value_start, h.value_length)
            if phk < 0 or phv < 0:
                return E_CHANGED
            j += 1
            hko[j] = <offset_t>phk
            hvo[j] = <offset_t>phv
    if pk != ek or pv != ev or phk != ehk or phv != ehv:
        return E_CHANGED
    return 0


cdef struct pass_t:
    # one pass over a job's chunks, shared by the caller's thread and a helper thread
    job_t job
    bint gather
    uint64_t range  # the chunks not yet taken (kb_take)


cdef void _work(void* arg) noexcept nogil:
    """Take chunks until none is left."""
    cdef pass_t* ps = <pass_t*>arg
    cdef const job_t* job = &ps.job
    cdef Py_ssize_t first, end
    cdef int64_t k
    cdef part_t* p
    while True:
        k = kb_take(&ps.range, False)
        if k < 0:
            return
        first = k * job.chunk
        end = job.n if k == job.nchunks - 1 else first + job.chunk
        p = &job.parts[k]
        if not ps.gather:
            memset(p, 0, sizeof(part_t))
            if job.chunked and job.with_headers:
                p.first_row = p.end_row = job.rec[first].headers_start - job.rec[0].headers_start
            if 0 <= p.first_row <= job.cap:
                p.err = _fill(job, p, first, end)
            else:
                p.err = E_LAYOUT
        elif job.large:
            p.err = _gather(job, p, first, end, <int64_t*>job.offsets[0], <int64_t*>job.offsets[1],
                            <int64_t*>job.offsets[2], <int64_t*>job.offsets[3])
        else:
            p.err = _gather(job, p, first, end, <int32_t*>job.offsets[0], <int32_t*>job.offsets[1],
                            <int32_t*>job.offsets[2], <int32_t*>job.offsets[3])


cdef int _run(const job_t* job, bint gather) except -1:
    """One pass over every chunk: in this thread and, for several chunks, kbatch's helper
    thread (kbatch/codec/_core_threads.pxi).

    The helper is not waited for to start: on a busy machine this thread just does every
    chunk and takes the helper's job back; once started, it is waited for (sleeping, not
    spinning) to finish the chunk it took.
    """
    cdef pass_t ps
    cdef Helper helper = None
    ps.job = job[0]
    ps.gather = gather
    ps.range = <uint64_t>job.nchunks << 32
    if job.nchunks > 1:
        helper = take_helper(True)
        helper.submit(_work, &ps, False)  # (no thread to be had: every chunk, inline)
    try:
        with nogil:
            _work(&ps)
    finally:
        if helper is not None:
            give_back(helper, False, True)
    return 0


cdef void* _addr(object array) except? NULL:
    # Where a new (writable, C-contiguous) NumPy array's bytes start; NULL when empty.
    cdef Py_buffer view
    PyObject_GetBuffer(array, &view, PyBUF_WRITABLE)
    cdef void* p = view.buf if view.len else NULL
    PyBuffer_Release(&view)
    return p


cdef object _bits(Py_ssize_t rows):
    return np.zeros((rows + 7) // 8, dtype=np.uint8)


cdef Py_ssize_t _header_rows(const job_t* job) noexcept nogil:
    cdef Py_ssize_t i, total = 0
    for i in range(job.n):
        if job.with_headers and job.rec[i].headers_count > 0:
            total += job.rec[i].headers_count
    return total


def spark_columns(const uint8_t[::1] data, const uint8_t[::1] records, const uint8_t[::1] headers,
                  const int32_t[::1] ts_types, bint with_headers, bint views, bint large,
                  Py_ssize_t chunk=0):
    """Every column of ``kbatch.arrow.to_arrow`` but topic and partition, as Arrow buffers.

    Parameters
    ----------
    data : uint8 array
        ``RecordTable.data``.
    records, headers : uint8 arrays
        The bytes of C-contiguous ``RECORD_DTYPE`` / ``HEADER_DTYPE`` rows.
    ts_types : int32 array or None
        Timestamp type of each batch; None skips the ``timestampType`` column (the caller
        builds a constant one).
    with_headers : bool
        False: build the headers columns as if no record had headers.
    views : bool
        Build ``binary_view`` structs into ``data`` (at most 2**31-1 bytes: the one data
        buffer of every view) instead of gathering the bytes.
    large : bool
        Gathered offsets are int64 (``large_binary``) rather than int32.
    chunk : int
        Records per chunk, shared with a helper thread; 0 (or at least the number of
        records): one chunk, this thread only.

    Returns
    -------
    dict
        ``offset`` (int64), ``timestamp`` (int64, microseconds), ``timestampType`` (int32 or
        None), ``headers`` (``(validity, nulls, list offsets int32)``), ``non_ascii`` (a
        header key is not ASCII) and ``key``, ``value``, ``hkey``, ``hvalue``: ``(validity,
        nulls, buffers)`` with buffers ``[views]`` or ``[offsets, bytes]``. A validity
        bitmap is None when nothing is null.
    """
    cdef job_t job
    cdef part_t* p
    cdef Py_ssize_t k, c, rows = 0
    cdef int64_t nulls[5]
    cdef int64_t total[4]
    cdef bint non_ascii = False
    if records.shape[0] % sizeof(record_t) or headers.shape[0] % sizeof(header_t):
        raise ValueError("records/headers are not whole RECORD_DTYPE/HEADER_DTYPE rows")
    if views and data.shape[0] > 2147483647:
        raise ValueError("data is larger than one view window (2**31-1 bytes)")
    memset(&job, 0, sizeof(job))
    job.src = &data[0] if data.shape[0] else NULL
    job.size = data.shape[0]
    job.n = records.shape[0] // sizeof(record_t)
    job.rec = <const record_t*>&records[0] if job.n else NULL
    job.nh = headers.shape[0] // sizeof(header_t)
    job.hdr = <const header_t*>&headers[0] if job.nh else NULL
    if ts_types is not None:
        job.by_batch = True
        job.ts_types = &ts_types[0] if ts_types.shape[0] else NULL
        job.nb = ts_types.shape[0]
    job.with_headers = with_headers
    job.shift = 31 if views else -1  # views: buffer index 0, offset = start
    job.large = large
    job.chunk = (chunk + 7) // 8 * 8 if 0 < chunk < job.n else max(job.n, 1)
    job.nchunks = (job.n + job.chunk - 1) // job.chunk
    job.chunked = job.nchunks > 1
    job.cap = job.nh
    parts = np.zeros(max(job.nchunks, 1) * sizeof(part_t), dtype=np.uint8)
    job.parts = <part_t*>_addr(parts)
    offset = np.empty(job.n, dtype=np.int64)
    ts_us = np.empty(job.n, dtype=np.int64)
    ts_type = np.empty(job.n, dtype=np.int32) if ts_types is not None else None
    list_off = np.empty(job.n + 1, dtype=np.int32)
    list_off[0] = 0
    job.offset = <int64_t*>_addr(offset)
    job.ts_us = <int64_t*>_addr(ts_us)
    job.ts_type = <int32_t*>_addr(ts_type) if ts_type is not None else NULL
    job.list_off = <int32_t*>_addr(list_off)
    record_views = [np.empty((job.n, 4), dtype=np.int32) if views else None for k in range(2)]
    while True:
        bits = [_bits(job.n), _bits(job.n), _bits(job.cap), _bits(job.cap), _bits(job.n)]
        out_views = record_views + [np.empty((job.cap, 4), dtype=np.int32) if views else None for k in range(2)]
        for k in range(5):
            job.null_bits[k] = <uint8_t*>_addr(bits[k])
        for k in range(4):
            job.views[k] = <int32_t*>_addr(out_views[k]) if views else NULL
        _run(&job, False)
        p = NULL
        for k in range(job.nchunks):  # an error, or chunks whose header rows do not follow on
            if job.parts[k].err or (k and job.parts[k].first_row != job.parts[k - 1].end_row):
                p = &job.parts[k]
                break
        if p == NULL:
            break
        if job.chunked:  # not decode's layout, or an error: one chunk finds out which
            job.chunk = job.n
            job.nchunks = 1
            job.chunked = False
        elif p.err == E_CAPACITY:  # the same header rows more than once: count them
            job.cap = _header_rows(&job)
        else:
            _raise(&job, p)
    memset(nulls, 0, sizeof(nulls))
    memset(total, 0, sizeof(total))
    for k in range(job.nchunks):
        p = &job.parts[k]
        for c in range(5):
            nulls[c] += p.nulls[c]
        for c in range(4):
            p.pos[c] = total[c]
            total[c] += p.total[c]
        non_ascii |= p.non_ascii
        rows = p.end_row
    if views:
        buffers = [[out_views[0]], [out_views[1]], [out_views[2][:rows]], [out_views[3][:rows]]]
    else:
        buffers = _gathered(&job, total, rows)
    validity = [np.bitwise_not(bits[c], out=bits[c]) if nulls[c] else None for c in range(5)]
    out = {
        "offset": offset,
        "timestamp": ts_us,
        "timestampType": ts_type,
        "headers": (validity[C_LIST], nulls[C_LIST], list_off),
        "non_ascii": bool(non_ascii),
    }
    for c, name in enumerate(("key", "value", "hkey", "hvalue")):
        out[name] = (validity[c], nulls[c], buffers[c])
    return out


cdef _raise(const job_t* job, const part_t* p):
    cdef const record_t* rec = &job.rec[p.bad]
    where = f"record {p.bad}"
    if p.err == E_SLICE:
        raise ValueError(f"{where}: a key, value or header reaches outside the data ({job.size} bytes)")
    if p.err == E_HEADERS:
        raise ValueError(f"{where}'s headers ({rec.headers_start}, {rec.headers_count}) are outside "
                         f"the {job.nh} header rows")
    if p.err == E_BATCH:
        raise ValueError(f"{where}: batch {rec.batch} is outside the {job.nb} batches")
    raise ValueError("more than 2**31-1 headers in one table: convert it in chunks")


cdef list _gathered(job_t* job, const int64_t* total, Py_ssize_t rows):
    """The gather pass: ``[offsets, bytes]`` of each binary column."""
    cdef Py_ssize_t k
    if not job.large and max(total[0], total[1], total[2], total[3]) > 2147483647:
        raise ValueError("values pass 2**31-1 bytes: use large_binary")
    raw = [np.empty(total[k], dtype=np.uint8) for k in range(4)]
    offsets = [np.empty((job.n if k < 2 else rows) + 1, dtype=np.int64 if job.large else np.int32)
               for k in range(4)]
    for k in range(4):
        offsets[k][0] = 0
        job.dst[k] = <uint8_t*>_addr(raw[k])
        job.offsets[k] = _addr(offsets[k])
    _run(job, True)
    for k in range(job.nchunks):
        if job.parts[k].err:
            raise ValueError(_CHANGED)
    return [[offsets[k], raw[k]] for k in range(4)]
