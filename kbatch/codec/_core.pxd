# Declarations for kbatch/codec/_core.pyx.
#
# The three row structs below are the C views of RECORD_DTYPE, BATCH_DTYPE and
# HEADER_DTYPE. Their field order and types must match the NumPy dtypes built in
# _core.pyx field for field; _core.pyx checks offsets and sizes at import time
# and refuses to load if they ever drift apart. At the end: the helper thread
# (kbatch/codec/_core_threads.pxi), shared with kbatch/codec/_arrowkernels.pyx.

from cpython.pythread cimport PyThread_type_lock
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t


cdef struct record_t:
    int64_t offset
    int64_t timestamp
    int64_t key_start
    int64_t value_start
    int64_t headers_start
    int32_t key_length
    int32_t value_length
    int32_t headers_count
    int32_t batch
    int32_t sequence
    int8_t attributes
    uint8_t _pad[3]     # zeroed: rows never expose leftover heap bytes


cdef struct batch_t:
    int64_t position
    int64_t base_offset
    int64_t base_timestamp
    int64_t max_timestamp
    int64_t producer_id
    int64_t first_record
    int32_t batch_length
    int32_t partition_leader_epoch
    uint32_t crc
    int32_t last_offset_delta
    int32_t base_sequence
    int32_t record_count
    int32_t coordinator_epoch
    int16_t attributes
    int16_t producer_epoch
    int16_t control_type
    int8_t magic
    int8_t compression
    int8_t timestamp_type
    uint8_t is_transactional
    uint8_t is_control
    uint8_t has_delete_horizon


cdef struct header_t:
    int64_t key_start
    int64_t value_start
    int32_t key_length
    int32_t value_length


# Where and why parsing stopped. Filled inside nogil code, turned into a
# kbatch exception once the GIL is held again.
cdef struct error_t:
    int code
    int64_t position
    int64_t batch_index
    int64_t batch_position
    int64_t record_index
    const char* field
    int64_t a
    int64_t b


# A growable array of header rows, owned by C until handed to NumPy.
cdef struct header_buf_t:
    header_t* rows
    int64_t size
    int64_t capacity


cdef enum ErrorCode:
    E_OK = 0
    E_TRUNCATED_FIELD       # a field runs past the end of its record / batch
    E_VARINT_TOO_LONG       # varint > 5 bytes or varlong > 10 bytes
    E_ENTRY_TOO_SMALL       # outer length below the 14-byte legacy minimum
    E_BATCH_TOO_SMALL       # v2 batch below its 61-byte header
    E_UNKNOWN_MAGIC
    E_UNKNOWN_COMPRESSION
    E_NEGATIVE_COUNT
    E_COUNT_TOO_LARGE
    E_NEGATIVE_LENGTH
    E_RECORD_PAST_BATCH     # a record's length runs past the end of the batch
    E_RECORD_SIZE_MISMATCH  # fields end before the record's declared length
    E_FEWER_RECORDS         # batch bytes end before recordCount records
    E_MORE_RECORDS          # bytes left after recordCount records
    E_NEGATIVE_HEADER_COUNT
    E_HEADER_COUNT_TOO_LARGE
    E_NEGATIVE_HEADER_KEY
    E_CONTROL_KEY
    E_CRC
    E_NO_MEMORY
    E_LEGACY_TOO_SMALL      # a v0/v1 message below its fixed fields
    E_LEGACY_ZSTD           # zstd needs magic 2
    E_NO_INNER_RECORDS      # compressed wrapper with a null or empty value
    E_NESTED_COMPRESSION    # an inner message that is itself compressed
    E_INNER_MAGIC           # an inner message with magic other than 0/1
    E_WRAPPER_OFFSET        # v1 wrapper offset below its last inner offset
    E_CRC32                 # legacy CRC32 (IEEE) mismatch
    E_INNER_TRUNCATED       # an inner entry runs past the decompressed bytes


# The helper thread (kbatch/codec/_core_threads.pxi): a C thread of its own that runs one job at a
# time, a nogil C function or (with the GIL, taken on that thread) a Python callable. Declared
# here so that kbatch/codec/_arrowkernels.pyx shares the same helpers (take_helper, give_back).

ctypedef void (*work_fn)(void* arg) noexcept nogil


cdef struct worker_t:
    PyThread_type_lock ready   # released by submit: a job (or quit) is there
    PyThread_type_lock done    # released by the thread: the job is finished (or was taken back)
    work_fn fn
    void* arg
    uint64_t state             # JOB_*: the thread claims a job, or the caller takes it back, by CAS
    bint quit
    void* owner                # a Python job: the Helper (borrowed: the caller keeps it alive)
    void* tstate               # the thread's Python thread state, made at its first Python job


cdef class Helper:
    cdef worker_t* w      # NULL: jobs run inline, on the calling thread
    cdef long pid         # the process that started the thread (a forked child has none)
    cdef bint busy        # the thread's next release of ``done`` is still to be waited for
    cdef bint taken_back  # ... and it is only the wake-up of a job taken back (cancel)
    cdef bint kept        # from take_helper(kept=True): given back to the idle ones, not let go
    cdef object call      # a Python job: the callable, its value, its exception
    cdef object value
    cdef object error

    cdef void submit(self, work_fn fn, void* arg, bint keep_gil) noexcept
    cdef void wait(self, bint keep_gil) noexcept
    cdef bint cancel(self) noexcept
    cdef bint idle(self) noexcept
    cdef void close(self, bint keep_gil) noexcept
    cdef void start(self, object fn) noexcept
    cdef void run_call(self) noexcept


cdef Helper take_helper(bint threaded, bint kept=*)
cdef object give_back(Helper helper, bint keep_gil, bint take_back=*)
