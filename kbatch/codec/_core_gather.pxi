# _core_gather.pxi: gathering an encode's input into C rows, part of kbatch/codec/_core.pyx.
#
# provides: rec_in_t, hdr_in_t, plan_t; _Inputs (the rows, and the objects they point
#           into); _gather_plain (plain lists of bytes, under the GIL window), _gather (any
#           sequence); from Arrow-style columns: bin_col_t, gather_t, _gather_columns (nogil,
#           every range checked), _offsets_array, _set_binary
# uses:     _core_memory (_take_block), _core_threads (the GIL window)
#
# ---------------------------------------------------------------------------

# Every input (Python sequences, Arrow-style columns, one record at a time)
# is first gathered into C rows: a pointer and length per key and value, a
# timestamp, and a range of header rows. Planning (splitting into batches
# under the limits) and writing are then plain C without the GIL, straight
# into the output bytes; each batch's CRC-32C is computed once it is final.

cdef struct rec_in_t:
    int64_t timestamp
    const uint8_t* key
    const uint8_t* value
    int64_t key_length       # -1 = null
    int64_t value_length     # -1 = null
    int64_t headers_first    # first row in the header rows
    int64_t headers_count
    int64_t fixed_size       # the body's bytes that do not depend on its batch: _fixed_size
    int64_t body_size        # _body_size in its batch: set by _plan (or append), used by _write_record


cdef struct hdr_in_t:
    const uint8_t* key
    const uint8_t* value
    int64_t key_length
    int64_t value_length     # -1 = null


cdef inline int64_t _fixed_size(const rec_in_t* r, int64_t headers_size) noexcept nogil:
    """Encoded bytes of a record's key, value, header count and headers
    (``headers_size``): its body but for the attributes and the two deltas,
    which depend on its batch (:func:`_body_size`). Summed while the gather
    has the lengths at hand, so that planning reads two fields of a row, not five."""
    return (_varint_size(<int32_t>r.key_length) + (r.key_length if r.key_length > 0 else 0)
            + _varint_size(<int32_t>r.value_length) + (r.value_length if r.value_length > 0 else 0)
            + _varint_size(<int32_t>r.headers_count) + headers_size)


cdef struct plan_t:
    int64_t first           # index of the batch's first record
    int64_t end             # one past its last record
    int64_t size            # bytes of the uncompressed batch, header included


cdef enum:
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20
    MAX_BATCH_SIZE = 0x7FFFFFFF   # batchLength is an int32


cdef class _Inputs:
    """C rows describing the records to encode, and the objects their pointers point into."""

    cdef rec_in_t* recs
    cdef hdr_in_t* hdrs
    cdef int64_t n, nh, hcap
    cdef list keep

    def __cinit__(self, int64_t n):
        # Spare blocks (pages already mapped): a large encode's rows are written once and read twice.
        self.recs = <rec_in_t*>_take_block(max(n, 1) * sizeof(rec_in_t))
        self.hdrs = NULL
        self.n = n
        self.nh = 0
        self.hcap = 0
        self.keep = []

    def __dealloc__(self):
        _give_block(self.recs)
        _give_block(self.hdrs)

    cdef bint room_for_headers(self, int64_t count) noexcept:
        """Make room for ``count`` more header rows (False when out of memory)."""
        cdef int64_t cap = self.hcap
        cdef hdr_in_t* grown
        if self.nh + count <= cap:
            return True
        cap = max(2 * cap, self.nh + count, 16)
        grown = <hdr_in_t*>_alloc_block(cap * sizeof(hdr_in_t))
        if grown == NULL:
            return False
        if self.nh:
            memcpy(grown, self.hdrs, self.nh * sizeof(hdr_in_t))
        _give_block(self.hdrs)
        self.hdrs = grown
        self.hcap = cap
        return True

    cdef hdr_in_t* add_headers(self, int64_t count) except NULL:
        if not self.room_for_headers(count):
            raise MemoryError()
        self.nh += count
        return self.hdrs + self.nh - count


cdef int _bytes_of_other(object obj, const uint8_t** ptr, int64_t* length, _Inputs inp,
                         str what, Py_ssize_t index) except -1:
    """_bytes_of for anything but exact bytes: None, or a buffer copied once."""
    if obj is None:
        ptr[0] = NULL
        length[0] = -1
        return 0
    if PyUnicode_Check(obj) or not PyObject_CheckBuffer(obj):
        raise TypeError(f"{what} {index} must be bytes-like or None, got {type(obj).__name__}")
    obj = bytes(memoryview(obj).cast("B"))
    inp.keep.append(obj)
    ptr[0] = <const uint8_t*>PyBytes_AS_STRING(obj)
    length[0] = PyBytes_GET_SIZE(obj)
    return 0


cdef inline int _bytes_of(object obj, const uint8_t** ptr, int64_t* length, _Inputs inp,
                          str what, Py_ssize_t index) except -1:
    """Point at a bytes-like item (None: null). Non-bytes buffers are copied once."""
    if PyBytes_CheckExact(obj):  # the common case, inlined; the rest out of line
        ptr[0] = <const uint8_t*>PyBytes_AS_STRING(obj)
        length[0] = PyBytes_GET_SIZE(obj)
        return 0
    # (``inp`` rather than ``inp.keep``: no reference counting on the fast path)
    return _bytes_of_other(obj, ptr, length, inp, what, index)


cdef inline object _header_pairs(object headers, list keep):
    if headers is None:
        return ()
    if type(headers) is list or type(headers) is tuple:
        return headers
    # dicts, generators, ...: materialise once and keep the pairs alive
    pairs = tuple(headers.items()) if isinstance(headers, dict) else tuple(headers)
    keep.append(pairs)
    return pairs


cdef inline object _item(object seq, Py_ssize_t i):
    """``seq[i]`` for a list or tuple, always bounds-checked: Python code run
    while gathering (``__index__``, iterating a header pair) may shrink a list."""
    if PyList_CheckExact(seq):
        if i < PyList_GET_SIZE(seq):
            return <object>PyList_GET_ITEM(seq, i)
    elif PyTuple_CheckExact(seq):
        if i < PyTuple_GET_SIZE(seq):
            return <object>PyTuple_GET_ITEM(seq, i)
    return PySequence_GetItem(seq, i)


cdef enum:
    PREFETCH_AHEAD = 8


cdef inline bint _point_plain(PyObject* o, PyObject* none, const uint8_t** ptr, int64_t* length) noexcept:
    """None or exact bytes: point at it (True); anything else: False."""
    if o == none:
        ptr[0] = NULL
        length[0] = -1
        return True
    if _is_bytes(o):
        ptr[0] = <const uint8_t*>_bytes_data(o)
        length[0] = _bytes_size(o)
        return True
    return False


cdef inline bint _int64_of(PyObject* o, int64_t* out) noexcept:
    """An exact int's value through Cython's conversion (it reads an int of a
    few digits directly, where PyLong_AsLongLongAndOverflow loops); False,
    nothing raised, when it does not fit. Runs no Python code."""
    try:
        out[0] = <int64_t><object>o
    except OverflowError:
        return False
    return True


cdef int _gather_plain(_Inputs inp, int64_t i, PyObject* key, PyObject* value, PyObject* timestamp,
                       PyObject* headers, PyObject* none, int64_t now) noexcept:
    """:func:`_gather` for plain items through borrowed pointers: 0, or 1 at
    anything else (errors included), for the caller to start again with
    :func:`_gather` (which then says what is wrong). Runs no Python code and
    creates no Python object."""
    cdef rec_in_t* r = inp.recs + i
    cdef hdr_in_t* h
    cdef PyObject** pairs
    cdef PyObject* pair
    cdef PyObject* hkey
    cdef Py_ssize_t j, count = 0, klen
    cdef int64_t size = 0
    if not (_point_plain(key, none, &r.key, &r.key_length) and _point_plain(value, none, &r.value, &r.value_length)):
        return 1
    if timestamp == none:
        r.timestamp = now
    elif _is_int(timestamp):
        if not _int64_of(timestamp, &r.timestamp):
            return 1
    else:
        return 1
    if headers != none:
        if not (_is_list(headers) or _is_tuple(headers)):
            return 1
        count = _items_size(headers)
    r.headers_first = inp.nh
    r.headers_count = count
    if count:
        if not inp.room_for_headers(count):
            return 1
        h = inp.hdrs + inp.nh
        inp.nh += count
        pairs = _items(headers)
        for j in range(count):
            pair = pairs[j]
            if not (_is_tuple(pair) and _items_size(pair) == 2):
                return 1
            hkey = _items(pair)[0]
            if _is_str(hkey):
                if _is_ascii(hkey):
                    h.key = <const uint8_t*>_str_data(hkey)
                    h.key_length = _str_length(hkey)
                else:
                    h.key = <const uint8_t*>_str_utf8(hkey, &klen)
                    if h.key == NULL:
                        PyErr_Clear()
                        return 1
                    h.key_length = klen
            elif _is_bytes(hkey):
                h.key = <const uint8_t*>_bytes_data(hkey)
                h.key_length = _bytes_size(hkey)
            else:
                return 1
            if not _point_plain(_items(pair)[1], none, &h.value, &h.value_length):
                return 1
            size += (_varint_size(<int32_t>h.key_length) + h.key_length
                     + _varint_size(<int32_t>h.value_length) + (h.value_length if h.value_length > 0 else 0))
            h += 1
    if r.key_length > MAX_BATCH_SIZE or r.value_length > MAX_BATCH_SIZE or size > MAX_BATCH_SIZE:
        return 1
    r.fixed_size = _fixed_size(r, size)
    return 0


cdef int _gather(_Inputs inp, int64_t i, object key, object value, object timestamp, object headers,
                 int64_t now) except -1:
    """Point record ``i``'s C row at its key, value and headers (any
    bytes-like items; Python code they run is fine: the caller holds
    snapshots). :func:`_gather_plain` is the fast path for plain items."""
    cdef rec_in_t* r = inp.recs + i
    cdef hdr_in_t* h
    cdef Py_ssize_t klen, j, count
    cdef int64_t size = 0
    _bytes_of(key, &r.key, &r.key_length, inp, "key", i)
    _bytes_of(value, &r.value, &r.value_length, inp, "value", i)
    r.timestamp = now if timestamp is None else <int64_t>timestamp
    pairs = _header_pairs(headers, inp.keep)
    count = PyList_GET_SIZE(pairs) if PyList_CheckExact(pairs) else len(pairs)
    r.headers_first = inp.nh
    r.headers_count = count
    if count:
        if inp.nh + count <= inp.hcap:  # room already: skip the method call
            h = inp.hdrs + inp.nh
            inp.nh += count
        else:
            h = inp.add_headers(count)
        for j in range(count):
            pair = _item(pairs, j)
            if PyTuple_CheckExact(pair) and PyTuple_GET_SIZE(pair) == 2:
                hkey = <object>PyTuple_GET_ITEM(pair, 0)
                hvalue = <object>PyTuple_GET_ITEM(pair, 1)
            else:
                hkey, hvalue = pair
            if PyUnicode_Check(hkey):
                if PyUnicode_IS_COMPACT_ASCII(hkey):  # its UTF-8 is its data
                    h.key = <const uint8_t*>PyUnicode_DATA(hkey)
                    h.key_length = PyUnicode_GET_LENGTH(hkey)
                else:
                    h.key = <const uint8_t*>PyUnicode_AsUTF8AndSize(hkey, &klen)
                    h.key_length = klen
            elif PyBytes_CheckExact(hkey):
                h.key = <const uint8_t*>PyBytes_AS_STRING(hkey)
                h.key_length = PyBytes_GET_SIZE(hkey)
            else:
                raise TypeError(f"header key of record {i} must be str or bytes, got {type(hkey).__name__}")
            _bytes_of(hvalue, &h.value, &h.value_length, inp, "header value of record", i)
            size += (_varint_size(<int32_t>h.key_length) + h.key_length
                     + _varint_size(<int32_t>h.value_length) + (h.value_length if h.value_length > 0 else 0))
            h += 1
    if r.key_length > MAX_BATCH_SIZE or r.value_length > MAX_BATCH_SIZE or size > MAX_BATCH_SIZE:
        raise ValueError(f"record {i} is larger than a batch can hold (2 GiB)")
    r.fixed_size = _fixed_size(r, size)
    return 0


# Encoding from Arrow-style columns. Each binary column is ``offsets``
# (int32 or int64, n + 1 entries, into ``data``), ``data`` and an optional
# ``valid`` mask; headers are a list column (``header_offsets``, n + 1, into
# the header rows) over two binary columns. One pass turns them into the
# encoder's C rows, checking every range it will read as it goes (so the
# offsets need not be checked first), on two threads for large inputs.

cdef struct bin_col_t:
    const uint8_t* base     # NULL when the column is absent (all null)
    const void* offsets
    const uint8_t* valid    # NULL: no nulls
    int64_t size            # bytes in the data
    bint wide               # int64 offsets, else int32


cdef struct gather_t:
    bin_col_t value
    bin_col_t key
    bin_col_t hkey
    bin_col_t hval
    const void* hoff        # NULL: no headers
    bint hwide
    int64_t nh              # header rows
    const int64_t* ts       # NULL: now
    int64_t now
    rec_in_t* recs
    hdr_in_t* hdrs
    int64_t first           # records first .. end
    int64_t end
    int64_t bad             # the first bad record (end: none), and ...
    int bad_field           # ... what is wrong with it (GATHER_*)


cdef enum:
    GATHER_VALUE = 1
    GATHER_KEY = 2
    GATHER_HEADERS = 3
    GATHER_HEADER_KEY = 4
    GATHER_HEADER_VALUE = 5
    GATHER_TOO_LARGE = 6

_GATHER_FIELDS = {
    GATHER_VALUE: "its value offsets decrease or point outside the value data",
    GATHER_KEY: "its key offsets decrease or point outside the key data",
    GATHER_HEADERS: "its header_offsets decrease or point outside the header rows",
    GATHER_HEADER_KEY: "a header's key offsets decrease or point outside their data",
    GATHER_HEADER_VALUE: "a header's value offsets decrease or point outside their data",
    GATHER_TOO_LARGE: "a field over 2 GiB",
}


cdef inline int64_t _offset_at(const void* offsets, bint wide, int64_t i) noexcept nogil:
    return (<const int64_t*>offsets)[i] if wide else (<const int32_t*>offsets)[i]


cdef inline bint _point_at(const bin_col_t* c, int64_t i, const uint8_t** ptr, int64_t* length) noexcept nogil:
    """Entry ``i`` of a binary column (null: NULL, -1); False if its range is not inside the data."""
    cdef int64_t start, stop
    if c.base == NULL or (c.valid != NULL and not c.valid[i]):
        ptr[0] = NULL
        length[0] = -1
        return True
    start = _offset_at(c.offsets, c.wide, i)
    stop = _offset_at(c.offsets, c.wide, i + 1)
    if start < 0 or stop < start or stop > c.size:
        return False
    ptr[0] = c.base + start
    length[0] = stop - start
    return True


cdef inline void _gather_fail(gather_t* g, int64_t i, int field) noexcept nogil:
    g.bad = i
    g.bad_field = field


cdef void _gather_columns(void* arg) noexcept nogil:
    """Records ``first .. end`` of a gather_t as C rows; stops at the first bad one."""
    # A copy on the stack: the row stores cannot alias it, so its fields stay in registers.
    cdef gather_t g = (<gather_t*>arg)[0]
    cdef rec_in_t* r
    cdef hdr_in_t* h
    cdef int64_t i, j, hfirst, hend, size
    g.bad = g.end
    for i in range(g.first, g.end):
        r = g.recs + i
        r.timestamp = g.ts[i] if g.ts != NULL else g.now
        if not _point_at(&g.value, i, &r.value, &r.value_length):
            _gather_fail(&g, i, GATHER_VALUE)
            break
        if not _point_at(&g.key, i, &r.key, &r.key_length):
            _gather_fail(&g, i, GATHER_KEY)
            break
        r.headers_first = 0
        r.headers_count = 0
        size = 0
        if g.hoff != NULL:
            hfirst = _offset_at(g.hoff, g.hwide, i)
            hend = _offset_at(g.hoff, g.hwide, i + 1)
            if hfirst < 0 or hend < hfirst or hend > g.nh:
                _gather_fail(&g, i, GATHER_HEADERS)
                break
            for j in range(hfirst, hend):
                h = g.hdrs + j
                if not _point_at(&g.hkey, j, &h.key, &h.key_length) or h.key == NULL:
                    _gather_fail(&g, i, GATHER_HEADER_KEY)
                    break
                if not _point_at(&g.hval, j, &h.value, &h.value_length):
                    _gather_fail(&g, i, GATHER_HEADER_VALUE)
                    break
                size += (_varint_size(<int32_t>h.key_length) + h.key_length
                         + _varint_size(<int32_t>h.value_length)
                         + (h.value_length if h.value_length > 0 else 0))
            if g.bad != g.end:
                break
            r.headers_first = hfirst
            r.headers_count = hend - hfirst
        r.fixed_size = _fixed_size(r, size)
        if r.value_length > MAX_BATCH_SIZE or r.key_length > MAX_BATCH_SIZE or size > MAX_BATCH_SIZE:
            _gather_fail(&g, i, GATHER_TOO_LARGE)
            break
    (<gather_t*>arg).bad = g.bad
    (<gather_t*>arg).bad_field = g.bad_field


cdef object _offsets_array(object offsets, int64_t n, str name):
    """``offsets`` as a contiguous int32 or int64 array of ``n + 1`` entries (other types: int64)."""
    off = np.asarray(offsets)
    if off.dtype not in (np.int32, np.int64) or off.ndim != 1:
        off = np.asarray(offsets, dtype=np.int64)
    off = np.ascontiguousarray(off)
    if off.shape[0] != n + 1:
        raise ValueError(f"{name} has {off.shape[0]} entries, expected {n + 1}")
    return off


cdef int _set_binary(bin_col_t* c, object offsets, object data, object valid, int64_t n, str name, str entry,
                     list keep) except -1:
    """Fill ``c`` from one binary column of ``n`` entries (``offsets`` None:
    absent); checks shapes only. ``keep`` gets what ``c`` points into."""
    cdef const uint8_t[::1] view
    cdef object off, mask, mv
    memset(c, 0, sizeof(bin_col_t))
    if offsets is None:
        return 0
    off = _offsets_array(offsets, n, f"{name}_offsets")
    mv = _byte_view(data)
    view = mv
    keep.extend([off, mv])  # the memoryview: its export pins ``data`` (a bytearray cannot be resized under c.base)
    c.offsets = <const void*>(<size_t>off.ctypes.data)
    c.wide = off.dtype == np.int64
    c.size = view.shape[0]
    c.base = &view[0] if view.shape[0] else <const uint8_t*>c  # any non-NULL: no byte is read at size 0
    if valid is not None:
        mask = np.ascontiguousarray(valid).view(np.uint8)
        if mask.ndim != 1 or mask.shape[0] != n:
            raise ValueError(f"{name}_valid must have one entry per {entry}")
        keep.append(mask)
        if mask.shape[0]:
            c.valid = <const uint8_t*>(<size_t>mask.ctypes.data)
    return 0
