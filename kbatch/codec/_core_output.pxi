# _core_output.pxi: where an encode's batches go, part of kbatch/codec/_core.pyx.
#
# provides: _Output (a new ``bytes``, or the caller's writable buffer: ``out=``),
#           kb_populate (a range's pages mapped in one call)
# uses:     nothing of the other parts (CPython's buffer protocol; madvise on Linux)
#
# An encode knows its output's exact size only once its batches are planned
# (uncompressed) or compressed, so it asks an _Output for the room then, and
# writes every batch there, on one or two threads without the GIL. A new
# ``bytes`` that large is a fresh mapping from the kernel on every call (above
# glibc's mmap threshold), and the kernel zeroes and maps its pages: for a
# 36 MB output that is most of the encode's time. So a new output has its
# pages mapped in one call first (kb_populate) and asks for huge pages; a
# caller who encodes again and again can pass one buffer (``out=``) whose
# pages stay mapped between calls, as Kafka's producer keeps its BufferPool.

cdef enum:
    # New outputs from this size on have their pages mapped in one call first ...
    POPULATE_MIN_BYTES = 4 << 20
    # ... and from this size on in huge pages: above glibc's largest mmap
    # threshold (32 MiB on 64-bit), an output is always a fresh mapping.
    HUGE_MIN_BYTES = 32 << 20


cdef extern from *:
    """
    #if defined(__linux__)
    #include <sys/mman.h>
    #include <unistd.h>
    #ifndef MADV_POPULATE_WRITE
    #define MADV_POPULATE_WRITE 23  /* Linux 5.14; older kernels refuse it (EINVAL) */
    #endif
    #ifndef MADV_HUGEPAGE
    #define MADV_HUGEPAGE 14
    #endif
    static int kb_pages(void* p, size_t n, uintptr_t align, uintptr_t* start, uintptr_t* end) {
        long page = sysconf(_SC_PAGESIZE);
        if (page <= 0) return 0;
        if (align < (uintptr_t)page) align = (uintptr_t)page;
        *start = ((uintptr_t)p + align - 1) & ~(align - 1);
        *end = ((uintptr_t)p + n) & ~(align - 1);
        return *end > *start;
    }
    /* Map the pages of [p, p + n) in one call, not one page fault at a time
       as they are first written: a large new output (beyond malloc's mmap
       threshold) gets fresh pages every time. Best effort: errors ignored. */
    static void kb_populate(void* p, size_t n) {
        uintptr_t start, end;
        if (kb_pages(p, n, 0, &start, &end))
            (void)madvise((void*)start, end - start, MADV_POPULATE_WRITE);
    }
    /* Ask for transparent huge pages over the 2 MiB-aligned part of
       [p, p + n) (where THP is "madvise"): 512 times fewer faults, so that
       zeroing the fresh pages is most of what mapping them costs. Only for
       an output certain to be a mapping of its own (HUGE_MIN_BYTES), never
       for the middle of malloc's heap. Best effort: errors ignored. */
    static void kb_huge(void* p, size_t n) {
        uintptr_t start, end;
        if (kb_pages(p, n, (uintptr_t)2 << 20, &start, &end))
            (void)madvise((void*)start, end - start, MADV_HUGEPAGE);
    }
    #else
    static void kb_populate(void* p, size_t n) { (void)p; (void)n; }
    static void kb_huge(void* p, size_t n) { (void)p; (void)n; }
    #endif
    """
    void kb_populate(void* p, size_t n) noexcept nogil
    void kb_huge(void* p, size_t n) noexcept nogil


@cython.final
cdef class _Output:
    """Room for an encode's ``total`` bytes of batches, at :attr:`ptr`.

    ``target`` None: a new ``bytes`` of exactly ``total``, which
    :meth:`result` returns. Otherwise the caller's buffer: a ``bytearray``
    (exactly; not a subclass) is resized to ``total``, any other writable
    C-contiguous buffer must hold at least ``total``; the batches go at its
    start and :meth:`result` is ``total``. Until :meth:`close` the buffer is
    exported, so nothing can resize, move or close it while threads write
    into it without the GIL: from the start (an exporter may run Python
    code, which the plain-list encode's GIL window forbids), or for a
    ``bytearray`` from :meth:`open`, after its resize (both C only). Its
    written part must not overlap the input bytes the batches are written
    from (:meth:`keep_apart`).
    """

    cdef object target      # the caller's buffer, or None
    cdef object made        # the new bytes (target None)
    cdef Py_buffer view     # target's, while viewing
    cdef bint viewing
    cdef list apart         # (address, size, what) of input bytes the writers read
    cdef uint8_t* ptr       # where the batches go (after open)
    cdef int64_t total
    cdef bint fresh         # ptr's pages are new: map them in one call (kb_populate) before writing

    def __cinit__(self, object target=None):
        self.target = target
        self.apart = []
        if target is not None and not PyByteArray_CheckExact(target):
            PyObject_GetBuffer(target, &self.view, PyBUF_WRITABLE)
            self.viewing = True

    def __dealloc__(self):
        self.close()

    cdef int keep_apart(self, const void* base, int64_t size, str what) except -1:
        """Refuse, at :meth:`open`, a target whose written part overlaps these input bytes."""
        if self.target is not None and size > 0:
            self.apart.append((<size_t>base, size, what))
        return 0

    cdef int open(self, int64_t total) except -1:
        """Room for ``total`` bytes at :attr:`ptr` (GIL held; runs no caller's Python code)."""
        cdef size_t start, end
        cdef bint grown
        self.total = total
        if self.target is None:
            self.made = PyBytes_FromStringAndSize(NULL, total)
            self.ptr = <uint8_t*>PyBytes_AS_STRING(self.made)
            self.fresh = total >= POPULATE_MIN_BYTES
            if total >= HUGE_MIN_BYTES:
                kb_huge(self.ptr, <size_t>total)
            return 0
        if not self.viewing:  # an exact bytearray
            grown = total > PyByteArray_GET_SIZE(self.target)
            PyByteArray_Resize(self.target, total)  # BufferError while the caller holds an export
            self.fresh = grown and total >= POPULATE_MIN_BYTES
            PyObject_GetBuffer(self.target, &self.view, PyBUF_WRITABLE)
            self.viewing = True
        if self.view.len < total:
            raise ValueError(f"out holds {self.view.len:,} bytes; the batches need {total:,}")
        self.ptr = <uint8_t*>self.view.buf
        start = <size_t>self.ptr
        end = start + <size_t>total
        for base, size, what in self.apart:
            if start < <size_t>base + <size_t>size and <size_t>base < end:
                raise ValueError(f"out overlaps the {what} bytes the batches are written from")
        return 0

    cdef object result(self):
        """The new bytes, or (target given) the number of bytes written."""
        return self.made if self.target is None else self.total

    cdef void close(self) noexcept:
        """Let go of the target's export (the output stays written)."""
        if self.viewing:
            self.viewing = False
            PyBuffer_Release(&self.view)
