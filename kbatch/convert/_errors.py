"""The two ways ``kbatch convert`` fails, shared by its modules (the checks of
:mod:`kbatch.convert._plan` and :mod:`kbatch.convert._value_plan`, the engines, the sinks): a
usage mistake (status 2) or a failed run (status 1)."""

from __future__ import annotations

__all__ = ["ConvertError", "UsageError"]


class UsageError(ValueError):
    """A mistake in the command line or its inputs: one line, status 2."""


class ConvertError(RuntimeError):
    """The conversion failed while running (corrupt data, Spark): one line, status 1."""


for _cls in (ConvertError, UsageError):
    _cls.__module__ = "kbatch.convert"  # the face they are imported from
