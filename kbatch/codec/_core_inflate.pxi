# _core_inflate.pxi: decompressing payloads into the arena, part of kbatch/codec/_core.pyx.
#
# provides: _decompress_payloads (a chunk's compressed payloads into the arena); zstd and
#           snappy exact sizing (_zstd_single_size, _snappy_block_size, _plain_pieces) and
#           _inflate_chunk (pieces on two threads); LZ4 frames in C (_lz4_load,
#           _lz4_frame_bound, _lz4_frame_into, _inflate_lz4_chunk); zstd frames in C the
#           same way (_zstd_load, _zstd_frame_bound, _zstd_frame_into); their switches and
#           counters for tests (_lz4_in_c, _zstd_in_c, _lz4_c_chunks, _zstd_c_chunks) are
#           among the test hooks in _core.pyx
# uses:     kbatch/_wire.pxd (readers), _core_memory (the arena), _core_threads (Helper),
#           kbatch/_threads.pxd (kb_take, kb_cut), kbatch.codec._compression (everything else, errors)

# Compressed chunks on two threads. Where a payload tells the exact size of
# each piece it decompresses to (a zstd frame that declares its content
# size, as kbatch and librdkafka write them, though Java's streaming frames
# do not; each block of xerial or raw snappy, whose size leads its data; a
# gzip member, by its trailer, checked once inflated), every piece can be
# given its place in the arena before it is decompressed. (Kafka's LZ4 frame
# does not say what its blocks decompress to: lz4 has a way of its own, below.)
# When every batch of a chunk is such a payload, the chunk's room is reserved
# at once and its pieces are decompressed by the calling thread and a helper
# thread together (cramjam runs snappy and inflate, and ctypes libzstd, without the GIL), each
# taking the next piece neither has taken. Anything else, or any failure, and
# the chunk goes through _compression one batch at a time, which says what
# is wrong. The zstd frame and xerial framing are those of the grammars in
# kbatch/codec/_zstd.py and _snappy.py; a raw snappy block starts with its
# uncompressed length (varint32, little-endian base 128).

cdef int64_t _zstd_single_size(const uint8_t* p, int64_t n) noexcept nogil:
    """The content size of a payload that is exactly one well-formed zstd frame
    declaring it (and whose blocks can produce it); -1 for anything else."""
    cdef int64_t pos = 5, fcs = 0, bound = 0, bsize, need
    cdef int fcs_bytes, hlen, btype, i
    cdef uint32_t bh
    cdef uint8_t fhd
    if n < 5 or _le32(p) != <uint32_t>0xFD2FB528:
        return -1
    fhd = p[4]
    if fhd & 0x08 or not (fhd >> 6 or fhd & 0x20):  # reserved bit set; no content size
        return -1
    fcs_bytes = (1 << (fhd >> 6)) if fhd >> 6 else 1  # 1 (single segment), 2, 4, 8
    hlen = (0 if fhd & 0x20 else 1) + ((1 << ((fhd & 3) - 1)) if fhd & 3 else 0) + fcs_bytes
    if n - pos < hlen:
        return -1
    for i in range(fcs_bytes):
        fcs |= <int64_t>p[pos + hlen - fcs_bytes + i] << (8 * i)
    if fcs_bytes == 2:
        fcs += 256
    if fcs < 0:
        return -1
    pos += hlen
    while True:
        if n - pos < 3:
            return -1
        bh = <uint32_t>p[pos] | <uint32_t>p[pos + 1] << 8 | <uint32_t>p[pos + 2] << 16
        pos += 3
        btype = (bh >> 1) & 3
        bsize = bh >> 3
        if btype == 3 or bsize > 131072:
            return -1
        need = 1 if btype == 1 else bsize
        bound += 131072 if btype == 2 else bsize
        if n - pos < need:
            return -1
        pos += need
        if bh & 1:
            break
    if fhd & 0x04:
        pos += 4
    if pos != n or fcs > bound:
        return -1
    return fcs


cdef int64_t _snappy_block_size(const uint8_t* p, int64_t n) noexcept nogil:
    """The declared size of a raw snappy block (-1: no valid length, or more
    than its compressed size can produce, as _compression checks it)."""
    cdef uint64_t size = 0
    cdef int i = 0
    while True:
        if i >= n or i == 5:
            return -1
        size |= <uint64_t>(p[i] & 0x7F) << (7 * i)
        if p[i] < 0x80:
            break
        i += 1
    if size > <uint64_t>0xFFFFFFFF or <int64_t>size > 22 * n + 8:  # _SNAPPY_MAX_RATIO
        return -1
    return <int64_t>size


cdef int64_t _plain_pieces(int codec, const uint8_t* p, int64_t n, int64_t src, list pieces,
                           object decompress) except -2:
    """Append a payload's pieces, ``(start, stop, size, decompress)`` with
    start/stop in the input (the payload starts at ``src``), to ``pieces``;
    their total size, or -1 when the payload is not plain (see above)."""
    cdef int64_t pos, length, size, total = 0
    if codec == 4:
        size = _zstd_single_size(p, n)
        if size >= 0:
            pieces.append((src, src + n, size, decompress))
        return size
    if codec == 1:  # taken at its trailer's word (ISIZE), as _gzip.gunzip's fast path
        if n < 18 or p[0] != 0x1F or p[1] != 0x8B or p[2] != 8:
            return -1
        size = <int64_t>_le32(p + n - 4)
        if size < 8192 or size > 1032 * n:  # _CRAMJAM_GZIP_MIN, _DEFLATE_MAX_RATIO
            return -1
        pieces.append((src, src + n, size, decompress))
        return size
    if codec != 2 or n == 0:
        return -1
    if n < 16 or memcmp(p, b"\x82SNAPPY\x00", 8) != 0:  # one raw block (librdkafka)
        size = _snappy_block_size(p, n)
        if size >= 0:
            pieces.append((src, src + n, size, decompress))
        return size
    if <int32_t>_be32(p + 8) < 1:  # SnappyCodec.MINIMUM_COMPATIBLE_VERSION
        return -1
    pos = 16
    while pos < n:
        if n - pos < 4:
            return -1
        length = <int32_t>_be32(p + pos)
        pos += 4
        if length <= 0 or length > n - pos:  # (and a second xerial header: inline)
            return -1
        size = _snappy_block_size(p + pos, length)
        if size < 0:
            return -1
        pieces.append((src + pos, src + pos + length, size, decompress))
        total += size
        pos += length
    return total


class _Pieces:
    """Payload pieces to decompress into their places, taken one at a time by either thread."""

    def __init__(self, items):
        self.items = items  # (decompress_into, src, dst)
        self.order = iter(range(len(items)))  # next() on it is atomic under the GIL
        self.failed = False

    def run(self):
        for i in self.order:
            if self.failed:
                return
            decompress, src, dst = self.items[i]
            try:
                if decompress(src, dst) != len(dst):
                    self.failed = True
            except Exception:
                self.failed = True


#: Codec id -> decompress-into-a-buffer, for the payloads _plain_pieces takes: cramjam's,
#: and for zstd _compression's (libzstd's one-shot decoder, no window besides the output),
#: set at the first use.
_DECOMPRESS_INTO = {1: _cramjam.gzip.decompress_into, 2: _cramjam.snappy.decompress_raw_into, 4: None}


cdef bint _inflate_chunk(object mv, const uint8_t* base, batch_t* bp, int64_t first, int64_t end,
                         int64_t[::1] pstart, int64_t[::1] pend, object arena, object limit,
                         const uint8_t* skip) except -1:
    """Batches ``first .. end`` decompressed on two threads when each payload is
    plain (see above); False, the arena as it was, if not."""
    cdef int64_t k, size, total = 0
    cdef list pieces = [], spans = []
    if _DECOMPRESS_INTO[4] is None:
        _DECOMPRESS_INTO[4] = _compression.zstd_decompress_into
    for k in range(first, end):
        if skip != NULL and skip[k]:
            continue
        if bp[k].magic != 2 or bp[k].compression not in _DECOMPRESS_INTO:
            return False
        size = _plain_pieces(bp[k].compression, base + pstart[k], pend[k] - pstart[k], pstart[k], pieces,
                             _DECOMPRESS_INTO[bp[k].compression])
        if size < 0:
            return False
        spans.append((k, total, size))
        total += size
    if len(pieces) < 2 or total > limit - arena.size:
        return False
    start = arena.size
    with arena.reserve(total) as out:
        items = []
        at = 0
        for a, b, size, decompress in pieces:
            items.append((decompress, mv[a:b], out[at:at + size]))
            at += size
        work = _Pieces(items)
        helper = take_helper(True)
        helper.start(work.run)
        try:
            work.run()
        finally:
            # Not started yet: taken back, nothing left for it to do. Started: it writes
            # into ``out``, so waited for whatever happens.
            give_back(helper, False, True)
            del items, work.items
    if work.failed:
        return False
    for k, at, size in spans:
        pstart[k] = start + at
        pend[k] = start + at + size
    arena.commit(total)
    return True


# LZ4 frames in C. Kafka's LZ4 frame (kbatch/codec/_lz4.py has its grammar)
# does not say what its blocks decompress to, so an lz4 chunk cannot be laid
# out piece by piece as above. But no block decompresses to more than the
# frame's maximum block size, which bounds each batch. The calling thread
# takes a chunk's batches from the front, each right behind the one before;
# a helper thread takes them from the back, each into its slot (the bounds of
# the batches before it); then the back's batches are moved down behind the
# front's (a memmove of what the back did, in cache; none when every frame
# declares its content size, which is then its exact slot). Every v2 frame of
# independent blocks takes this path, as Java and librdkafka write them (FLG
# 0x60), kafka-python (0x68: a content size, skipped as Java does) and aiokafka
# (0x70: block checksums), and each is checked as _compression checks it: the
# descriptor's HC; with any checksum flag (where _compression hands the frame
# to liblz4's frame decoder) every block checksum, the content checksum and
# a content size. The blocks go through liblz4's LZ4_decompress_safe, which
# never reads or writes outside the buffers it is given, and the checksums
# through its XXH32, both in the lz4 package's own extension modules (which
# export liblz4). Without them, for anything else (magic 0 and 1, dependent
# blocks, a dictionary id) or on any failure, _compression decodes the chunk
# one block at a time and says what is wrong.

ctypedef int (*lz4_decompress_fn)(const char* src, char* dst, int src_size, int dst_capacity) noexcept nogil
ctypedef uint32_t (*xxh32_fn)(const void* data, size_t size, uint32_t seed) noexcept nogil

cdef lz4_decompress_fn _lz4_found = NULL       # what _lz4_load found
cdef lz4_decompress_fn _lz4_decompress = NULL  # what is used (tests turn it off)
cdef xxh32_fn _xxh32 = NULL
cdef bint _lz4_tried = False                   # _lz4_load has run

# The helper thread is woken for each chunk, and the calling thread waits for
# it at the chunk's end. When no core is free for it (a busy machine), it has
# not even started by then: the calling thread has done every batch and then
# waits a scheduler's delay for a thread that finds nothing left to do. So
# after a chunk in which the back took no batch, the next _LZ4_SOLO_CHUNKS
# chunks are decompressed by the calling thread alone, then the helper is
# tried again: a busy machine pays that delay once per so many chunks, not
# once per chunk; on an idle one the back always takes its share.
_LZ4_SOLO_CHUNKS = 8
_lz4_solo_left = 0  # chunks still to do without the helper (a module global: tests set it)


def _lz4_load():
    """Find liblz4's LZ4_decompress_safe and XXH32 in the lz4 package; check both.

    Through ctypes (its dlopen), on the first lz4 chunk: called from here,
    dlopen/dlsym would tie a wheel built on glibc 2.34 or later to that glibc.
    """
    global _lz4_found, _lz4_decompress, _lz4_tried, _xxh32
    _lz4_tried = True
    try:
        import ctypes
        import lz4.block
        import lz4.block._block as block_module
        import lz4.frame._frame as frame_module

        def address(module, name):
            lib = ctypes.CDLL(module.__file__, mode=os.RTLD_NOW | os.RTLD_NOLOAD)  # loaded already
            return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0

        decompress_at = address(block_module, "LZ4_decompress_safe")
        xxh32_at = address(frame_module, "XXH32")
    except (ImportError, OSError, AttributeError):  # no ctypes, no such module or symbol
        return
    if not decompress_at or not xxh32_at:
        return
    cdef lz4_decompress_fn f = <lz4_decompress_fn><uintptr_t>decompress_at
    cdef xxh32_fn h = <xxh32_fn><uintptr_t>xxh32_at
    cdef bytes raw = b"kbatch: LZ4_decompress_safe " * 40
    cdef bytes block = lz4.block.compress(raw, store_size=False)
    cdef bytearray out = bytearray(len(raw) + 16)
    cdef char* o = out
    if f(block, o, len(block), len(out)) != len(raw) or bytes(out[:len(raw)]) != raw:
        return
    if (h(<const char*>raw, 10, 0) >> 8) & 0xFF != _compression.lz4_hc(raw[:10]):
        return
    _xxh32 = h
    _lz4_found = _lz4_decompress = f


cdef enum:
    LZ4_BLOCK_CHECKSUM = 0x10    # FLG bits
    LZ4_CONTENT_SIZE = 0x08
    LZ4_CONTENT_CHECKSUM = 0x04


# zstd frames in C, the same way (on one thread; on two, when a frame does
# not declare its content size, else _inflate_chunk's pieces take them first):
# the chunk's batches from both ends, each
# through libzstd's one-shot decoder (ZSTD_decompressDCtx, the one
# _compression uses, found through it) straight into the arena, one
# context per thread. A batch's room is the frame's content size when it
# declares one (libzstd then holds the output to it), else what its blocks
# can produce (Java's and librdkafka's streamed frames); libzstd never
# writes past the room it is given nor reads past the payload, and checks
# the frame's checksum if it has one. Anything but exactly one frame
# (several frames, skippable frames), or any failure, and the chunk goes
# through _compression, which says what is wrong.

ctypedef void* (*zstd_create_fn)() noexcept nogil
ctypedef size_t (*zstd_free_fn)(void* dctx) noexcept nogil
ctypedef size_t (*zstd_decompress_fn)(void* dctx, void* dst, size_t capacity, const void* src,
                                      size_t size) noexcept nogil
ctypedef unsigned (*zstd_is_error_fn)(size_t code) noexcept nogil

cdef zstd_create_fn _zstd_create = NULL
cdef zstd_free_fn _zstd_free = NULL
cdef zstd_decompress_fn _zstd_decompress = NULL  # NULL: not found (or turned off by tests)
cdef zstd_decompress_fn _zstd_found = NULL
cdef zstd_is_error_fn _zstd_is_error = NULL
cdef bint _zstd_tried = False


def _zstd_load():
    """libzstd's one-shot decoder from kbatch.codec._compression (checked there)."""
    global _zstd_create, _zstd_free, _zstd_decompress, _zstd_found, _zstd_is_error, _zstd_tried
    _zstd_tried = True
    found = _compression.zstd_c_functions()
    if found is None:
        return
    create, free_, decompress, is_error = found
    _zstd_create = <zstd_create_fn><uintptr_t>create
    _zstd_free = <zstd_free_fn><uintptr_t>free_
    _zstd_is_error = <zstd_is_error_fn><uintptr_t>is_error
    _zstd_found = _zstd_decompress = <zstd_decompress_fn><uintptr_t>decompress


cdef int64_t _zstd_frame_bound(const uint8_t* p, int64_t n) noexcept nogil:
    """Room for a payload that is exactly one zstd frame: its content size if it
    declares one, else what its blocks can produce; -1 for anything else."""
    cdef int64_t pos = 5, bound = 0, bsize, need
    cdef int hlen, btype
    cdef uint32_t bh
    cdef uint8_t fhd
    if n < 5 or _le32(p) != <uint32_t>0xFD2FB528:
        return -1
    fhd = p[4]
    if fhd & 0x08:  # reserved bit
        return -1
    if fhd >> 6 or fhd & 0x20:  # a content size: _zstd_single_size checks the rest
        return _zstd_single_size(p, n)
    hlen = 1 + ((1 << ((fhd & 3) - 1)) if fhd & 3 else 0)  # window descriptor, dictionary id
    if n - pos < hlen:
        return -1
    pos += hlen
    while True:
        if n - pos < 3:
            return -1
        bh = <uint32_t>p[pos] | <uint32_t>p[pos + 1] << 8 | <uint32_t>p[pos + 2] << 16
        pos += 3
        btype = (bh >> 1) & 3
        bsize = bh >> 3
        if btype == 3 or bsize > 131072:
            return -1
        need = 1 if btype == 1 else bsize
        bound += 131072 if btype == 2 else bsize
        if n - pos < need:
            return -1
        pos += need
        if bh & 1:
            break
    if fhd & 0x04:
        pos += 4
    return bound if pos == n else -1


cdef int64_t _zstd_frame_into(void* dctx, const uint8_t* p, int64_t n, uint8_t* out, int64_t room) noexcept nogil:
    """Decompress a payload _zstd_frame_bound took into ``out`` (``room`` bytes);
    the bytes written, or -1 if libzstd fails (corrupt, or more than ``room``)."""
    cdef size_t got = _zstd_decompress(dctx, out, <size_t>room, p, <size_t>n)
    if _zstd_is_error(got) or got > <size_t>room:
        return -1
    return <int64_t>got


cdef int64_t _lz4_frame_bound(const uint8_t* p, int64_t n) noexcept nogil:
    """A bound on what an LZ4 frame of independent blocks decompresses to, its
    descriptor and framing checked; -1 for anything else (see above)."""
    cdef int64_t pos, bound = 0, size, max_block, tail
    cdef uint32_t word
    cdef uint8_t flg, bd
    if n < 11 or _le32(p) != 0x184D2204:
        return -1
    flg = p[4]
    bd = p[5]
    if flg >> 6 != 1 or flg & 0x03 or not flg & 0x20 or bd & 0x8F or bd >> 4 < 4:
        return -1
    pos = 15 if flg & LZ4_CONTENT_SIZE else 7
    if n < pos + 4 or (_xxh32(p + 4, pos - 5, 0) >> 8) & 0xFF != p[pos - 1]:
        return -1
    max_block = <int64_t>1 << (2 * (bd >> 4) + 8)
    tail = 4 if flg & LZ4_BLOCK_CHECKSUM else 0
    while True:
        if n - pos < 4:
            return -1
        word = _le32(p + pos)
        pos += 4
        size = word & 0x7FFFFFFF
        if size == 0:  # EndMark: nothing may follow it (_compression says what is wrong)
            if pos + (4 if flg & LZ4_CONTENT_CHECKSUM else 0) != n:
                return -1
            return bound
        if size > max_block or size + tail > n - pos:
            return -1
        bound += size if word >> 31 else max_block  # stored: as it is
        pos += size + tail


cdef int64_t _lz4_declared_size(const uint8_t* p, int64_t n) noexcept nogil:
    """The content size an LZ4 frame's descriptor declares (FLG 0x08), or -1.

    A hint only: a frame without checksums is not held to it (as Java), so it
    bounds a slot (a frame larger than it fails there, safely, and the chunk
    goes to _compression) but never decides what a frame holds."""
    if n < 15 or not p[4] & LZ4_CONTENT_SIZE or _le32(p + 10) != 0:
        return -1
    return <int64_t>_le32(p + 6)


cdef int64_t _lz4_frame_into(const uint8_t* p, int64_t n, uint8_t* out, int64_t room) noexcept nogil:
    """Decompress a frame of ``n`` bytes that _lz4_frame_bound took into ``out``
    (``room``: its bound); the bytes written, or -1 if a block or a checksum is
    bad. Every field is read once here and checked against ``n`` and ``room``
    again: the payload may be another thread's ``bytearray``, rewritten since
    _lz4_frame_bound read it (then -1 or garbage, never a read or write
    outside the two buffers)."""
    cdef uint8_t flg
    cdef int64_t pos, at = 0, size, tail
    cdef int max_block, got
    cdef bint checked
    cdef uint32_t word
    if n < 11:
        return -1
    flg = p[4]
    max_block = 1 << (2 * ((p[5] >> 4) & 7) + 8)
    pos = 15 if flg & LZ4_CONTENT_SIZE else 7
    tail = 4 if flg & LZ4_BLOCK_CHECKSUM else 0
    checked = (flg & (LZ4_BLOCK_CHECKSUM | LZ4_CONTENT_CHECKSUM)) != 0
    while True:
        if n - pos < 4:
            return -1
        word = _le32(p + pos)
        pos += 4
        size = word & 0x7FFFFFFF
        if size == 0:
            break
        if size + tail > n - pos:
            return -1
        if tail and _xxh32(p + pos, size, 0) != _le32(p + pos + size):
            return -1
        if word >> 31:  # stored uncompressed
            if size > room - at:
                return -1
            memcpy(out + at, p + pos, size)
            at += size
        else:
            got = _lz4_decompress(<const char*>p + pos, <char*>out + at, <int>size,
                                  <int>min(<int64_t>max_block, room - at))
            if got < 0:
                return -1
            at += got
        pos += size + tail
    if flg & LZ4_CONTENT_CHECKSUM and (n - pos < 4 or _xxh32(out, at, 0) != _le32(p + pos)):
        return -1
    # liblz4's frame decoder (_compression's path for frames with checksums) holds
    # the output to a content size; the one without checksums skips it, as Java does.
    if checked and flg & LZ4_CONTENT_SIZE and <uint64_t>at != (<uint64_t>_le32(p + 6) | (<uint64_t>_le32(p + 10) << 32)):
        return -1
    return at


cdef struct lz4_job_t:
    const uint8_t* src      # the input
    const int64_t* pstart   # payloads in the input, by batch
    const int64_t* pend
    const uint8_t* skip     # by batch; may be NULL
    int64_t first           # the chunk's first batch; what follows is by batch - first
    uint64_t range          # batches not yet taken (see kb_take)
    uint8_t* out            # the chunk's room
    const int64_t* slot     # where a batch taken from the back goes (the bounds before it)
    int64_t* at             # where each batch went
    int64_t* size           # what each decompressed to
    int64_t used            # the front's bytes, one batch after the other from ``out``
    int64_t back_first      # the first batch the back took
    bint front_failed, back_failed
    int codec               # 3: LZ4 frames, 4: zstd frames
    void* front_dctx        # zstd: each side's context
    void* back_dctx


cdef bint _lz4_take(lz4_job_t* job, bint from_back) noexcept nogil:
    """Decompress batches taken from one end of the chunk until none is left;
    False (and the rest of the range dropped) at a corrupt block."""
    cdef int64_t i, k, got
    cdef uint8_t* dst
    i = kb_take(&job.range, from_back)
    while i >= 0:
        k = job.first + i
        if job.skip == NULL or not job.skip[k]:
            dst = job.out + (job.slot[i] if from_back else job.used)
            if job.codec == 3:
                got = _lz4_frame_into(job.src + job.pstart[k], job.pend[k] - job.pstart[k], dst,
                                      job.slot[i + 1] - job.slot[i])
            else:
                got = _zstd_frame_into(job.back_dctx if from_back else job.front_dctx,
                                       job.src + job.pstart[k], job.pend[k] - job.pstart[k], dst,
                                       job.slot[i + 1] - job.slot[i])
            if got < 0:
                kb_cut(&job.range, 0)
                return False
            job.at[i] = dst - job.out
            job.size[i] = got
            if not from_back:
                job.used += got
        if from_back:
            job.back_first = i
        i = kb_take(&job.range, from_back)
    return True


cdef void _lz4_back(void* arg) noexcept nogil:
    cdef lz4_job_t* job = <lz4_job_t*>arg
    job.back_failed = not _lz4_take(job, True)


cdef bint _inflate_lz4_chunk(const uint8_t* src, batch_t* bp, int64_t first, int64_t end,
                             int64_t[::1] pstart, int64_t[::1] pend, object arena, object limit,
                             const uint8_t* skip, bint two) except -1:
    """Batches ``first .. end`` decompressed in C when each is a v2 LZ4 frame of
    independent blocks, or each a v2 payload of one zstd frame (see above), on
    two threads with ``two``; False, the arena as it was, if not."""
    global _lz4_c_chunks, _zstd_c_chunks, _lz4_solo_left
    cdef int64_t i, k, bound, declared, count = end - first, start, used = 0
    cdef int64_t[::1] slot
    cdef int64_t[::1] at
    cdef int64_t[::1] size
    cdef lz4_job_t job
    cdef Helper helper = None
    cdef uint8_t[::1] room
    cdef int codec = 0
    for k in range(first, end):
        if skip == NULL or not skip[k]:
            codec = bp[k].compression
            break
    if codec == 3:
        if not _lz4_tried:
            _lz4_load()
        if _lz4_decompress == NULL:
            return False
    elif codec == 4:
        if not _zstd_tried:
            _zstd_load()
        if _zstd_decompress == NULL:
            return False
    else:
        return False
    slot = np.empty(count + 1, np.int64)
    at = np.zeros(count, np.int64)
    size = np.zeros(count, np.int64)
    slot[0] = 0
    for i in range(count):
        k = first + i
        bound = 0
        if skip == NULL or not skip[k]:
            if bp[k].magic != 2 or bp[k].compression != codec:
                return False
            if codec == 3:
                bound = _lz4_frame_bound(src + pstart[k], pend[k] - pstart[k])
                # a declared size (kafka-python) is the exact slot: the back's batches
                # then land where the front's end, and need no move
                declared = _lz4_declared_size(src + pstart[k], pend[k] - pstart[k])
                if 0 < declared < bound:
                    bound = declared
            else:
                bound = _zstd_frame_bound(src + pstart[k], pend[k] - pstart[k])
            if bound < 0:
                return False
        slot[i + 1] = slot[i] + bound
    if slot[count] == 0 or slot[count] > limit - arena.size:
        return False  # nothing to write; or too much, maybe not in fact: _compression knows
    memset(&job, 0, sizeof(job))
    job.src = src
    job.pstart = &pstart[0]
    job.pend = &pend[0]
    job.skip = skip
    job.first = first
    job.range = <uint64_t>count << 32
    job.slot = &slot[0]
    job.at = &at[0]
    job.size = &size[0]
    job.back_first = count
    job.codec = codec
    if two and count > 1:
        if _lz4_solo_left > 0:
            _lz4_solo_left -= 1
        else:
            helper = take_helper(True)
    if codec == 4:
        job.front_dctx = _zstd_create()
        job.back_dctx = _zstd_create() if helper is not None else NULL
        if job.front_dctx == NULL or (helper is not None and job.back_dctx == NULL):
            _zstd_free_contexts(&job)
            if helper is not None:
                give_back(helper, False)
            raise MemoryError()
    start = arena.size
    try:
        with arena.reserve(slot[count]) as out:
            room = out
            job.out = &room[0]
            if helper is not None:
                helper.submit(_lz4_back, &job, False)
            with nogil:
                job.front_failed = not _lz4_take(&job, False)
            if helper is not None:
                give_back(helper, False, True)  # (not started: the front took every batch)
                if job.back_first == count:  # the back took nothing: no core was free for it
                    _lz4_solo_left = _LZ4_SOLO_CHUNKS
            used = job.used
            if not (job.front_failed or job.back_failed):
                # The back's batches, each at its slot, moved down behind the front's.
                for i in range(job.back_first, count):
                    if at[i] != used:  # (exact slots: already in place)
                        memmove(job.out + used, job.out + at[i], size[i])
                        at[i] = used
                    used += size[i]
            room = None  # (before ``out`` is released)
    finally:
        _zstd_free_contexts(&job)
    if job.front_failed or job.back_failed:
        return False
    for i in range(count):
        k = first + i
        if skip == NULL or not skip[k]:
            pstart[k] = start + at[i]
            pend[k] = pstart[k] + size[i]
    arena.commit(used)
    if codec == 3:  # test hooks' counters (_core.pyx)
        _lz4_c_chunks += 1
    else:
        _zstd_c_chunks += 1
    return True


cdef void _zstd_free_contexts(lz4_job_t* job) noexcept:
    if job.front_dctx != NULL:
        _zstd_free(job.front_dctx)
        job.front_dctx = NULL
    if job.back_dctx != NULL:
        _zstd_free(job.back_dctx)
        job.back_dctx = NULL


cdef tuple _decompress_payloads(object mv, const uint8_t* base, batch_t* bp, int64_t first, int64_t end,
                                int64_t[::1] pstart, int64_t[::1] pend, object arena, object limit,
                                const uint8_t* skip, bint two):
    """Append batches ``first .. end``'s records to the arena, decompressed.

    Uncompressed batches are copied so that every payload of the buffer lives
    in one place. ``pstart``/``pend`` become offsets into the arena. Batches
    with ``skip[k]`` set (``skip`` may be NULL) are left out. Returns
    ``(end or the first bad batch, exception or None)``.
    """
    cdef int64_t k, start, stop
    # Two threads: sized pieces first (zstd with a content size too), whose helper is let go
    # when it has not started by the time the calling thread is done (a busy machine).
    if two and _inflate_chunk(mv, base, bp, first, end, pstart, pend, arena, limit, skip):
        return end, None
    if _inflate_lz4_chunk(base, bp, first, end, pstart, pend, arena, limit, skip, two):
        return end, None  # LZ4 frames, or zstd frames (one thread, or without a content size)
    for k in range(first, end):
        if skip != NULL and skip[k]:
            continue
        start = pstart[k]
        stop = pend[k]
        pstart[k] = arena.size
        try:
            _compression.decompress_into(bp[k].compression, mv[start:stop], arena, limit, magic=bp[k].magic)
        except KBatchError as cause:
            # (a codec error that knows its place in the payload has it as its position)
            exc = type(cause)(cause.reason, start + max(cause.position, 0), k, cause.field or "records",
                              batch_position=bp[k].position)
            exc.__cause__ = cause
            return k, exc
        pend[k] = arena.size
    return end, None
