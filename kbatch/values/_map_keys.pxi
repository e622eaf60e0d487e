# Included by the value kernels (``avro/_avrokernel.pyx``, ``protobuf/_protokernel.pyx``, after
# ``_columns.pxi``): a map whose key comes again keeps one entry per key, holding the last
# entry's value where the key first stood. That is Protobuf's rule ("the last key seen is used";
# protobuf-java's LinkedHashMap keeps the first one's place) and Avro's readers' (fastavro builds
# a dict; Java's GenericDatumReader.readMap calls Map.put for every entry, so Spark's from_avro
# keeps the last value). The keys are hashed (FNV-1a) and compared; the entries' columns (the
# entry struct, the key, the value and the value's subtree) are gathered anew in the kept order,
# offsets closed up (``_keep_last_entries``). The including module defines ``E_OK`` and
# ``E_MEMORY`` and cimports the ``libc`` integer types, ``malloc``/``free`` and
# ``memcmp``/``memcpy`` before the include.

cdef enum:
    SMALL_MAP = 16  # up to this many entries: every pair of key fingerprints compared, nothing allocated
    STACK_MAP = 64  # up to this many: the hash table on the stack (2 * 64 slots), not malloc'ed


cdef inline uint64_t _key_hash(Col* k, int64_t i) noexcept nogil:
    """A hash of map key ``i`` of key column ``k`` (bytes, a fixed-width value or a bit): FNV-1a's
    step over the key's 8-byte words, then its last bytes, then its length (nothing read past
    the key)."""
    cdef const uint8_t* s
    cdef int64_t n, j = 0
    cdef uint64_t w, h = 14695981039346656037ULL
    if k.kind == K_BIN:
        s = k.data + k.offs[i]
        n = k.offs[i + 1] - k.offs[i]
    elif k.kind == K_FIXEDW:
        s = k.vals + i * k.width
        n = k.width
    else:
        return (k.vals[i >> 3] >> (i & 7)) & 1
    while j + 8 <= n:
        memcpy(&w, s + j, 8)
        h = (h ^ w) * 1099511628211ULL
        j += 8
    while j < n:
        h = (h ^ s[j]) * 1099511628211ULL
        j += 1
    h = (h ^ <uint64_t>n) * 1099511628211ULL
    return h ^ (h >> 29)


cdef inline uint64_t _key_print(Col* k, int64_t i) noexcept nogil:
    """A cheap fingerprint of map key ``i`` (equal keys, equal prints), for the pairs of a small
    map: a string's or bytes' length with its first and last 8 bytes (or 4, or each byte of a
    shorter one), read without going past the key; any other key's hash."""
    cdef const uint8_t* s
    cdef int64_t n, j
    cdef uint64_t x, y
    cdef uint32_t a, b
    if k.kind != K_BIN:
        return _key_hash(k, i)
    s = k.data + k.offs[i]
    n = k.offs[i + 1] - k.offs[i]
    if n >= 8:
        memcpy(&x, s, 8)
        memcpy(&y, s + n - 8, 8)
        return (x * 0x9E3779B97F4A7C15ULL) ^ y ^ (<uint64_t>n << 56)
    if n >= 4:
        memcpy(&a, s, 4)
        memcpy(&b, s + n - 4, 4)
        return (<uint64_t>a | (<uint64_t>b << 32)) ^ (<uint64_t>n << 61)
    x = <uint64_t>n << 32
    for j in range(n):
        x = (x << 8) | s[j]
    return x


cdef inline int _key_eq(Col* k, int64_t i, int64_t j) noexcept nogil:
    cdef int64_t n
    if k.kind == K_BIN:
        n = k.offs[i + 1] - k.offs[i]
        return n == k.offs[j + 1] - k.offs[j] and memcmp(k.data + k.offs[i], k.data + k.offs[j], n) == 0
    if k.kind == K_FIXEDW:
        return memcmp(k.vals + i * k.width, k.vals + j * k.width, k.width) == 0
    return ((k.vals[i >> 3] >> (i & 7)) & 1) == ((k.vals[j >> 3] >> (j & 7)) & 1)


cdef inline int _bit(const uint8_t* b, int64_t i) noexcept nogil:
    return (b[i >> 3] >> (i & 7)) & 1


cdef inline void _set_bit(uint8_t* b, int64_t i, int v) noexcept nogil:
    if v:
        b[i >> 3] |= <uint8_t>(1 << (i & 7))
    else:
        b[i >> 3] &= <uint8_t>~(1 << (i & 7))


cdef inline void _free4(void* a, void* b, void* c, void* d) noexcept nogil:
    free(a)
    free(b)
    free(c)
    free(d)


cdef inline int64_t _rows(Col* cols, const int32_t* count, int d) noexcept nogil:
    """Column ``d``'s length: its own, or (``count`` given) that of the column it is counted by
    (a folded struct's first child's: the Avro kernel keeps no length for a folded struct)."""
    return cols[count[d]].n if count != NULL else cols[d].n


cdef int _gather(Col* c, int64_t s, const int64_t* order, int64_t count) noexcept nogil:
    """Rows ``s`` .. ``n`` of ``c`` become its rows ``order[0 .. count]`` (each in ``s`` .. ``n``),
    read from a copy; a list's offsets follow its rows (its child is gathered by the caller)."""
    cdef int64_t n = c.n - s, t, r, lo, base
    cdef uint8_t* bits = NULL
    cdef uint8_t* vals = NULL
    cdef int32_t* offs = NULL
    cdef uint8_t* data = NULL
    if c.kind == K_NULLT:  # only a count (its validity, when it has one, is never set)
        c.n = s + count
        return E_OK
    bits = <uint8_t*>malloc(n + 1)
    if c.kind == K_FIXEDW:
        vals = <uint8_t*>malloc(n * c.width + 1)
    elif c.kind == K_BIN or c.kind == K_LIST:
        offs = <int32_t*>malloc((n + 1) * sizeof(int32_t))
        if c.kind == K_BIN:
            data = <uint8_t*>malloc(c.offs[c.n] - c.offs[s] + 1)
    if bits == NULL or (c.kind == K_FIXEDW and vals == NULL) or (offs == NULL and (c.kind == K_BIN or c.kind == K_LIST)) \
            or (c.kind == K_BIN and data == NULL):
        _free4(bits, vals, offs, data)
        return E_MEMORY
    for r in range(n):  # validity (or a bool's value) per row
        bits[r] = (_bit(c.valid, s + r) if c.has_valid else 1) | (_bit(c.vals, s + r) << 1 if c.kind == K_BOOL else 0)
    if vals != NULL:
        memcpy(vals, c.vals + s * c.width, n * c.width)
    if offs != NULL:
        memcpy(offs, c.offs + s, (n + 1) * sizeof(int32_t))
    if data != NULL:
        memcpy(data, c.data + offs[0], offs[n] - offs[0])
    base = offs[0] if offs != NULL else 0
    for t in range(count):
        r = order[t] - s
        if c.has_valid:
            _set_bit(c.valid, s + t, bits[r] & 1)
        if c.kind == K_BOOL:
            _set_bit(c.vals, s + t, bits[r] >> 1)
        elif c.kind == K_FIXEDW:
            memcpy(c.vals + (s + t) * c.width, vals + r * c.width, c.width)
        elif c.kind == K_BIN or c.kind == K_LIST:
            lo = offs[r + 1] - offs[r]
            if c.kind == K_BIN:
                memcpy(c.data + c.offs[s + t], data + offs[r] - base, lo)
            c.offs[s + t + 1] = <int32_t>(c.offs[s + t] + lo)
    c.n = s + count
    if c.kind == K_BIN:
        c.data_len = c.offs[c.n]
    _free4(bits, vals, offs, data)
    return E_OK


cdef int _keep_last_entries(Col* cols, int ncols, const int32_t* count, int sc, int kc, int64_t s) noexcept nogil:
    """The entries of one map, rows ``s`` .. the end of entry struct column ``sc`` (the last rows
    of every column under it: a value's fields, lists and maps), keyed by column ``kc`` (a child
    of ``sc``, one row per entry): of the entries that share a key, one is kept, holding the last
    entry's value where the first stood. ``count``: NULL, or the columns each column's length is
    read from (``_rows``); a folded struct (``Col.folded``) is not gathered, its length is set
    by the kernel when the records are done. E_OK, or E_MEMORY."""
    cdef Col* k = cols + kc
    cdef Col* pc
    cdef int64_t n = _rows(cols, count, sc) - s, i, j, size, slot, total, cnt, r
    cdef int64_t* table = NULL
    cdef int64_t* last = NULL
    cdef int64_t* start = NULL
    cdef int64_t* at = NULL
    cdef int64_t* rows = NULL
    cdef int64_t* order = NULL
    cdef uint64_t h
    cdef uint64_t hs[SMALL_MAP]
    cdef uint64_t seen[4]
    cdef int64_t table_buf[2 * STACK_MAP]
    cdef int64_t last_buf[STACK_MAP]
    cdef int d, end, p, dup = 0, e = E_OK
    if n < 2 or (n == 2 and not _key_eq(k, s, s + 1)):
        return E_OK
    if n <= SMALL_MAP:
        # a small map: each key's fingerprint marks one of 256 bits; no bit marked twice, no key
        # repeated (the common case, in one pass); else every pair of fingerprints, the keys
        # compared where theirs are equal
        seen[0] = seen[1] = seen[2] = seen[3] = 0
        for i in range(n):
            hs[i] = _key_print(k, s + i)
            h = (hs[i] * 0x9E3779B97F4A7C15ULL) >> 56
            dup |= (seen[h >> 6] >> (h & 63)) & 1
            seen[h >> 6] |= 1ULL << (h & 63)
        if not dup:
            return E_OK
        dup = 0
        for i in range(n - 1):
            for j in range(i + 1, n):
                if hs[i] == hs[j] and _key_eq(k, s + i, s + j):
                    dup = 1
                    break
            if dup:
                break
        if not dup:
            return E_OK
    # open addressing over the keys: last[i] for an entry whose key comes first, else -1 (on the
    # stack up to STACK_MAP entries)
    size = 1
    while size < 2 * n:
        size *= 2
    if n <= STACK_MAP:
        table = table_buf
        last = last_buf
    else:
        table = <int64_t*>malloc(size * sizeof(int64_t))
        last = <int64_t*>malloc(n * sizeof(int64_t))
        if table == NULL or last == NULL:
            free(table)
            free(last)
            return E_MEMORY
    for slot in range(size):
        table[slot] = -1
    cnt = 0
    for i in range(n):
        last[i] = -1
        h = _key_hash(k, s + i)
        slot = <int64_t>(h & <uint64_t>(size - 1))
        while table[slot] >= 0 and not _key_eq(k, s + i, s + table[slot]):
            slot = (slot + 1) & (size - 1)
        if table[slot] >= 0:
            last[table[slot]] = s + i
        else:
            table[slot] = i
            last[i] = s + i
            cnt += 1
    if table != table_buf:
        free(table)
    if cnt == n:
        if last != last_buf:
            free(last)
        return E_OK
    # the entry struct's subtree: the columns after it (pre-order) whose parent lies in it
    end = sc + 1
    while end < ncols and cols[end].parent >= sc:
        end += 1
    start = <int64_t*>malloc((end - sc) * sizeof(int64_t))
    at = <int64_t*>malloc((end - sc) * sizeof(int64_t))
    rows = <int64_t*>malloc((end - sc) * sizeof(int64_t))
    if start == NULL or at == NULL or rows == NULL:
        e = E_MEMORY
    else:
        total = 0
        start[0] = s
        for d in range(sc, end):  # each column's first row of these entries (offsets not yet moved)
            p = cols[d].parent
            if d > sc:
                start[d - sc] = cols[p].offs[start[p - sc]] if cols[p].kind == K_LIST else start[p - sc]
            at[d - sc] = total
            total += _rows(cols, count, d) - start[d - sc]
        order = <int64_t*>malloc((total + 1) * sizeof(int64_t))
        if order == NULL:
            e = E_MEMORY
        else:
            rows[0] = 0
            for i in range(n):
                if last[i] >= 0:
                    order[rows[0]] = last[i]
                    rows[0] += 1
            for d in range(sc + 1, end):  # a child's rows: those of its parent's rows, in their order
                p = cols[d].parent
                pc = cols + p
                if pc.kind == K_LIST:
                    cnt = 0
                    for i in range(rows[p - sc]):
                        r = order[at[p - sc] + i]
                        for j in range(pc.offs[r], pc.offs[r + 1]):
                            order[at[d - sc] + cnt] = j
                            cnt += 1
                    rows[d - sc] = cnt
                else:
                    memcpy(order + at[d - sc], order + at[p - sc], rows[p - sc] * sizeof(int64_t))
                    rows[d - sc] = rows[p - sc]
            for d in range(sc, end):
                if e == E_OK and not cols[d].folded:
                    e = _gather(cols + d, start[d - sc], order + at[d - sc], rows[d - sc])
    _free4(order, rows, start, at)
    if last != last_buf:
        free(last)
    return e
