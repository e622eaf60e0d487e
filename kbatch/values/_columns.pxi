# Included by the value kernels (``avro/_avrokernel.pyx``, ``protobuf/_protokernel.pyx``): one
# definition of the growable column buffers that become Arrow arrays (validity bitmaps, values,
# offsets, bytes), their rollback, a strict UTF-8 check, the buffers handed to Python without a
# copy (a decode's columns, its error rows) and freeing what is left. The including
# module defines ``E_OK``, ``E_TOO_BIG`` and ``E_MEMORY`` (its error codes) before the include and
# cimports ``PyBuffer_FillInfo``, the ``libc`` integer types, ``malloc``/``realloc``/``free`` and
# ``memcpy``/``memset``, and NumPy as ``np``.

cdef enum Kind:
    K_NULLT = 0
    K_BOOL = 1
    K_FIXEDW = 2
    K_BIN = 3
    K_LIST = 4
    K_STRUCT = 5

cdef struct Col:
    int kind
    int width
    int parent
    int has_valid
    int folded
    int64_t n
    int64_t cap
    uint8_t* valid
    uint8_t* vals
    int32_t* offs
    uint8_t* data
    int64_t data_len
    int64_t data_cap


cdef class _Owned:
    """A malloc'ed buffer handed to Arrow without a copy (freed with this object)."""
    cdef uint8_t* ptr
    cdef Py_ssize_t size

    def __getbuffer__(self, Py_buffer* view, int flags):
        PyBuffer_FillInfo(view, self, self.ptr, self.size, 1, flags)

    def __releasebuffer__(self, Py_buffer* view):
        pass

    def __dealloc__(self):
        free(self.ptr)

    def __len__(self):
        return self.size


cdef object _own(void* ptr, Py_ssize_t size):
    cdef _Owned o = _Owned.__new__(_Owned)
    o.ptr = <uint8_t*>ptr
    o.size = size
    return o


# ---------------------------------------------------------------- columns

cdef int _grow(Col* c) noexcept nogil:
    return _reserve(c, c.cap * 2 if c.cap else 64)


cdef int _reserve(Col* c, int64_t cap) noexcept nogil:
    """Room for ``cap`` slots (realloc'ed once)."""
    cdef void* q
    if c.has_valid:
        q = realloc(c.valid, (cap + 7) // 8)
        if q == NULL:
            return -1
        c.valid = <uint8_t*>q
    if c.kind == K_BOOL:
        q = realloc(c.vals, (cap + 7) // 8)
        if q == NULL:
            return -1
        c.vals = <uint8_t*>q
    elif c.kind == K_FIXEDW:
        q = realloc(c.vals, cap * c.width)
        if q == NULL:
            return -1
        c.vals = <uint8_t*>q
    elif c.kind == K_BIN or c.kind == K_LIST:
        q = realloc(c.offs, (cap + 1) * sizeof(int32_t))
        if q == NULL:
            return -1
        c.offs = <int32_t*>q
    c.cap = cap
    return 0


cdef inline int _slot(Col* c, int valid) noexcept nogil:
    """Make room for slot ``n`` and set its validity bit (``n`` is advanced by the caller).
    Small enough for the compiler to inline into a kernel's loop (the growth is a call)."""
    if c.n >= c.cap and _grow(c):
        return -1
    cdef int64_t n = c.n
    if c.has_valid:
        if valid:
            c.valid[n >> 3] |= <uint8_t>(1 << (n & 7))
        else:
            c.valid[n >> 3] &= <uint8_t>~(1 << (n & 7))
    return 0


cdef int _data_room(Col* c, int64_t need) noexcept nogil:
    """Grow a BIN column's bytes to hold ``need`` bytes and 16 of slack (doubling); out of
    line, so that the append below stays small enough to be inlined."""
    cdef int64_t cap
    cdef void* q
    if need > INT32_MAX:
        return E_TOO_BIG
    cap = c.data_cap * 2 if c.data_cap else 256
    if cap < need + 16:
        cap = need + 16
    if cap > <int64_t>INT32_MAX + 16:
        cap = <int64_t>INT32_MAX + 16
    q = realloc(c.data, cap)
    if q == NULL:
        return E_MEMORY
    c.data = <uint8_t*>q
    c.data_cap = cap
    return E_OK


cdef inline int _put_bytes(Col* c, const uint8_t* src, int64_t size, const uint8_t* limit) noexcept nogil:
    """Append ``size`` bytes as the value of slot ``n`` of a BIN column (slot made, n advanced).

    ``limit``: the end of the readable memory ``src`` is in; a short value with 16 bytes
    readable after its start is copied as 16 (a fixed-size copy the compiler inlines; the
    buffer keeps 16 bytes of slack), not through a call to ``memcpy``."""
    cdef int64_t need = c.data_len + size
    cdef int e
    if need + 16 > c.data_cap:  # data_cap <= INT32_MAX + 16: a need that fits is in range
        e = _data_room(c, need)
        if e:
            return e
    cdef uint8_t* dst = c.data + c.data_len
    cdef int64_t k
    if size <= 16 and limit != NULL and limit - src >= 16:  # one fixed-size copy (the buffer has 16 bytes of slack)
        memcpy(dst, src, 16)
    elif size <= 64 and limit != NULL and limit - src >= ((size + 15) & ~15):
        k = 0
        while k < size:  # 16-byte copies the compiler inlines
            memcpy(dst + k, src + k, 16)
            k += 16
    elif size:
        memcpy(dst, src, size)
    c.data_len = need
    c.offs[c.n + 1] = <int32_t>need
    c.n += 1
    return E_OK


cdef inline int _null_slot(Col* c) noexcept nogil:
    """A null in slot ``n`` (zeroed value, empty string or list), ``n`` advanced."""
    cdef int64_t n = c.n
    if n >= c.cap and _grow(c):
        return E_MEMORY
    if c.has_valid:
        c.valid[n >> 3] &= <uint8_t>~(1 << (n & 7))
    if c.kind == K_FIXEDW:
        if c.width == 8:
            (<int64_t*>c.vals)[n] = 0
        elif c.width == 4:
            (<int32_t*>c.vals)[n] = 0
        else:
            memset(c.vals + n * c.width, 0, c.width)
    elif c.kind == K_BIN or c.kind == K_LIST:
        c.offs[n + 1] = c.offs[n]
    elif c.kind == K_BOOL:
        c.vals[n >> 3] &= <uint8_t>~(1 << (n & 7))
    c.n = n + 1
    return E_OK


cdef void _rollback(Col* cols, int ncols, int64_t record, int64_t* target) noexcept nogil:
    """Cut every column back to where it was before ``record``: the root has ``record`` slots, a
    struct's children as many as it, a list's child as many as its offsets say."""
    cdef int c, par
    for c in range(ncols):
        par = cols[c].parent
        if par < 0:
            target[c] = record
        elif cols[par].kind == K_LIST:
            target[c] = cols[par].offs[target[par]]
        else:
            target[c] = target[par]
        cols[c].n = target[c]
        if cols[c].kind == K_BIN:
            cols[c].data_len = cols[c].offs[target[c]]


cdef inline int _utf8_ok(const uint8_t* s, int64_t n, const uint8_t* limit) noexcept nogil:
    """Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). ``limit``: the end
    of the readable memory ``s`` is in (a short string is checked with one 8-byte load)."""
    cdef int64_t i = 0
    cdef uint64_t w, acc = 0
    cdef uint8_t c, c1
    if n < 8:
        if limit != NULL and limit - s >= 8:  # all ASCII? the n low bytes of one little-endian 8-byte load
            memcpy(&w, s, 8)
            if (w & 0x8080808080808080ULL & ((<uint64_t>1 << (8 * n)) - 1)) == 0:
                return 1
    else:  # all ASCII? 8 bytes at a time, the last 8 overlapping
        while i + 8 <= n:
            memcpy(&w, s + i, 8)
            acc |= w
            i += 8
        memcpy(&w, s + n - 8, 8)
        if ((acc | w) & 0x8080808080808080ULL) == 0:
            return 1
        i = 0
    while i < n:
        if i + 8 <= n:
            memcpy(&w, s + i, 8)
            if (w & 0x8080808080808080ULL) == 0:
                i += 8
                continue
        c = s[i]
        if c < 0x80:
            i += 1
        elif c < 0xC2:
            return 0
        elif c < 0xE0:
            if i + 1 >= n or (s[i + 1] & 0xC0) != 0x80:
                return 0
            i += 2
        elif c < 0xF0:
            if i + 2 >= n:
                return 0
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80:
                return 0
            if (c == 0xE0 and c1 < 0xA0) or (c == 0xED and c1 >= 0xA0):
                return 0
            i += 3
        elif c < 0xF5:
            if i + 3 >= n:
                return 0
            c1 = s[i + 1]
            if (c1 & 0xC0) != 0x80 or (s[i + 2] & 0xC0) != 0x80 or (s[i + 3] & 0xC0) != 0x80:
                return 0
            if (c == 0xF0 and c1 < 0x90) or (c == 0xF4 and c1 >= 0x90):
                return 0
            i += 4
        else:
            return 0
    return 1


cdef tuple _take(Col* c):
    """A column's buffers as Python objects that own them (the column lets go of them)."""
    cdef int64_t n = c.n
    valid = vals = offs = data = None
    if c.has_valid and c.valid != NULL:
        valid = _own(c.valid, (n + 7) // 8)
        c.valid = NULL
    if c.vals != NULL:
        vals = _own(c.vals, (n + 7) // 8 if c.kind == K_BOOL else n * c.width)
        c.vals = NULL
    if c.offs != NULL:
        offs = _own(c.offs, (n + 1) * sizeof(int32_t))
        c.offs = NULL
    if c.kind == K_BIN and c.data != NULL:
        data = _own(c.data, c.data_len)
        c.data = NULL
    return (n, valid, vals, offs, data)


cdef list _take_all(Col* cols, int ncols):
    """Every column's buffers (:func:`_take`), in order."""
    return [_take(&cols[c]) for c in range(ncols)]


cdef void _free_cols(Col* cols, int ncols) noexcept:
    """Free what the columns still own (after :func:`_take`, nothing but their array), and the array."""
    cdef int c
    if cols == NULL:
        return
    for c in range(ncols):
        free(cols[c].valid)
        free(cols[c].vals)
        free(cols[c].offs)
        free(cols[c].data)
    free(cols)


# ---------------------------------------------------------------- errors

# one row per record that does not decode, filled by either kernel (``index``: the array and map
# positions on the way to the bad field, 8 deep: each kernel's MAX_PATH); ERROR_DTYPE is its NumPy view
cdef struct ErrRow:
    int64_t record
    int32_t code
    int32_t pc
    int64_t position
    int64_t detail
    int64_t index[8]


ERROR_DTYPE = np.dtype([("record", "<i8"), ("code", "<i4"), ("pc", "<i4"), ("position", "<i8"),
                        ("detail", "<i8"), ("index", "<i8", (8,))])


cdef object _errors(ErrRow* errs, int64_t nerr):
    """The error rows as a NumPy array of ERROR_DTYPE that owns ``errs`` (nerr 0: an empty one;
    the caller still frees ``errs`` then)."""
    if nerr == 0:
        return np.empty(0, ERROR_DTYPE)
    return np.frombuffer(_own(errs, nerr * sizeof(ErrRow)), dtype=ERROR_DTYPE)
