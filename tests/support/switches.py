"""The switch of each heavy test tier (the packaging proof, the run on the oldest Spark)."""

from __future__ import annotations

import os


def enabled(flag: str) -> bool:
    """Whether a heavy tier runs: ``flag`` set to 1 or 0 decides; unset, it runs under CI."""
    value = os.environ.get(flag, "")
    if value:
        return value not in ("0", "false", "no")
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")
