# kbatch/_threads.pxd: the atomics two threads share work through (cimported; no code of its own).
#
# provides: kb_take (the next item of a shared range, from its front or its back), kb_cut (drop
#           the items of a range not yet taken), kb_load/kb_store (a published word),
#           kb_or8 (set bits of a byte both threads may write); inline, each module gets its own
#           static copy. The helper thread itself is kbatch/codec/_core_threads.pxi (Helper, declared
#           in kbatch/codec/_core.pxd).
# used by:  kbatch/codec/_core.pyx (its parts: the split parse, LZ4 in C, the writers),
#           kbatch/codec/_arrowkernels.pyx (to_arrow's chunks)
#
# A shared range is one 64-bit word: the next item from the front in its low 32 bits, one past
# the last item from the back in its high 32 bits; (uint64_t)n << 32 holds items 0 .. n. Each
# thread takes one item at a time by compare-and-swap, so the two never take the same item,
# and whoever finds the range empty knows every item is taken (not that it is finished: that
# is the job's own word, published with kb_store, or the helper's wait).

from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t


cdef extern from *:
    """
    #ifndef KBATCH_THREADS_H
    #define KBATCH_THREADS_H
    /* The next item of a shared range, from its front or its back; -1 once it is empty. */
    static inline int64_t kb_take(uint64_t* range, int from_back) {
        uint64_t s = __atomic_load_n(range, __ATOMIC_ACQUIRE), t;
        uint32_t lo, hi;
        do {
            lo = (uint32_t)s;
            hi = (uint32_t)(s >> 32);
            if (lo >= hi) return -1;
            t = from_back ? s - ((uint64_t)1 << 32) : s + 1;
        } while (!__atomic_compare_exchange_n(range, &s, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
        return from_back ? (int64_t)hi - 1 : (int64_t)lo;
    }
    /* Drop the items from `end` on (those not yet taken). */
    static inline void kb_cut(uint64_t* range, uint32_t end) {
        uint64_t s = __atomic_load_n(range, __ATOMIC_ACQUIRE), t;
        do {
            if ((uint32_t)(s >> 32) <= end) return;
            t = ((uint64_t)end << 32) | (uint32_t)s;
        } while (!__atomic_compare_exchange_n(range, &s, t, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE));
    }
    static inline uint64_t kb_load(uint64_t* word) { return __atomic_load_n(word, __ATOMIC_ACQUIRE); }
    static inline void kb_store(uint64_t* word, uint64_t v) { __atomic_store_n(word, v, __ATOMIC_RELEASE); }
    /* Compare-and-swap: `word` from `expected` to `desired`; whether it was `expected`. */
    static inline int kb_swap(uint64_t* word, uint64_t expected, uint64_t desired) {
        return __atomic_compare_exchange_n(word, &expected, desired, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    static inline void kb_or8(uint8_t* byte, uint8_t bits) { (void)__atomic_fetch_or(byte, bits, __ATOMIC_RELAXED); }
    #endif
    """
    int64_t kb_take(uint64_t* range, int from_back) noexcept nogil
    void kb_cut(uint64_t* range, uint32_t end) noexcept nogil
    uint64_t kb_load(uint64_t* word) noexcept nogil
    void kb_store(uint64_t* word, uint64_t v) noexcept nogil
    bint kb_swap(uint64_t* word, uint64_t expected, uint64_t desired) noexcept nogil
    void kb_or8(uint8_t* byte, uint8_t bits) noexcept nogil
