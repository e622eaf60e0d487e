# _core_threads.pxi: the helper threads, part of kbatch/_core.pyx.
#
# provides: _usable_cpus, set_threads, get_threads (the thread budget, _CPUS); the plain-list
#           encode's GIL window (_open_window, _close_window, _gil_may_go, _window_is_open);
#           _Worker (a C thread that runs nogil jobs), _lz4_helper (idle _Workers kept for lz4
#           chunks, fork-aware), _helper_thread (a one-thread executor, fork-aware), _Beside
#           (a Python function on a new thread)
# uses:     nothing of the other parts (pythread)

def _usable_cpus():
    """Cores kbatch may keep busy: ``KBATCH_THREADS`` if set (1 = the calling
    thread only), else the cores this process may run on (taskset, cpuset)."""
    try:
        return max(1, int(os.environ["KBATCH_THREADS"]))
    except (KeyError, ValueError):
        pass
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


_CPUS = _usable_cpus()


def set_threads(int n):
    """Set how many threads kbatch may keep busy; return the previous setting.

    Parameters
    ----------
    n : int
        1 keeps decode and encode on the calling thread; 2 or more lets large
        decodes and encodes use a second thread (kbatch never uses more than
        two). The default is ``KBATCH_THREADS`` if set, else the cores this
        process may run on.

    Returns
    -------
    int

    Examples
    --------
    >>> previous = set_threads(1)
    >>> set_threads(previous)
    1
    """
    global _CPUS
    if n < 1:
        raise ValueError(f"threads must be >= 1, got {n}")
    previous = _CPUS
    _CPUS = n
    return previous


def get_threads():
    """How many threads kbatch may keep busy (see :func:`set_threads`)."""
    return _CPUS


ctypedef void (*work_fn)(void* arg) noexcept nogil

cdef extern from "pythread.h":
    # (Cython's declarations lack nogil; neither needs the GIL)
    unsigned long PyThread_start_new_thread(void (*func)(void*) noexcept nogil, void* arg) nogil
    void PyThread_free_lock(PyThread_type_lock lock) nogil


# The plain-list encode's window (docs/DESIGN.md, Threads). From the first
# borrowed item pointer _gather_plain takes to the last byte written from
# one, the calling thread keeps the GIL and calls no Python code, so no
# other Python thread can run and drop an item; and the cyclic GC is off,
# since allocating a tracked object may start a collection, whose finalizers
# are Python code that may hand the GIL over. _gil_may_go() marks every place
# on the encode path where another thread could run next (the GIL let go,
# Python code called): debug builds (KBATCH_DEBUG=1 keeps C asserts) abort
# there while the window is open.
cdef extern from *:
    """
    #include <assert.h>
    #define KB_ASSERT_WINDOW_CLOSED(open) \
        assert(!(open) && "kbatch: another thread may run while encode holds borrowed item pointers")
    """
    void KB_ASSERT_WINDOW_CLOSED(bint window_open) noexcept nogil

cdef bint _window_open = False
cdef int _window_gc = 0   # the GC was enabled when the window opened


cdef inline void _open_window() noexcept:
    global _window_open, _window_gc
    _window_gc = PyGC_Disable()
    _window_open = True


cdef inline void _close_window() noexcept:
    global _window_open
    if _window_open:
        _window_open = False
        if _window_gc:
            PyGC_Enable()


cdef inline void _gil_may_go() noexcept nogil:
    """Another Python thread may run next: the window must be closed."""
    KB_ASSERT_WINDOW_CLOSED(_window_open)


def _window_is_open():
    """Tests: whether the plain-list encode's window is open (never, between calls)."""
    return bool(_window_open)


cdef struct worker_t:
    PyThread_type_lock ready   # released by submit: a job (or quit) is there
    PyThread_type_lock done    # released by the thread: the job is finished
    work_fn fn
    void* arg
    bint quit


cdef void _worker_main(void* state) noexcept nogil:
    """The worker thread: plain C, never touches Python. It owns ``state``
    once told to quit, and frees it on its way out."""
    cdef worker_t* w = <worker_t*>state
    while True:
        PyThread_acquire_lock(w.ready, WAIT_LOCK)
        if w.quit:
            break
        w.fn(w.arg)
        PyThread_release_lock(w.done)
    PyThread_free_lock(w.ready)
    PyThread_free_lock(w.done)
    free(w)


cdef class _Worker:
    """A thread of its own for pure C jobs (no GIL, no Python object).

    One job at a time: :meth:`submit` hands one over, :meth:`wait` blocks
    (uninterruptibly: the job writes into buffers the caller owns) until it
    is done. With ``threaded`` False, or when no thread can be started, jobs
    run inline in :meth:`submit`. The thread is started with
    ``PyThread_start_new_thread`` and never needs the GIL, so a caller that
    holds the GIL throughout (the plain-list encoder) cannot deadlock with
    it; :meth:`close` (also run when the object is freed) tells it to exit.
    """

    cdef worker_t* w
    cdef bint busy

    def __cinit__(self, bint threaded):
        self.w = NULL
        self.busy = False
        if not threaded:
            return
        cdef worker_t* w = <worker_t*>malloc(sizeof(worker_t))
        if w == NULL:
            return  # inline then
        memset(w, 0, sizeof(worker_t))
        w.ready = PyThread_allocate_lock()
        w.done = PyThread_allocate_lock()
        if w.ready != NULL and w.done != NULL:
            PyThread_acquire_lock(w.ready, WAIT_LOCK)
            PyThread_acquire_lock(w.done, WAIT_LOCK)
            if PyThread_start_new_thread(_worker_main, w) != <unsigned long>-1:
                self.w = w
                return
        if w.ready != NULL:
            PyThread_free_lock(w.ready)
        if w.done != NULL:
            PyThread_free_lock(w.done)
        free(w)

    def __dealloc__(self):
        self.close(True)

    @property
    def threaded(self):
        return self.w != NULL

    cdef void submit(self, work_fn fn, void* arg, bint keep_gil) noexcept:
        """Start ``fn(arg)``; inline, it is done on return (``keep_gil``: without
        letting go of the GIL)."""
        if self.w == NULL:
            if keep_gil:
                fn(arg)
            else:
                _gil_may_go()
                with nogil:
                    fn(arg)
            return
        self.w.fn = fn
        self.w.arg = arg
        self.busy = True
        PyThread_release_lock(self.w.ready)

    cdef void wait(self, bint keep_gil) noexcept:
        """Block until the job submitted last is finished (``keep_gil``: holding
        the GIL, so that no other Python thread runs meanwhile)."""
        if not keep_gil:
            _gil_may_go()
        if not self.busy:
            return
        if keep_gil:
            PyThread_acquire_lock(self.w.done, WAIT_LOCK)
        else:
            with nogil:
                PyThread_acquire_lock(self.w.done, WAIT_LOCK)
        self.busy = False

    def wait_idle(self):
        """Python-callable :meth:`wait` (the arena calls it before it moves)."""
        self.wait(False)

    cdef void close(self, bint keep_gil) noexcept:
        """Wait for the job, then let the thread go (it frees its state)."""
        cdef worker_t* w = self.w
        if w == NULL:
            return
        self.wait(keep_gil)
        self.w = NULL
        w.quit = True
        PyThread_release_lock(w.ready)


_helper = None
_helper_pid = 0


def _helper_thread():
    """A one-thread executor for this process (a forked child makes its own)."""
    global _helper, _helper_pid
    if _helper is None or _helper_pid != os.getpid():
        from concurrent.futures import ThreadPoolExecutor
        _helper = ThreadPoolExecutor(1, thread_name_prefix="kbatch-inflate")
        _helper_pid = os.getpid()
    return _helper


#: Idle C threads that take lz4 batches from the back of a chunk (one per concurrent
#: decode; beyond _LZ4_HELPERS_KEPT, those handed back are let go).
_lz4_helpers = []
_lz4_helpers_pid = 0
_LZ4_HELPERS_KEPT = 4


cdef _Worker _lz4_helper():
    global _lz4_helpers, _lz4_helpers_pid
    if _lz4_helpers_pid != os.getpid():  # (a forked child has none of its parent's threads)
        _lz4_helpers = []
        _lz4_helpers_pid = os.getpid()
    try:
        return _lz4_helpers.pop()  # atomic under the GIL
    except IndexError:
        return _Worker(True)


cdef class _Beside:
    """``fn(*args)`` on a new thread; :meth:`result` waits for it and returns its value.

    The wait cannot be interrupted (KeyboardInterrupt included): the caller
    must not release what the thread reads before it has finished.
    """

    cdef PyThread_type_lock finished
    cdef object value
    cdef object error

    def __cinit__(self, fn, *args):
        _gil_may_go()
        self.finished = PyThread_allocate_lock()
        if self.finished == NULL:
            raise MemoryError()
        PyThread_acquire_lock(self.finished, WAIT_LOCK)
        _thread.start_new_thread(self._run, (fn, args))

    def __dealloc__(self):
        if self.finished != NULL:
            PyThread_free_lock(self.finished)

    def _run(self, fn, args):
        try:
            self.value = fn(*args)
        except BaseException as e:
            self.error = e
        finally:
            PyThread_release_lock(self.finished)

    cdef object result(self):
        with nogil:
            PyThread_acquire_lock(self.finished, WAIT_LOCK)
        PyThread_release_lock(self.finished)
        if self.error is not None:
            raise self.error
        return self.value
