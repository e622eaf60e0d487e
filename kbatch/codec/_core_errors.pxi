# _core_errors.pxi: errors, filled without the GIL, raised with it; part of kbatch/codec/_core.pyx.
#
# provides: _fail (fill an error_t in nogil code and return -1), _reason (its message),
#           IN_INPUT/IN_PAYLOAD (where a position counts from), _make_error (error_t -> the
#           kbatch exception with position, batch and field)
# uses:     _core.pxd (error_t, ErrorCode), kbatch.errors

cdef inline int _fail(error_t* err, int code, int64_t position, const char* field,
                      int64_t record_index, int64_t a, int64_t b) noexcept nogil:
    err.code = code
    err.position = position
    err.field = field
    err.record_index = record_index
    err.a = a
    err.b = b
    return -1


cdef str _reason(const error_t* err):
    cdef int c = err.code
    cdef str field = (<bytes>err.field).decode() if err.field != NULL else ""
    a, b = err.a, err.b
    if c == E_TRUNCATED_FIELD:
        return f"{field} runs past the end of its record"
    if c == E_VARINT_TOO_LONG:
        return f"{field} is a varint longer than {b} bytes"
    if c == E_ENTRY_TOO_SMALL:
        return f"entry length {a} is below the minimum record overhead of 14 bytes"
    if c == E_BATCH_TOO_SMALL:
        return f"batch size {a} is below the 61-byte RecordBatch header"
    if c == E_UNKNOWN_MAGIC:
        return f"unknown magic byte {a} (expected 0, 1 or 2)"
    if c == E_UNKNOWN_COMPRESSION:
        return f"unknown compression codec {a} in attributes"
    if c == E_NEGATIVE_COUNT:
        return f"negative record count {a}"
    if c == E_COUNT_TOO_LARGE:
        return f"record count {a} is more than {b} bytes of records can hold"
    if c == E_NEGATIVE_LENGTH:
        return f"negative record length {a}"
    if c == E_RECORD_PAST_BATCH:
        return f"record length {a} runs past the end of the batch ({b} bytes left)"
    if c == E_RECORD_SIZE_MISMATCH:
        return f"record length is {a} bytes but its fields take {b}"
    if c == E_FEWER_RECORDS:
        return f"batch bytes end after {a} of its {b} records"
    if c == E_MORE_RECORDS:
        return f"{a} bytes left in the batch after its {b} records"
    if c == E_NEGATIVE_HEADER_COUNT:
        return f"negative header count {a}"
    if c == E_HEADER_COUNT_TOO_LARGE:
        return f"header count {a} is more than the {b} bytes left in the record can hold"
    if c == E_NEGATIVE_HEADER_KEY:
        return f"negative header key length {a}"
    if c == E_CONTROL_KEY:
        return f"control record key is {a} bytes with version {b} (needs 4 bytes, version >= 0)"
    if c == E_CRC:
        return f"crc32c mismatch: stored {a:#010x}, computed {b:#010x}"
    if c == E_NO_MEMORY:
        return "out of memory"
    if c == E_LEGACY_TOO_SMALL:
        return f"magic {b} message of {a} bytes is shorter than its fixed fields"
    if c == E_LEGACY_ZSTD:
        return f"zstd not allowed for magic {a} (zstd needs magic 2; Java: invalid wrapper compression type)"
    if c == E_NO_INNER_RECORDS:
        return ("compressed wrapper has a null value: no inner records" if a < 0
                else "compressed wrapper decompresses to no inner records")
    if c == E_NESTED_COMPRESSION:
        return f"inner message is compressed too (codec {a}); nested compression is not allowed"
    if c == E_INNER_MAGIC:
        return f"inner message has magic {a} (expected 0 or 1)"
    if c == E_WRAPPER_OFFSET:
        return f"wrapper offset {a} is below its last inner offset {b}"
    if c == E_CRC32:
        return f"crc32 mismatch: stored {a:#010x}, computed {b:#010x}"
    if c == E_INNER_TRUNCATED:
        return f"inner entry of {a} bytes runs past the end of the decompressed message set ({b} bytes left)"
    return f"corrupt input (error {c})"


cdef enum:
    IN_INPUT = 0         # err.position is a byte offset in the caller's buffer
    IN_ARENA_COPY = 1    # ... in the arena, inside an uncompressed batch's copied records
    IN_ARENA_INFLATED = 2  # ... in the arena, inside a batch's decompressed records


cdef object _make_error(const error_t* err, int where, int64_t payload_start, int64_t input_start):
    """The exception for ``err``; ``payload_start`` is where the bad batch's
    records start in the buffer parsed, ``input_start`` where they start in the input."""
    cdef str reason = _reason(err)
    cdef int64_t position = err.position
    if where == IN_ARENA_COPY:
        position = input_start + (err.position - payload_start)
    elif where == IN_ARENA_INFLATED:
        # Point .position at the compressed payload and say where inside the
        # decompressed bytes the bad field is.
        reason = f"{reason} (at byte {err.position - payload_start} of the batch's decompressed records)"
        position = input_start
    if err.code == E_CRC or err.code == E_CRC32:
        cls = CRCError
    else:
        cls = CorruptRecordError
    exc = cls(
        reason,
        position,
        err.batch_index,
        (<bytes>err.field).decode() if err.field != NULL else "",
        batch_position=err.batch_position,
        record_index=err.record_index,
    )
    if err.code == E_CRC or err.code == E_CRC32:
        exc.stored = err.a
        exc.computed = err.b
    return exc
