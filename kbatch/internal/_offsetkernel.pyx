# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""The C loop behind :func:`kbatch.internal.consumer_offsets`: offset commits parsed in place.

The records it reads (``__consumer_offsets``, record types 0 and 1; big-endian)::

    key   = int16 recordType (0 or 1)
            int16 groupLength, group bytes
            int16 topicLength, topic bytes
            int32 partition                       (nothing after)
    value = null                                  (a tombstone)
          | int16 version (0-4)
            int64 offset
            int32 leaderEpoch                     (version 3+)
            metadata: int16 length, bytes         (versions 0-3)
                    | uvarint length+1, bytes     (version 4, compact string)
            int64 commitTimestamp
            int64 expireTimestamp                 (version 1 only)
            uvarint 0                             (version 4: no tagged fields)

One pass, no Python object, the GIL released. Per record ``status`` says what
was found: 0 an offset commit, 1 an offset commit tombstone, 2 a record of
another type (left to the general decoder), 3 an offset commit key whose value
is beyond this loop (tagged fields, a long varint, a bad length: the general
decoder decides, and names the error), 4 a key this loop cannot read (the
general decoder raises). For statuses 0, 1 and 3 the key is parsed and
``khash`` is a 64-bit FNV-1a hash of the key body (group, topic, partition);
:func:`last_per_key` then marks the last record of each key body.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcmp, memset

from kbatch._wire cimport be16 as _u16, be32 as _u32, be64 as _u64  # big-endian, shared with _core


cdef inline uint64_t fnv1a(const uint8_t* p, int64_t n) noexcept nogil:
    cdef uint64_t h = 0xcbf29ce484222325u
    cdef int64_t i
    for i in range(n):
        h = (h ^ p[i]) * 0x100000001b3u
    return h


def scan(const uint8_t[::1] data, const int64_t[:] key_start, const int32_t[:] key_length,
         const int64_t[:] value_start, const int32_t[:] value_length,
         int8_t[::1] status, uint64_t[::1] khash,
         int64_t[::1] group_start, int32_t[::1] group_length, int64_t[::1] topic_start, int32_t[::1] topic_length,
         int32_t[::1] partition, int16_t[::1] version, int64_t[::1] offset, int32_t[::1] leader_epoch,
         int64_t[::1] meta_start, int32_t[::1] meta_length, int64_t[::1] commit_timestamp,
         int64_t[::1] expire_timestamp):
    """Parse every record (see the module docstring); the outputs are filled in place."""
    cdef Py_ssize_t n = key_start.shape[0], i
    cdef int64_t size = data.shape[0], ks, vs, p, end, mlen, glen, tlen
    cdef int32_t kl, vl
    cdef int16_t rtype, ver
    cdef const uint8_t* b = &data[0] if size else NULL
    if (key_length.shape[0] != n or value_start.shape[0] != n or value_length.shape[0] != n
            or status.shape[0] != n or expire_timestamp.shape[0] != n):
        raise ValueError("columns differ in length")
    with nogil:
        for i in range(n):
            ks = key_start[i]
            kl = key_length[i]
            if kl < 2 or ks < 0 or ks + kl > size:
                status[i] = 4
                continue
            rtype = <int16_t>_u16(b + ks)
            if rtype != 0 and rtype != 1:
                status[i] = 2
                continue
            end = ks + kl
            p = ks + 2
            if p + 2 > end:
                status[i] = 4
                continue
            glen = <int16_t>_u16(b + p)
            if glen < 0 or p + 2 + glen + 2 > end:
                status[i] = 4
                continue
            group_start[i] = p + 2
            group_length[i] = <int32_t>glen
            p += 2 + glen
            tlen = <int16_t>_u16(b + p)
            if tlen < 0 or p + 2 + tlen + 4 != end:
                status[i] = 4
                continue
            topic_start[i] = p + 2
            topic_length[i] = <int32_t>tlen
            partition[i] = <int32_t>_u32(b + p + 2 + tlen)
            khash[i] = fnv1a(b + ks + 2, kl - 2)
            # defined values for tombstones and for what the general decoder takes over
            version[i] = -1
            offset[i] = 0
            leader_epoch[i] = -1
            meta_start[i] = 0
            meta_length[i] = 0
            commit_timestamp[i] = 0
            expire_timestamp[i] = -1
            vs = value_start[i]
            vl = value_length[i]
            if vl < 0:
                status[i] = 1
                continue
            status[i] = 3
            if vs < 0 or vs + vl > size or vl < 2:
                continue
            end = vs + vl
            ver = <int16_t>_u16(b + vs)
            version[i] = ver
            if ver < 0 or ver > 4:
                continue
            p = vs + 2
            if p + 8 > end:
                continue
            offset[i] = <int64_t>_u64(b + p)
            p += 8
            leader_epoch[i] = -1
            if ver >= 3:
                if p + 4 > end:
                    continue
                leader_epoch[i] = <int32_t>_u32(b + p)
                p += 4
            if ver <= 3:
                if p + 2 > end:
                    continue
                mlen = <int16_t>_u16(b + p)
                p += 2
            else:
                if p + 1 > end or b[p] & 0x80 or b[p] == 0:  # long varint or null: the general decoder
                    continue
                mlen = b[p] - 1
                p += 1
            if mlen < 0 or p + mlen + 8 > end:
                continue
            meta_start[i] = p
            meta_length[i] = <int32_t>mlen
            p += mlen
            commit_timestamp[i] = <int64_t>_u64(b + p)
            p += 8
            expire_timestamp[i] = -1
            if ver == 1:
                if p + 8 > end:
                    continue
                expire_timestamp[i] = <int64_t>_u64(b + p)
                p += 8
            if ver == 4:
                if p + 1 > end or b[p] != 0:  # tagged fields: the general decoder
                    continue
                p += 1
            if p != end:
                continue
            status[i] = 0



cdef struct slot_t:
    uint64_t hash
    int64_t start      # key body of the key's first row (compared on a probe: stays in cache)
    int64_t last1      # last row with this key, plus one; 0 = an empty slot
    int32_t length


def last_per_key(const uint8_t[::1] data, const int64_t[:] key_start, const int32_t[:] key_length,
                 const uint64_t[:] khash, uint8_t[::1] survivor) -> None:
    """Mark ``survivor[i] = 1`` where row ``i`` is the last row with its key body (exact).

    An open-addressing table keyed by ``khash`` whose probes compare the key bodies byte for
    byte (against the key's first row), so a hash collision costs a probe, never a wrong
    answer. The table lives in zeroed pages (calloc): only the slots used are touched.
    """
    cdef Py_ssize_t n = key_start.shape[0], i, cap = 16, mask, j
    cdef int64_t a, c, k, prev
    cdef int32_t la
    cdef uint64_t h
    cdef slot_t* table
    cdef slot_t* e
    cdef bint same
    cdef const uint8_t* b = &data[0] if data.shape[0] else NULL
    if key_length.shape[0] != n or khash.shape[0] != n or survivor.shape[0] != n:
        raise ValueError("columns differ in length")
    for i in range(n):
        a = key_start[i]
        if a < 0 or key_length[i] < 2 or a + key_length[i] > data.shape[0]:
            raise ValueError(f"key {i} ({a}, {key_length[i]}) reaches outside the data")
    while cap < 2 * n:
        cap *= 2
    table = <slot_t*>calloc(cap, sizeof(slot_t))
    if table == NULL:
        raise MemoryError()
    mask = cap - 1
    try:
        with nogil:
            memset(&survivor[0] if n else NULL, 0, n)
            for i in range(n):
                h = khash[i]
                j = <Py_ssize_t>(h & mask)
                la = key_length[i] - 2
                a = key_start[i] + 2
                while True:
                    e = &table[j]
                    if e.last1 == 0:
                        e.hash = h
                        e.start = a
                        e.length = la
                        e.last1 = i + 1
                        survivor[i] = 1
                        break
                    if e.hash == h and e.length == la:
                        c = e.start
                        same = memcmp(b + a, b + c, la) == 0
                        if same:
                            prev = e.last1 - 1
                            survivor[prev] = 0
                            survivor[i] = 1
                            e.last1 = i + 1
                            break
                    j = (j + 1) & mask
    finally:
        free(table)
