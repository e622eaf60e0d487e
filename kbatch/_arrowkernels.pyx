# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""C loops behind :mod:`kbatch.arrow`: Arrow binary layouts from (start, length) columns.

Both take the start/length columns as strided views, so a field of a RecordTable's
structured ``records``/``headers`` array is read in place (no contiguous copy first).
Lengths < 0 are nulls (empty slots; the validity bitmap is built by the caller).
:mod:`kbatch.arrow` falls back to NumPy when this module is not compiled.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcpy, memset

cdef extern from *:
    void __builtin_prefetch(const void*) noexcept nogil


import numpy as np


def gather(const uint8_t[::1] data, const int64_t[:] starts, const int32_t[:] lengths, bint large):
    """Copy the slices back to back: ``(offsets int32/int64 [n+1], values uint8)``.

    Raises ValueError when a slice reaches outside ``data`` or (``large`` False) when the
    values pass 2**31-1 bytes.
    """
    cdef Py_ssize_t n = starts.shape[0], i
    cdef int64_t size = data.shape[0], total = 0, s, ln
    if lengths.shape[0] != n:
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
    out = np.empty(total, dtype=np.uint8)
    offsets = np.empty(n + 1, dtype=np.int64 if large else np.int32)
    cdef uint8_t[::1] o = out
    cdef int64_t[::1] o64
    cdef int32_t[::1] o32
    cdef uint8_t* dst = &o[0] if total else NULL
    cdef const uint8_t* src = &data[0] if size else NULL
    cdef int64_t pos = 0
    if large:
        o64 = offsets
        with nogil:
            o64[0] = 0
            for i in range(n):
                ln = lengths[i]
                if ln > 0:
                    memcpy(dst + pos, src + starts[i], <size_t>ln)
                    pos += ln
                o64[i + 1] = pos
    else:
        o32 = offsets
        with nogil:
            o32[0] = 0
            for i in range(n):
                ln = lengths[i]
                if ln > 0:
                    memcpy(dst + pos, src + starts[i], <size_t>ln)
                    pos += ln
                o32[i + 1] = <int32_t>pos
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


cdef inline int _shift(int64_t window_step) except -1:
    cdef int k = 0
    while (<int64_t>1 << k) < window_step:
        k += 1
    if (<int64_t>1 << k) != window_step:
        raise ValueError("window_step must be a power of two")
    return k


cdef inline void _view(int32_t* v, const uint8_t* src, int64_t size, int64_t s, int64_t ln,
                       int shift) noexcept nogil:
    # shift: log2 of the window step (a division per value costs more than the rest)
    cdef uint64_t a
    cdef uint32_t b
    v[0] = <int32_t>ln
    if ln > 12:
        memcpy(&v[1], src + s, 4)
        v[2] = <int32_t>(s >> shift)
        v[3] = <int32_t>(s & ((<int64_t>1 << shift) - 1))
    elif s + 12 <= size:
        memcpy(&a, src + s, 8)  # fixed-size copies: two loads, then mask the tail off
        memcpy(&b, src + s + 8, 4)
        if ln < 8:
            a &= (<uint64_t>1 << (8 * ln)) - 1
            b = 0
        elif ln < 12:
            b &= (<uint32_t>1 << (8 * (ln - 8))) - 1
        memcpy(&v[1], &a, 8)
        memcpy(&v[3], &b, 4)
    else:
        memcpy(&v[1], src + s, <size_t>ln)


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
    with nogil:
        for i in range(n):
            if l1[i] > 0:
                _view(&v1[i, 0], src, size, s1[i], l1[i], shift)
            if l2[i] > 0:
                _view(&v2[i, 0], src, size, s2[i], l2[i], shift)
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
    with nogil:
        f1[0] = 0
        f2[0] = 0
        for i in range(n):
            ln = l1[i]
            if ln > 0:
                memcpy(d1 + p1, src + s1[i], <size_t>ln)
                p1 += ln
            f1[i + 1] = p1
            ln = l2[i]
            if ln > 0:
                memcpy(d2 + p2, src + s2[i], <size_t>ln)
                p2 += ln
            f2[i + 1] = p2
    if not large:
        return off1.astype(np.int32), out1, off2.astype(np.int32), out2
    return off1, out1, off2, out2


def record_views(const uint8_t[::1] data, const int64_t[:] ks, const int32_t[:] kl,
                 const int64_t[:] vs, const int32_t[:] vl,
                 const int64_t[:] hks, const int32_t[:] hkl, const int64_t[:] hvs, const int32_t[:] hvl,
                 const int64_t[:] hstart, const int32_t[:] hcount, int64_t window_step, int64_t window_size):
    """Key, value, header-key and header-value views of every record in one pass over ``data``.

    Header rows come out in record order (record ``i``'s rows ``hstart[i] ..
    hstart[i] + hcount[i]``), so filtered or reordered tables work too. ``data`` must be
    smaller than ``window_size`` (the caller falls back otherwise).
    """
    cdef Py_ssize_t n = ks.shape[0], nh_rows = hks.shape[0], i, j, r
    cdef int64_t size = data.shape[0], total = 0, first
    if size > window_size:
        raise ValueError("data too large for one view window")
    _check(data, ks, kl, n, True)
    _check(data, vs, vl, n, True)
    _check(data, hks, hkl, nh_rows, True)
    _check(data, hvs, hvl, nh_rows, True)
    if hstart.shape[0] != n or hcount.shape[0] != n:
        raise ValueError("hstart and hcount need one entry per record")
    for i in range(n):
        if hcount[i] < 0 or hstart[i] < 0 or hstart[i] + hcount[i] > nh_rows:
            raise ValueError(f"record {i}'s headers ({hstart[i]}, {hcount[i]}) are outside the header rows")
        total += hcount[i]
    kout = np.zeros((n, 4), dtype=np.int32)
    vout = np.zeros((n, 4), dtype=np.int32)
    hkout = np.zeros((total, 4), dtype=np.int32)
    hvout = np.zeros((total, 4), dtype=np.int32)
    cdef int32_t[:, ::1] kv = kout
    cdef int32_t[:, ::1] vv = vout
    cdef int32_t[:, ::1] hkv = hkout
    cdef int32_t[:, ::1] hvv = hvout
    cdef const uint8_t* src = &data[0] if size else NULL
    cdef int shift = _shift(window_step)
    j = 0
    with nogil:
        for i in range(n):
            if i + 8 < n and vl[i + 8] > 0:
                __builtin_prefetch(src + vs[i + 8])
            if kl[i] > 0:
                _view(&kv[i, 0], src, size, ks[i], kl[i], shift)
            if vl[i] > 0:
                _view(&vv[i, 0], src, size, vs[i], vl[i], shift)
            first = hstart[i]
            for r in range(first, first + hcount[i]):
                if hkl[r] > 0:
                    _view(&hkv[j, 0], src, size, hks[r], hkl[r], shift)
                if hvl[r] > 0:
                    _view(&hvv[j, 0], src, size, hvs[r], hvl[r], shift)
                j += 1
    return kout, vout, hkout, hvout


cdef inline int64_t _copy(uint8_t* dst, int64_t pos, const uint8_t* src, int64_t s, int64_t ln) noexcept nogil:
    if ln > 0:
        memcpy(dst + pos, src + s, <size_t>ln)
        return pos + ln
    return pos


def record_gather(const uint8_t[::1] data, const int64_t[:] ks, const int32_t[:] kl,
                  const int64_t[:] vs, const int32_t[:] vl,
                  const int64_t[:] hks, const int32_t[:] hkl, const int64_t[:] hvs, const int32_t[:] hvl,
                  const int64_t[:] hstart, const int32_t[:] hcount):
    """Key, value, header-key and header-value bytes gathered in one pass: four ``(offsets int64,
    bytes)`` pairs, header rows in record order (see :func:`record_views`)."""
    cdef Py_ssize_t n = ks.shape[0], nh_rows = hks.shape[0], i, j, r
    cdef int64_t tk, tv, thk, thv, total = 0, pk = 0, pv = 0, phk = 0, phv = 0
    tk = _check(data, ks, kl, n, True)
    tv = _check(data, vs, vl, n, True)
    if hstart.shape[0] != n or hcount.shape[0] != n:
        raise ValueError("hstart and hcount need one entry per record")
    _check(data, hks, hkl, nh_rows, True)
    _check(data, hvs, hvl, nh_rows, True)
    thk = thv = 0
    for i in range(n):
        if hcount[i] < 0 or hstart[i] < 0 or hstart[i] + hcount[i] > nh_rows:
            raise ValueError(f"record {i}'s headers ({hstart[i]}, {hcount[i]}) are outside the header rows")
        total += hcount[i]
        for r in range(hstart[i], hstart[i] + hcount[i]):
            thk += hkl[r] if hkl[r] > 0 else 0
            thv += hvl[r] if hvl[r] > 0 else 0
    kb = np.empty(tk, dtype=np.uint8)
    vb = np.empty(tv, dtype=np.uint8)
    hkb = np.empty(thk, dtype=np.uint8)
    hvb = np.empty(thv, dtype=np.uint8)
    ko = np.empty(n + 1, dtype=np.int64)
    vo = np.empty(n + 1, dtype=np.int64)
    hko = np.empty(total + 1, dtype=np.int64)
    hvo = np.empty(total + 1, dtype=np.int64)
    cdef uint8_t[::1] kbv = kb
    cdef uint8_t[::1] vbv = vb
    cdef uint8_t[::1] hkbv = hkb
    cdef uint8_t[::1] hvbv = hvb
    cdef int64_t[::1] kov = ko
    cdef int64_t[::1] vov = vo
    cdef int64_t[::1] hkov = hko
    cdef int64_t[::1] hvov = hvo
    cdef uint8_t* dk = &kbv[0] if tk else NULL
    cdef uint8_t* dv = &vbv[0] if tv else NULL
    cdef uint8_t* dhk = &hkbv[0] if thk else NULL
    cdef uint8_t* dhv = &hvbv[0] if thv else NULL
    cdef const uint8_t* src = &data[0] if data.shape[0] else NULL
    j = 0
    with nogil:
        kov[0] = vov[0] = hkov[0] = hvov[0] = 0
        for i in range(n):
            if i + 8 < n and vl[i + 8] > 0:
                __builtin_prefetch(src + vs[i + 8])
            pk = _copy(dk, pk, src, ks[i], kl[i])
            kov[i + 1] = pk
            pv = _copy(dv, pv, src, vs[i], vl[i])
            vov[i + 1] = pv
            for r in range(hstart[i], hstart[i] + hcount[i]):
                phk = _copy(dhk, phk, src, hks[r], hkl[r])
                phv = _copy(dhv, phv, src, hvs[r], hvl[r])
                j += 1
                hkov[j] = phk
                hvov[j] = phv
    return (ko, kb), (vo, vb), (hko, hkb), (hvo, hvb)
