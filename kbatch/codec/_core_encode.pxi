# _core_encode.pxi: the encoders, part of kbatch/codec/_core.pyx.
#
# provides: encode, encode_arrays, encode_control, BatchBuilder (public); _encode_inputs
#           (gathered rows planned, written or compressed, into an _Output), _finish_batch
#           (BatchBuilder's one batch), _set_opts
# uses:     _core_gather (C rows: _gather_plain, _gather, _gather_columns), _core_write
#           (planning, writing), _core_compress (_CompressJob, zstd in C, _codec), _core_wire
#           (varints), _core_frame (_Span), _core_parse (_sequence_at), _core_threads (Helper,
#           the GIL window), _core_output (_Output), kbatch/_wire.pxd (writers),
#           kbatch.codec._options (codec_id, timestamp_type_id), kbatch.codec._compression

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
