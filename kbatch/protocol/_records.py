"""Zero-copy ``records`` field values."""

from __future__ import annotations

from typing import Any

__all__ = ["Records"]


class Records:
    """The bytes of a ``records`` field, as a view into the message buffer.

    Decoding a message never copies its record batches: a ``records`` field
    becomes a :class:`Records` holding a ``memoryview`` slice of the input.
    The view keeps the input alive; call :meth:`tobytes` to detach.

    ``Records`` supports ``len()``, ``bytes()``, equality with any bytes-like
    object, and (on Python 3.12+) the buffer protocol itself. On every
    version, :attr:`view` is the ``memoryview``.

    Parameters
    ----------
    data : bytes-like
        The record batch bytes (not copied).

    Examples
    --------
    >>> r = Records(b"abc")
    >>> len(r), bytes(r), r == b"abc"
    (3, b'abc', True)
    """

    __slots__ = ("view",)

    view: memoryview

    def __init__(self, data: Any) -> None:
        view = memoryview(data)
        if view.format != "B" or view.ndim != 1:
            view = view.cast("B")
        self.view = view

    def __buffer__(self, flags: int) -> memoryview:
        return self.view

    def __len__(self) -> int:
        return self.view.nbytes

    def __bytes__(self) -> bytes:
        return self.view.tobytes()

    def tobytes(self) -> bytes:
        """Return a copy of the bytes."""
        return self.view.tobytes()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Records):
            return self.view == other.view
        try:
            return self.view == memoryview(other)  # type: ignore[arg-type]
        except TypeError:
            return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<Records {self.view.nbytes} bytes>"

    def decode(self, **kwargs: Any) -> Any:
        """Decode the record batches with :func:`kbatch.decode`.

        Parameters
        ----------
        **kwargs
            Passed on to :func:`kbatch.decode` (e.g. ``verify_crc``).

        Returns
        -------
        kbatch.RecordTable
        """
        import kbatch

        return kbatch.decode(self.view, **kwargs)
