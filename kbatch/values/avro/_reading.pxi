# Included by ``_avrokernel.pyx`` (where its section "reading" stood): the interpreter's readers,
# each checking what it reads against the bytes left: zigzag varints (int, long), decimals
# (big-endian two's complement -> little-endian 128 bits, and their precision), uuid strings,
# durations (-> month_day_nano_interval), a length against the bytes left, and an array's or
# map's block count (against the bytes left or ``max_items``; a negative count's byte size).
# The kernel defines the ``Err`` codes, the ``Frame`` and ``Machine`` structs and cimports the
# ``libc`` integer types, their limits and ``memcpy``/``memset`` before the include.

cdef inline int _varint(const uint8_t** pp, const uint8_t* end, int64_t* out) noexcept nogil:
    """A zigzag varint (int or long)."""
    cdef const uint8_t* p = pp[0]
    cdef uint64_t v, b
    cdef int shift
    if p < end and p[0] < 0x80:
        v = p[0]
        out[0] = <int64_t>(v >> 1) ^ -<int64_t>(v & 1)
        pp[0] = p + 1
        return E_OK
    v = 0
    shift = 0
    while True:
        if p >= end:
            return E_EOF
        b = p[0]
        p += 1
        if shift == 63 and b > 1:
            return E_VARINT
        v |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            return E_VARINT
    out[0] = <int64_t>(v >> 1) ^ -<int64_t>(v & 1)
    pp[0] = p
    return E_OK


cdef inline void _decimal(uint8_t* out, const uint8_t* src, int64_t size) noexcept nogil:
    """Big-endian two's complement of ``size`` <= 16 bytes -> little-endian 128 bits."""
    cdef int64_t k
    cdef uint8_t fill = 0xFF if size > 0 and (src[0] & 0x80) else 0
    memset(out, fill, 16)
    for k in range(size):
        out[k] = src[size - 1 - k]


cdef extern from *:
    ctypedef long long int128_t "__int128"

cdef int128_t POW10[39]
POW10[0] = 1
for _i in range(1, 39):
    POW10[_i] = POW10[_i - 1] * 10


cdef inline int _fits(const uint8_t* le16, int precision) noexcept nogil:
    """Whether a little-endian 128-bit unscaled decimal has at most ``precision`` digits."""
    cdef int128_t x
    memcpy(&x, le16, 16)
    if x < 0:
        x = -(x + 1)  # |x| - 1, no overflow at the minimum
        return x < POW10[precision] - 1
    return x < POW10[precision]


cdef const char* _HEX = b"0123456789abcdef"


cdef inline int _hex(uint8_t c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    c |= 0x20
    if 97 <= c <= 102:
        return c - 87
    return -1


cdef inline int _uuid_bytes(uint8_t* out, const uint8_t* s, int64_t size) noexcept nogil:
    """``8-4-4-4-12`` hex digits (36 characters), or 32 hex digits without the dashes (what
    Python's ``uuid.UUID`` also reads), either case -> 16 bytes; 0 when not that."""
    cdef int i = 0, k = 0, hi, lo
    if size != 36 and size != 32:
        return 0
    while i < size:
        if size == 36 and (i == 8 or i == 13 or i == 18 or i == 23):
            if s[i] != 45:
                return 0
            i += 1
            continue
        hi = _hex(s[i])
        lo = _hex(s[i + 1])
        if hi < 0 or lo < 0:
            return 0
        out[k] = <uint8_t>((hi << 4) | lo)
        k += 1
        i += 2
    return 1


cdef inline int _duration(Machine* m, uint8_t* out, const uint8_t* p) noexcept nogil:
    """An Avro duration (months, days, milliseconds: uint32 little-endian each) as Arrow's
    month_day_nano_interval (int32 months, int32 days, int64 nanoseconds)."""
    cdef uint32_t months = p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)
    cdef uint32_t days = p[4] | (<uint32_t>p[5] << 8) | (<uint32_t>p[6] << 16) | (<uint32_t>p[7] << 24)
    cdef uint32_t millis = p[8] | (<uint32_t>p[9] << 8) | (<uint32_t>p[10] << 16) | (<uint32_t>p[11] << 24)
    cdef int32_t m32, d32
    cdef int64_t nanos = <int64_t>millis * 1000000
    if months > INT32_MAX or days > INT32_MAX:
        m.err_detail = months if months > INT32_MAX else days
        return E_INT_RANGE
    m32 = <int32_t>months
    d32 = <int32_t>days
    memcpy(out, &m32, 4)
    memcpy(out + 4, &d32, 4)
    memcpy(out + 8, &nanos, 8)
    return E_OK


cdef inline int _length(Machine* m, int64_t size, const uint8_t* p, const uint8_t* end) noexcept nogil:
    """E_OK when ``size`` bytes (a length read from the value, or a fixed size) are there to
    read at ``p``; else the error, with the size in ``m.err_detail``."""
    if size < 0:
        m.err_detail = size
        return E_NEG_LENGTH
    if size > end - p:
        m.err_detail = size
        return E_EOF
    return E_OK


cdef const uint8_t* _count(Machine* m, const uint8_t* p, const uint8_t* end, int64_t min_size, int64_t items,
                          int64_t* out, Frame* f, int* err) noexcept nogil:
    """The next block's item count, checked against the bytes left (or max_items); returns
    where reading goes on, or NULL with ``err`` set. A block of a negative count (``-count``
    items, then their byte size) sets ``f.block_end`` (else NULL) for its end to be checked."""
    cdef int64_t count, size
    f.block_end = NULL
    cdef int e = _varint(&p, end, &count)
    if e:
        err[0] = e
        return NULL
    if count < 0:
        if count == -INT64_MAX - 1:
            m.err_detail = count
            err[0] = E_COUNT
            return NULL
        count = -count
        e = _varint(&p, end, &size)
        if e:
            err[0] = e
            return NULL
        e = _length(m, size, p, end)
        if e:
            err[0] = e
            return NULL
        f.block_end = p + size
        f.block_size = size
    if count:
        if min_size > 0:
            # count <= bytes left first, so the product cannot overflow (no division here)
            if count > end - p or count * min_size > end - p:
                m.err_detail = count
                err[0] = E_COUNT
                return NULL
        elif count > m.max_items - items:
            m.err_detail = count
            err[0] = E_ITEMS
            return NULL
    out[0] = count
    return p
