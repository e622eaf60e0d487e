# kbatch/_wire.pxd: Kafka's wire primitives for the compiled modules (cimported; no code of its own).
#
# provides: be16/be32/be64/le32 readers and put16/put32/put64 writers (big-endian, byte by byte,
#           never unaligned pointer casts; inline, so each module gets its own static copy and
#           no call between modules); the log entry, RecordBatch (magic 2) and legacy message
#           (magic 0/1) header offsets, each derived from the one before (Java's names:
#           DefaultRecordBatch, LegacyRecord, Records). kbatch/_wire.py has the same constants
#           for Python; the grammar itself is the docstring of kbatch/codec/_core.pyx.
# used by:  kbatch/codec/_core.pyx (its parts), kbatch/protocol/_kernel.pyx, kbatch/internal/_offsetkernel.pyx

from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t


cdef enum:
    # A log entry, any magic: the offset, then the number of bytes after the length field
    BASE_OFFSET_OFFSET = 0
    LENGTH_OFFSET = BASE_OFFSET_OFFSET + 8
    LOG_OVERHEAD = LENGTH_OFFSET + 4                   # baseOffset + batchLength
    # RecordBatch (magic 2), from the batch's first byte
    PARTITION_LEADER_EPOCH_OFFSET = LOG_OVERHEAD
    MAGIC_OFFSET = PARTITION_LEADER_EPOCH_OFFSET + 4   # the same place in a legacy entry
    HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1
    CRC_OFFSET = MAGIC_OFFSET + 1
    ATTRIBUTES_OFFSET = CRC_OFFSET + 4                 # the CRC-32C covers from here to the end
    LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + 2
    BASE_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + 4
    MAX_TIMESTAMP_OFFSET = BASE_TIMESTAMP_OFFSET + 8
    PRODUCER_ID_OFFSET = MAX_TIMESTAMP_OFFSET + 8
    PRODUCER_EPOCH_OFFSET = PRODUCER_ID_OFFSET + 8
    BASE_SEQUENCE_OFFSET = PRODUCER_EPOCH_OFFSET + 2
    RECORDS_COUNT_OFFSET = BASE_SEQUENCE_OFFSET + 4
    RECORDS_OFFSET = RECORDS_COUNT_OFFSET + 4
    BATCH_OVERHEAD = RECORDS_OFFSET                    # RecordBatch header
    # A legacy message (magic 0 and 1), from its crc (LOG_OVERHEAD into its entry)
    LEGACY_CRC_OFFSET = 0
    LEGACY_MAGIC_OFFSET = LEGACY_CRC_OFFSET + 4        # the CRC32 covers from here to the end
    LEGACY_ATTRIBUTES_OFFSET = LEGACY_MAGIC_OFFSET + 1
    LEGACY_TIMESTAMP_OFFSET = LEGACY_ATTRIBUTES_OFFSET + 1       # magic 1 only
    LEGACY_KEY_SIZE_OFFSET_V0 = LEGACY_ATTRIBUTES_OFFSET + 1
    LEGACY_KEY_SIZE_OFFSET_V1 = LEGACY_TIMESTAMP_OFFSET + 8
    RECORD_OVERHEAD_V0 = LEGACY_KEY_SIZE_OFFSET_V0 + 8  # smallest legal legacy message: null key and value
    RECORD_OVERHEAD_V1 = LEGACY_KEY_SIZE_OFFSET_V1 + 8


cdef inline uint16_t be16(const uint8_t* p) noexcept nogil:
    return <uint16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline uint32_t be32(const uint8_t* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | <uint32_t>p[3]


cdef inline uint32_t le32(const uint8_t* p) noexcept nogil:
    return <uint32_t>p[0] | (<uint32_t>p[1] << 8) | (<uint32_t>p[2] << 16) | (<uint32_t>p[3] << 24)


cdef inline uint64_t be64(const uint8_t* p) noexcept nogil:
    return (<uint64_t>be32(p) << 32) | <uint64_t>be32(p + 4)


cdef inline void put16(uint8_t* p, uint16_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 8)
    p[1] = <uint8_t>v


cdef inline void put32(uint8_t* p, uint32_t v) noexcept nogil:
    p[0] = <uint8_t>(v >> 24)
    p[1] = <uint8_t>(v >> 16)
    p[2] = <uint8_t>(v >> 8)
    p[3] = <uint8_t>v


cdef inline void put64(uint8_t* p, uint64_t v) noexcept nogil:
    put32(p, <uint32_t>(v >> 32))
    put32(p + 4, <uint32_t>v)
