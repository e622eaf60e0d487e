# _core_threads.pxi: the thread budget and the helper thread, part of kbatch/codec/_core.pyx.
#
# provides: _usable_cpus, set_threads, get_threads (the thread budget, _CPUS); the plain-list
#           encode's GIL window (_open_window, _close_window, _gil_may_go; tests read it
#           through _window_is_open, a test hook in _core.pyx);
#           Helper, take_helper, give_back: the one helper-thread mechanism (a C thread of its
#           own per Helper, idle ones kept per process, fork-aware) for nogil C jobs (submit)
#           and Python callables (start); declared in kbatch/codec/_core.pxd for kbatch/_arrowkernels
# uses:     kbatch/_threads.pxd (kb_store, kb_swap), pythread; nothing of the other parts

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


# The helper thread. Every part that puts a second core to work does it the same way: it takes
# a Helper (take_helper: an idle one of this process, else a new thread; with ``threaded``
# False, one that runs its jobs inline), hands it one job, works on its own share meanwhile,
# then waits for the job, or takes it back if the thread has not started it, and gives the
# Helper back (give_back). A job is a nogil C function (submit) or a Python callable (start,
# run with the GIL taken on the helper thread); the two threads share the work through the
# atomics of kbatch/_threads.pxd (kb_take). A C job never needs the GIL, so a caller that
# holds it throughout, waits included (the plain-list encode's window), cannot deadlock with
# the thread. A forked child has none of its parent's threads: its helpers are its own.
#
# Which threads are kept: a helper handed one job per chunk of a call (LZ4 in C, payload
# pieces, to_arrow's chunks) is kept idle between calls (HELPERS_KEPT per process). A helper
# that serves a whole call (decode's parse thread, woken for every chunk; the encoder's second
# half, planner and compressor) is a new thread, let go at the end of the call (kept=False):
# on the shared 2-core machine a kept thread in that role was measured twice as slow for an
# LZ4 decode (the scheduler placed it beside the calling thread), a new one as before.

cdef extern from *:
    """
    #ifdef _WIN32
    #include <process.h>
    #define kb_getpid() ((long)_getpid())
    #else
    #include <unistd.h>
    #define kb_getpid() ((long)getpid())
    #endif
    """
    long kb_getpid() noexcept nogil


cdef enum:
    JOB_NONE = 0       # worker_t.state
    JOB_SUBMITTED = 1  # handed over, not started
    JOB_RUNNING = 2    # claimed by the thread: it will run to the end
    JOB_TAKEN_BACK = 3 # taken back by the caller before the thread claimed it: never runs
    HELPERS_KEPT = 4   # idle helpers kept per process (more are let go when handed back)


cdef extern from "Python.h":
    # (Cython's declarations lack nogil: these are called without the GIL, to take it)
    ctypedef enum PyGILState_STATE:
        PyGILState_UNLOCKED
    PyGILState_STATE PyGILState_Ensure() noexcept nogil
    void PyGILState_Release(PyGILState_STATE state) noexcept nogil
    void* PyEval_SaveThread() noexcept nogil
    void PyEval_RestoreThread(void* tstate) noexcept nogil


cdef void _helper_main(void* state) noexcept nogil:
    """The helper thread: claims each job handed over and runs it (a C job without
    the GIL). It owns ``state`` once told to quit, and frees it on its way out,
    with its Python thread state if it has one."""
    cdef worker_t* w = <worker_t*>state
    while True:
        PyThread_acquire_lock(w.ready, WAIT_LOCK)
        if w.quit:
            break
        if kb_swap(&w.state, JOB_SUBMITTED, JOB_RUNNING):
            w.fn(w.arg)
        PyThread_release_lock(w.done)
    if w.tstate != NULL:
        PyEval_RestoreThread(w.tstate)
        PyGILState_Release(PyGILState_UNLOCKED)  # the last: the state is cleared and deleted
    PyThread_free_lock(w.ready)
    PyThread_free_lock(w.done)
    free(w)


cdef void _run_call(void* helper) noexcept with gil:
    (<Helper>helper).run_call()


cdef void _call_python(void* arg) noexcept nogil:
    """A Python job, on the helper thread. The thread's Python thread state is made
    at its first Python job and kept until the thread quits, and with it what the
    job keeps per thread (kbatch.codec._zstd's contexts)."""
    cdef worker_t* w = <worker_t*>arg
    if w.tstate == NULL:
        PyGILState_Ensure()  # (released only on the way out)
    else:
        PyEval_RestoreThread(w.tstate)
    _run_call(w.owner)  # (its own PyGILState_Ensure nests: the GIL is held)
    w.tstate = PyEval_SaveThread()


cdef class Helper:
    """A thread of its own for one job at a time (see above); inline without one.

    :meth:`submit` hands over a nogil C job, :meth:`start` a Python callable;
    :meth:`wait` blocks (uninterruptibly: the job writes into buffers the caller
    owns) until the job is done, :meth:`cancel` takes it back if the thread has not
    started it; :func:`give_back` does either, and gives a Python job's value or
    exception. With ``threaded`` False, or when no thread can be started, jobs run
    inline as they are handed over. :meth:`close` (also run when the object is
    freed) tells the thread to exit.
    """

    def __cinit__(self, bint threaded):
        self.w = NULL
        self.pid = kb_getpid()
        self.busy = False
        self.taken_back = False
        self.kept = False
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
            if PyThread_start_new_thread(_helper_main, w) != <unsigned long>-1:
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
        if self.busy:  # the wake-up of a job taken back: it comes before the next job
            self.wait(keep_gil)
        self.w.fn = fn
        self.w.arg = arg
        kb_store(&self.w.state, JOB_SUBMITTED)
        self.busy = True
        self.taken_back = False
        PyThread_release_lock(self.w.ready)

    cdef void wait(self, bint keep_gil) noexcept:
        """Block until the job handed over last is finished (``keep_gil``: holding
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
        self.taken_back = False

    def wait_idle(self):
        """Python-callable :meth:`wait` (the arena calls it before it moves)."""
        self.wait(False)

    cdef bint cancel(self) noexcept:
        """Take the job back if the thread has not started it: True, and it never
        runs (the caller may free what it reads). False: it runs, or ran; wait."""
        if self.busy and not self.taken_back and kb_swap(&self.w.state, JOB_SUBMITTED, JOB_TAKEN_BACK):
            self.taken_back = True
            self.call = None
            return True
        return False

    cdef bint idle(self) noexcept:
        """Whether a job can be handed over without waiting."""
        if self.busy and PyThread_acquire_lock(self.w.done, NOWAIT_LOCK):
            self.busy = False
            self.taken_back = False
        return not self.busy

    cdef void close(self, bint keep_gil) noexcept:
        """Wait for the job, then let the thread go (it frees its state)."""
        cdef worker_t* w = self.w
        if w == NULL:
            return
        if self.pid != kb_getpid():  # a forked child: the thread is its parent's
            self.w = NULL
            return
        self.wait(keep_gil)
        self.w = NULL
        w.quit = True
        PyThread_release_lock(w.ready)

    cdef void start(self, object fn) noexcept:
        """Start ``fn()``; inline, it is done on return. :func:`give_back` gives
        what it returned or raises what it raised."""
        _gil_may_go()
        self.call = fn
        self.value = None
        self.error = None
        if self.w == NULL:
            self.run_call()
        else:
            self.w.owner = <void*>self
            self.submit(_call_python, self.w, False)

    cdef void run_call(self) noexcept:
        try:
            self.value = self.call()
        except BaseException as e:
            self.error = e
        self.call = None


cdef list _idle_helpers = []
cdef long _idle_pid = 0


cdef Helper take_helper(bint threaded, bint kept=True):
    """An idle helper thread of this process, or a new one; with ``threaded``
    False, a Helper that runs jobs inline. ``kept`` False: a new thread, let go
    when given back (see the rule above)."""
    global _idle_helpers, _idle_pid
    cdef Helper helper
    cdef Py_ssize_t i
    if not (threaded and kept):
        return Helper(threaded)
    if _idle_pid != kb_getpid():  # (a forked child has none of its parent's threads)
        _idle_helpers = []
        _idle_pid = kb_getpid()
    for i in range(len(_idle_helpers) - 1, -1, -1):
        helper = <Helper>_idle_helpers[i]
        if helper.idle():
            del _idle_helpers[i]  # atomic under the GIL
            return helper
    helper = Helper(True)
    helper.kept = True
    return helper


cdef object give_back(Helper helper, bint keep_gil, bint take_back=False):
    """Done with ``helper``: wait for its job (``keep_gil``: as for :meth:`Helper.wait`;
    never with a Python job), or with ``take_back`` take it back if the thread has
    not started it (the job only shares work the caller has finished); then keep
    the helper for the next caller (beyond HELPERS_KEPT, let it go). A Python job's
    value is returned, its exception raised."""
    cdef object value, error
    if helper.w != NULL:
        if not (take_back and helper.cancel()) and not helper.taken_back:
            helper.wait(keep_gil)
    value, error = helper.value, helper.error
    helper.value = helper.error = helper.call = None
    if helper.w != NULL:
        if helper.kept and helper.pid == _idle_pid and len(_idle_helpers) < HELPERS_KEPT:
            _idle_helpers.append(helper)
        else:
            helper.close(keep_gil)
    if error is not None:
        raise error
    return value


def _let_helpers_go():
    """At exit: the idle helper threads told to quit (none is left waiting for work)."""
    for helper in _idle_helpers:
        (<Helper>helper).close(False)
    del _idle_helpers[:]


atexit.register(_let_helpers_go)
