# Stubs for kbatch/internal/_offsetkernel.pyx (the C loop behind consumer_offsets).

import numpy as np
import numpy.typing as npt

def scan(
    data: npt.NDArray[np.uint8],
    key_start: npt.NDArray[np.int64],
    key_length: npt.NDArray[np.int32],
    value_start: npt.NDArray[np.int64],
    value_length: npt.NDArray[np.int32],
    status: npt.NDArray[np.int8],
    khash: npt.NDArray[np.uint64],
    group_start: npt.NDArray[np.int64],
    group_length: npt.NDArray[np.int32],
    topic_start: npt.NDArray[np.int64],
    topic_length: npt.NDArray[np.int32],
    partition: npt.NDArray[np.int32],
    version: npt.NDArray[np.int16],
    offset: npt.NDArray[np.int64],
    leader_epoch: npt.NDArray[np.int32],
    meta_start: npt.NDArray[np.int64],
    meta_length: npt.NDArray[np.int32],
    commit_timestamp: npt.NDArray[np.int64],
    expire_timestamp: npt.NDArray[np.int64],
) -> None: ...
def last_per_key(
    data: npt.NDArray[np.uint8],
    key_start: npt.NDArray[np.int64],
    key_length: npt.NDArray[np.int32],
    khash: npt.NDArray[np.uint64],
    survivor: npt.NDArray[np.uint8],
) -> None: ...
