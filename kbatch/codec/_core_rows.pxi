# _core_rows.pxi: the row dtypes, part of kbatch/codec/_core.pyx (included, one extension).
#
# provides: RECORD_DTYPE, BATCH_DTYPE, HEADER_DTYPE (the NumPy views of record_t, batch_t and
#           header_t, declared in _core.pxd), _check_layouts (run at import: refuses to load if
#           a dtype and its C struct drift apart)
# uses:     _core.pxd (the structs)

RECORD_DTYPE = np.dtype(
    [
        ("offset", "i8"),
        ("timestamp", "i8"),
        ("key_start", "i8"),
        ("value_start", "i8"),
        ("headers_start", "i8"),
        ("key_length", "i4"),
        ("value_length", "i4"),
        ("headers_count", "i4"),
        ("batch", "i4"),
        ("sequence", "i4"),
        ("attributes", "i1"),
    ],
    align=True,
)

BATCH_DTYPE = np.dtype(
    [
        ("position", "i8"),
        ("base_offset", "i8"),
        ("base_timestamp", "i8"),
        ("max_timestamp", "i8"),
        ("producer_id", "i8"),
        ("first_record", "i8"),
        ("batch_length", "i4"),
        ("partition_leader_epoch", "i4"),
        ("crc", "u4"),
        ("last_offset_delta", "i4"),
        ("base_sequence", "i4"),
        ("record_count", "i4"),
        ("coordinator_epoch", "i4"),
        ("attributes", "i2"),
        ("producer_epoch", "i2"),
        ("control_type", "i2"),
        ("magic", "i1"),
        ("compression", "i1"),
        ("timestamp_type", "i1"),
        ("is_transactional", "?"),
        ("is_control", "?"),
        ("has_delete_horizon", "?"),
    ],
    align=True,
)

HEADER_DTYPE = np.dtype(
    [
        ("key_start", "i8"),
        ("value_start", "i8"),
        ("key_length", "i4"),
        ("value_length", "i4"),
    ],
    align=True,
)


cdef dict _c_layout(str name):
    cdef record_t r
    cdef batch_t b
    cdef header_t h
    cdef char* base
    if name == "record":
        base = <char*>&r
        return {
            "offset": <char*>&r.offset - base, "timestamp": <char*>&r.timestamp - base,
            "key_start": <char*>&r.key_start - base, "value_start": <char*>&r.value_start - base,
            "headers_start": <char*>&r.headers_start - base, "key_length": <char*>&r.key_length - base,
            "value_length": <char*>&r.value_length - base, "headers_count": <char*>&r.headers_count - base,
            "batch": <char*>&r.batch - base, "sequence": <char*>&r.sequence - base,
            "attributes": <char*>&r.attributes - base, "@size": sizeof(record_t),
        }
    if name == "batch":
        base = <char*>&b
        return {
            "position": <char*>&b.position - base, "base_offset": <char*>&b.base_offset - base,
            "base_timestamp": <char*>&b.base_timestamp - base, "max_timestamp": <char*>&b.max_timestamp - base,
            "producer_id": <char*>&b.producer_id - base, "first_record": <char*>&b.first_record - base,
            "batch_length": <char*>&b.batch_length - base,
            "partition_leader_epoch": <char*>&b.partition_leader_epoch - base,
            "crc": <char*>&b.crc - base, "last_offset_delta": <char*>&b.last_offset_delta - base,
            "base_sequence": <char*>&b.base_sequence - base, "record_count": <char*>&b.record_count - base,
            "coordinator_epoch": <char*>&b.coordinator_epoch - base, "attributes": <char*>&b.attributes - base,
            "producer_epoch": <char*>&b.producer_epoch - base, "control_type": <char*>&b.control_type - base,
            "magic": <char*>&b.magic - base, "compression": <char*>&b.compression - base,
            "timestamp_type": <char*>&b.timestamp_type - base,
            "is_transactional": <char*>&b.is_transactional - base, "is_control": <char*>&b.is_control - base,
            "has_delete_horizon": <char*>&b.has_delete_horizon - base, "@size": sizeof(batch_t),
        }
    base = <char*>&h
    return {
        "key_start": <char*>&h.key_start - base, "value_start": <char*>&h.value_start - base,
        "key_length": <char*>&h.key_length - base, "value_length": <char*>&h.value_length - base,
        "@size": sizeof(header_t),
    }


def _check_layouts():
    for name, dtype in (("record", RECORD_DTYPE), ("batch", BATCH_DTYPE), ("header", HEADER_DTYPE)):
        layout = _c_layout(name)
        numpy_layout = {f: dtype.fields[f][1] for f in dtype.names}
        numpy_layout["@size"] = dtype.itemsize
        if layout != numpy_layout:
            raise ImportError(f"kbatch.codec._core: C struct {name}_t does not match its NumPy dtype")


_check_layouts()
