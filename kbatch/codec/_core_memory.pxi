# _core_memory.pxi: spare blocks and the arena, part of kbatch/codec/_core.pyx.
#
# provides: _take_block/_give_block (blocks kept between calls), _Block (a growable arena
#           that becomes a table's ``data``), _arena_block, _rows_array (C rows -> NumPy,
#           no copy), _row_ptr; tests see the spares through _spare_sizes and
#           _release_spare, test hooks in _core.pyx
# uses:     nothing of the other parts (libc, mmap/mremap on Linux)

# Spare blocks. Decompressed payloads of one decode go to one arena, which
# becomes the table's ``data``, and an encode gathers its records into C rows
# first; these are usually larger than malloc's mmap threshold, so each call
# would get fresh pages from the kernel and pay a page fault for every 4 KiB
# it writes. Instead, freed blocks are kept, pages and all, for the next
# call, like a malloc arena keeps freed memory: at most SPARE_BLOCKS of them
# and SPARE_MAX_BYTES in all, the largest kept. A block is taken and given
# back with the GIL held.
#
# A block grows in place: on Linux every block of BLOCK_MAP_MIN bytes or more
# is a mapping of its own, and growing it is one mremap, which moves its pages
# (page tables, not bytes) and touches none; below that, realloc. So a
# decode's arena never holds its bytes twice while it grows: its resident
# memory is what has been written to it, whatever its capacity (see
# _Block.resize and docs/DESIGN.md "Memory bound").

cdef extern from *:
    """
    #if defined(__linux__)
    #include <sys/mman.h>
    #define KB_CAN_MAP 1
    static void* kb_map(size_t n) {
        void* p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    static void* kb_remap(void* p, size_t old, size_t n) {
        void* q = mremap(p, old, n, MREMAP_MAYMOVE);
        return q == MAP_FAILED ? NULL : q;
    }
    static void kb_unmap(void* p, size_t n) { (void)munmap(p, n); }
    #else
    #define KB_CAN_MAP 0
    static void* kb_map(size_t n) { (void)n; return NULL; }
    static void* kb_remap(void* p, size_t old, size_t n) { (void)p; (void)old; (void)n; return NULL; }
    static void kb_unmap(void* p, size_t n) { (void)p; (void)n; }
    #endif
    """
    bint KB_CAN_MAP
    void* kb_map(size_t n) noexcept nogil
    void* kb_remap(void* p, size_t old, size_t n) noexcept nogil
    void kb_unmap(void* p, size_t n) noexcept nogil

cdef enum:
    BLOCK_HEADER = 64                 # capacity, mapped length (0: malloc'd); the data 64-byte aligned
    SPARE_BLOCKS = 4
    SPARE_MAX_BYTES = 256 * 1024 * 1024
    BLOCK_MAP_MIN = 1 << 20           # from this size on (with the header) a block is a mapping (Linux)
    PAGE_BYTES = 4096                 # mappings are made in whole pages (of at least this size)

cdef uint8_t* _spares[SPARE_BLOCKS]   # blocks (not their data), NULL = empty slot


cdef inline size_t _block_capacity(uint8_t* block) noexcept nogil:
    return (<size_t*>block)[0]


cdef inline size_t _block_mapped(uint8_t* block) noexcept nogil:
    return (<size_t*>block)[1]


cdef void _free_block(uint8_t* block) noexcept nogil:
    """Free a block (not its data): unmapped or freed, as it was made."""
    if block == NULL:
        return
    if _block_mapped(block):
        kb_unmap(block, _block_mapped(block))
    else:
        free(block)


cdef uint8_t* _new_block(size_t n) noexcept nogil:
    """A new block with room for ``n`` bytes (its data); NULL when out of memory."""
    cdef uint8_t* block
    cdef size_t total
    if n > SIZE_MAX - BLOCK_HEADER - PAGE_BYTES:
        return NULL
    total = n + BLOCK_HEADER
    if KB_CAN_MAP and total >= BLOCK_MAP_MIN:
        total = (total + PAGE_BYTES - 1) & ~(<size_t>PAGE_BYTES - 1)
        block = <uint8_t*>kb_map(total)
        if block == NULL:
            return NULL
        (<size_t*>block)[0] = n
        (<size_t*>block)[1] = total
        return block
    block = <uint8_t*>malloc(total)
    if block == NULL:
        return NULL
    (<size_t*>block)[0] = n
    (<size_t*>block)[1] = 0
    return block


cdef uint8_t* _grown_block(uint8_t* block, size_t n) noexcept nogil:
    """``block`` with room for ``n`` bytes of data, its bytes kept (it may have
    moved); NULL, ``block`` untouched, when out of memory. A mapping grows
    by mremap, its pages moved, not copied; a malloc'd block by realloc, or,
    once it reaches BLOCK_MAP_MIN, by a copy (of less than that) into a
    new mapping."""
    cdef uint8_t* grown
    cdef size_t total
    if n <= _block_capacity(block):
        return block
    if n > SIZE_MAX - BLOCK_HEADER - PAGE_BYTES:
        return NULL
    total = n + BLOCK_HEADER
    if _block_mapped(block):
        total = (total + PAGE_BYTES - 1) & ~(<size_t>PAGE_BYTES - 1)
        grown = <uint8_t*>kb_remap(block, _block_mapped(block), total)
        if grown == NULL:
            return NULL
        (<size_t*>grown)[0] = n
        (<size_t*>grown)[1] = total
        return grown
    if KB_CAN_MAP and total >= BLOCK_MAP_MIN:
        grown = _new_block(n)
        if grown == NULL:
            return NULL
        memcpy(grown + BLOCK_HEADER, block + BLOCK_HEADER, _block_capacity(block))
        free(block)
        return grown
    grown = <uint8_t*>realloc(block, total)
    if grown == NULL:
        return NULL
    (<size_t*>grown)[0] = n
    return grown


cdef uint8_t* _alloc_block(size_t n) noexcept:
    """The data of a block of at least ``n`` bytes: the smallest spare that fits,
    else a new one; NULL when out of memory (GIL held)."""
    cdef int i, best = -1
    cdef uint8_t* block
    if n == 0:
        n = 1
    for i in range(SPARE_BLOCKS):
        if _spares[i] != NULL and _block_capacity(_spares[i]) >= n and (
                best < 0 or _block_capacity(_spares[i]) < _block_capacity(_spares[best])):
            best = i
    if best >= 0:
        block = _spares[best]
        _spares[best] = NULL
        return block + BLOCK_HEADER
    block = _new_block(n)
    if block == NULL:
        return NULL
    return block + BLOCK_HEADER


cdef inline uint8_t* _take_block(size_t n) except NULL:
    """:func:`_alloc_block`, raising MemoryError."""
    cdef uint8_t* data = _alloc_block(n)
    if data == NULL:
        raise MemoryError()
    return data


cdef void _give_block(void* data) noexcept:
    """Take back a block's data: kept as a spare, in place of smaller ones if need be, or freed."""
    cdef uint8_t* block
    cdef size_t kept = 0
    cdef int i, free_slot = -1, smallest
    if data == NULL:
        return
    block = <uint8_t*>data - BLOCK_HEADER
    if _block_capacity(block) > SPARE_MAX_BYTES:
        _free_block(block)
        return
    for i in range(SPARE_BLOCKS):
        if _spares[i] != NULL:
            kept += _block_capacity(_spares[i])
        elif free_slot < 0:
            free_slot = i
    while free_slot < 0 or kept + _block_capacity(block) > SPARE_MAX_BYTES:
        smallest = -1
        for i in range(SPARE_BLOCKS):
            if _spares[i] != NULL and (smallest < 0 or _block_capacity(_spares[i]) < _block_capacity(_spares[smallest])):
                smallest = i
        if smallest < 0 or _block_capacity(_spares[smallest]) >= _block_capacity(block):
            _free_block(block)  # no smaller spare to make room for it
            return
        kept -= _block_capacity(_spares[smallest])
        _free_block(_spares[smallest])
        _spares[smallest] = NULL
        free_slot = smallest
    _spares[free_slot] = block


@cython.final
cdef class _Block:
    """A writable buffer of bytes from the spare blocks, growable in place.

    A decode's arena (``kbatch.codec._compression.Arena`` calls :meth:`resize` to
    grow it). Its data goes back to the spares when the block is freed.
    Exported through the buffer protocol (uint8, one dimension); while any
    export is alive (a memoryview, a NumPy array over it) it cannot move,
    and :meth:`resize` refuses, as ``bytearray`` does.
    """

    cdef uint8_t* data
    cdef Py_ssize_t shape[1]
    cdef Py_ssize_t exports

    def __cinit__(self, Py_ssize_t n):
        self.data = _take_block(<size_t>max(n, 1))
        self.shape[0] = <Py_ssize_t>_block_capacity(self.data - BLOCK_HEADER)
        self.exports = 0

    def __dealloc__(self):
        _give_block(self.data)
        self.data = NULL

    def __len__(self):
        return self.shape[0]

    def __getbuffer__(self, Py_buffer* view, int flags):
        view.buf = self.data
        view.obj = self
        view.len = self.shape[0]
        view.readonly = 0
        view.itemsize = 1
        view.format = NULL
        if flags & PyBUF_FORMAT:
            view.format = b"B"
        view.ndim = 1
        view.shape = self.shape if flags & PyBUF_ND else NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL
        self.exports += 1

    def __releasebuffer__(self, Py_buffer* view):
        self.exports -= 1

    def resize(self, Py_ssize_t n):
        """Grow to at least ``n`` bytes in place, the bytes kept (never shrinks).

        Raises
        ------
        BufferError
            An export is alive (the block cannot move under it).
        MemoryError
            Out of memory (the block is as it was).
        """
        cdef uint8_t* grown
        if n <= self.shape[0]:
            return
        if self.exports:
            raise BufferError("the block is exported: it cannot be resized")
        grown = _grown_block(self.data - BLOCK_HEADER, <size_t>n)
        if grown == NULL:
            raise MemoryError()
        self.data = grown + BLOCK_HEADER
        self.shape[0] = <Py_ssize_t>_block_capacity(grown)


def _arena_block(Py_ssize_t n):
    """A :class:`_Block` of at least ``n`` bytes for a decode's arena.

    A spare block when one is large enough (its pages already mapped), else a
    new one; its memory goes back to the spares when it is freed.
    """
    return _Block(n)


cdef object _rows_array(void** rows, int64_t count, size_t itemsize, object dtype):
    """Hand a C row buffer to NumPy without copying (NumPy frees it); ``rows`` is cleared."""
    cdef cvarray arr
    if count == 0:
        free(rows[0])
        rows[0] = NULL
        return np.empty(0, dtype=dtype)
    arr = <uint8_t[:count * itemsize]> <uint8_t*>rows[0]
    arr.callback_free_data = free
    rows[0] = NULL
    return np.asarray(arr).view(dtype)


cdef inline void* _row_ptr(object array):
    """Address of the first row of a C-contiguous structured array (non-empty)."""
    cdef uint8_t[::1] raw = array.view(np.uint8)
    return <void*>&raw[0]
