"""The one place kbatch's table writers can be stopped on purpose, for the tests of exactly-once.

``KBATCH_TEST_KILL_AT=<stage>`` in the environment makes the process kill itself (SIGKILL, no
clean-up, as a crash or ``kill -9`` would) when a sink reaches that stage:

    mid-write       after the first batch of records was handed to the format's writer
    before-commit   every data file written, nothing committed
    mid-commit      committed, the data files not all moved into place (a Parquet folder;
                    the next run moves them); a compaction: committed, not yet checked,
                    expired nor vacuumed
    between-commits the dead letters (``--values``) committed to their tables, the data not yet

Unset (always, outside the tests) it does nothing.
"""

from __future__ import annotations

import os
import signal
from typing import Final

__all__ = ["KILL_ENV", "STAGES", "reached"]

KILL_ENV: Final = "KBATCH_TEST_KILL_AT"
STAGES: Final = ("mid-write", "before-commit", "mid-commit", "between-commits")


def reached(stage: str) -> None:
    """Kill this process now if ``KBATCH_TEST_KILL_AT`` names ``stage``."""
    assert stage in STAGES, stage
    if os.environ.get(KILL_ENV) == stage:
        os.kill(os.getpid(), signal.SIGKILL)
