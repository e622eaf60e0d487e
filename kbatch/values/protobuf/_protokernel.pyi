from typing import Any

import numpy as np
import numpy.typing as npt

TYPES: dict[str, int]
FLAGS: dict[str, int]
KINDS: dict[str, int]
WORDS: dict[str, int]
ERRORS: dict[int, str]
MERGE: int
ERROR_DTYPE: np.dtype[Any]

def run(
    msgs: npt.NDArray[np.int32],
    fields: npt.NDArray[np.int32],
    aux: npt.NDArray[np.int32],
    consts: npt.NDArray[np.uint8],
    coldesc: npt.NDArray[np.int32],
    data: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    entry: npt.NDArray[np.int32],
    stop_on_error: bool = False,
) -> tuple[list[tuple[int, Any, Any, Any, Any]], npt.NDArray[Any], int]: ...

def message_indexes(
    buf: npt.NDArray[np.uint8],
    start: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    used: npt.NDArray[np.int64],
    key: npt.NDArray[np.uint64],
    error: npt.NDArray[np.uint8],
) -> None: ...
