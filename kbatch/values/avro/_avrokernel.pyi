from typing import Any

import numpy as np
import numpy.typing as npt

OPS: dict[str, int]
KINDS: dict[str, int]
ERRORS: dict[int, str]
MAX_PATH: int
SKIP_NODES: dict[str, int]
SKIP_NESTING: int
ERROR_DTYPE: np.dtype[Any]

def run(
    program: npt.NDArray[np.int32],
    aux: npt.NDArray[np.int32],
    consts: npt.NDArray[np.uint8],
    coldesc: npt.NDArray[np.int32],
    data: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    entry: npt.NDArray[np.int32],
    null_entry: int,
    stop_on_error: bool = False,
    max_items: int = ...,
) -> tuple[list[tuple[int, Any, Any, Any, Any]], npt.NDArray[Any], int]: ...

def read_frames(
    buf: npt.NDArray[np.uint8],
    start: npt.NDArray[np.int64],
    length: npt.NDArray[np.int64],
    h_start: npt.NDArray[np.int64],
    h_length: npt.NDArray[np.int64],
    ids: npt.NDArray[np.int32],
    guid_at: npt.NDArray[np.int64],
    error: npt.NDArray[np.uint8],
    body_start: npt.NDArray[np.int64],
    body_length: npt.NDArray[np.int64],
    too_short: int,
    bad_magic: int,
    bad_header: int,
) -> tuple[int, int]: ...
