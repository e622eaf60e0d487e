# Stubs for kbatch/codec/_arrowkernels.pyx (the C loops behind kbatch.arrow).

from typing import Any

import numpy as np
import numpy.typing as npt

def gather(
    data: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int32], large: bool
) -> tuple[npt.NDArray[np.int32] | npt.NDArray[np.int64], npt.NDArray[np.uint8]]: ...
def views(
    data: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int32],
    window_step: int,
    window_size: int,
) -> npt.NDArray[np.int32]: ...
def views2(
    data: npt.NDArray[np.uint8],
    s1: npt.NDArray[np.int64],
    l1: npt.NDArray[np.int32],
    s2: npt.NDArray[np.int64],
    l2: npt.NDArray[np.int32],
    window_step: int,
    window_size: int,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]: ...
def gather2(
    data: npt.NDArray[np.uint8],
    s1: npt.NDArray[np.int64],
    l1: npt.NDArray[np.int32],
    s2: npt.NDArray[np.int64],
    l2: npt.NDArray[np.int32],
    large: bool,
) -> tuple[
    npt.NDArray[np.int32] | npt.NDArray[np.int64],
    npt.NDArray[np.uint8],
    npt.NDArray[np.int32] | npt.NDArray[np.int64],
    npt.NDArray[np.uint8],
]: ...
def chunk_ends(
    records: npt.NDArray[np.uint8], headers: npt.NDArray[np.uint8], with_headers: bool, max_rows: int, max_bytes: int
) -> npt.NDArray[np.int64]: ...
def spark_columns(
    data: npt.NDArray[np.uint8],
    records: npt.NDArray[np.uint8],
    headers: npt.NDArray[np.uint8],
    ts_types: npt.NDArray[np.int32] | None,
    with_headers: bool,
    views: bool,
    large: bool,
    chunk: int = 0,
) -> dict[str, Any]: ...
