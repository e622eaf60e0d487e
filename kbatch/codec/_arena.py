"""The arena every decompressor appends to, and what the decompressors share besides it.

:class:`Arena` is the growable buffer one decode call's decompressed payloads go into
(:func:`kbatch.codec._compression.decompress_into` appends each batch's, the core parses the
records out of it). The codec modules (``_gzip``, ``_snappy``, ``_lz4``, ``_zstd``) write into it
through :meth:`Arena.reserve` and :meth:`Arena.commit` (or :meth:`Arena.append`), fail through
:func:`corrupt` and :func:`too_big` (a :class:`~kbatch.errors.CorruptRecordError` on the
``records`` field, the wording every codec shares), and stream in steps of :data:`STREAM_STEP`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, NoReturn

import numpy as np
import numpy.typing as npt

from kbatch.errors import CorruptRecordError

__all__ = ["FIELD", "STREAM_STEP", "Arena", "corrupt", "too_big"]


FIELD: Final = "records"


def corrupt(reason: str) -> NoReturn:
    raise CorruptRecordError(reason, field=FIELD)


def too_big(limit: int) -> NoReturn:
    raise CorruptRecordError(
        f"decompressed size exceeds max_decompressed_size={limit}", field=FIELD
    )


#: The most a streaming decompressor (zlib, liblz4's frame decoder, zstd's reader) takes in
#: or gives out at a time: 1 MiB.
STREAM_STEP: Final = 1 << 20


class Arena:
    """Growable uint8 output buffer reused across the batches of one decode call.

    Parameters
    ----------
    initial : int, optional
        Bytes to allocate up front (0 allocates on first use).
    allocate : callable, optional
        ``allocate(n)`` returns a new writable buffer of at least ``n`` bytes (uint8, one
        dimension, ``len()`` its size); default ``np.empty``. If it has a ``resize(n)``
        method, that grows it in place keeping its bytes, and raises ``ValueError`` or
        ``BufferError`` when it cannot (a view of it is alive), as ``ndarray.resize`` does.
        kbatch's decoder passes one whose blocks grow by ``mremap`` and reuse the pages
        of a previous decode's arena.

    Notes
    -----
    Capacity grows geometrically (at least doubling), in place when no view of the buffer
    is alive (then the used bytes are not copied, and with kbatch's decoder blocks not
    even held twice), else by copying into a new buffer; pages the codecs never write are
    not touched. Give ``initial`` when the output size is roughly known (e.g. a few times
    the compressed input, capped by the limit): it saves the growth steps.

    Examples
    --------
    >>> from kbatch.codec._compression import GZIP, compress, decompress_into
    >>> arena = Arena()
    >>> decompress_into(GZIP, compress(GZIP, b"hello"), arena, 1 << 20)
    5
    >>> bytes(arena.view()), arena.size
    (b'hello', 5)
    """

    __slots__ = ("_allocate", "_buf", "before_grow", "size")

    def __init__(
        self,
        initial: int = 0,
        allocate: Callable[[int], Any] | None = None,
    ) -> None:
        if initial < 0:
            raise ValueError(f"initial must be >= 0, got {initial}")
        #: Makes a new uint8 buffer of at least n bytes (default: np.empty).
        self._allocate: Callable[[int], Any] = allocate or _empty
        # a buffer (uint8, one dimension); numpy's arrays are not Buffer to mypy on 3.10
        self._buf: Any = self._allocate(initial)
        #: Bytes used, from the start of the buffer.
        self.size: int = 0
        #: Called before the buffer moves (grows), e.g. to wait for a thread that is
        #: still reading the used part through a raw pointer.
        self.before_grow: Callable[[], object] | None = None

    @property
    def capacity(self) -> int:
        """Bytes allocated (used or not)."""
        return len(self._buf)

    def reserve(self, n: int) -> memoryview:
        """Make room for ``n`` more bytes and return a writable view of them.

        The bytes are not counted in :attr:`size` until :meth:`commit`. Release the view
        (``with arena.reserve(n) as out:``) before the next call, so that growth can
        extend the buffer in place instead of copying it.

        Parameters
        ----------
        n : int
            Bytes wanted after the used part.

        Returns
        -------
        memoryview
            Writable view of ``[size, size + n)``.
        """
        need = self.size + n
        if need > self.capacity:
            self._grow(need)
        return memoryview(self._buf)[self.size : need]

    def _grow(self, need: int) -> None:
        if self.before_grow is not None:
            self.before_grow()
        cap = max(need, 2 * self.capacity, 4096)
        resize = getattr(self._buf, "resize", None)
        if resize is not None:
            try:
                # realloc, mremap: the used bytes are not copied. Refused while any view
                # or exported buffer still refers to the buffer.
                resize(cap)
                return
            except (ValueError, BufferError):
                pass
        new = self._allocate(cap)
        memoryview(new)[: self.size] = memoryview(self._buf)[: self.size]
        self._buf = new

    def commit(self, n: int) -> None:
        """Count ``n`` more bytes (written through :meth:`reserve`'s view) as used."""
        self.size += n

    def append(self, data: object) -> None:
        """Copy a buffer to the end of the arena."""
        mv = memoryview(data)  # type: ignore[arg-type]
        n = mv.nbytes
        with self.reserve(n) as out:
            out[:] = mv.cast("B")
        self.size += n

    def view(self) -> memoryview:
        """Read-only view of the used bytes ``[0:size]``."""
        return memoryview(self._buf)[: self.size].toreadonly()

    def result(self) -> npt.NDArray[np.uint8]:
        """The finished buffer: a read-only uint8 array over ``[0:size]``, not a copy.

        The array keeps the arena's allocation alive (up to twice ``size`` bytes of
        address space; only the written pages are memory). Later appends that need more
        room move the arena to a new buffer and leave this one as it is.
        """
        out = np.asarray(memoryview(self._buf)[: self.size])
        out.flags.writeable = False
        return out


def _empty(n: int) -> npt.NDArray[np.uint8]:
    return np.empty(n, dtype=np.uint8)
