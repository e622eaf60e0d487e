"""Zero-copy ``records`` field values.

:class:`Records` is implemented in the C part of the package
(``_kernel.pyx``) so that it can export the buffer protocol on every Python
version; this module is where the rest of the package imports it from.
"""

from __future__ import annotations

from ._kernel import Records, records_slice

__all__ = ["Records", "records_slice"]
