# Type stubs for the compiled core, kbatch/codec/_core.pyx: keep them in step with the `def` and
# `cdef class` signatures there (`cdef` functions are invisible from Python and have none).
# `mypy --strict kbatch examples/typed_usage.py` checks them against their users.

from collections.abc import Iterable, Mapping
from typing import Any, Final, TypeAlias

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer, disjoint_base

from kbatch.codec._table import RecordTable
from kbatch.errors import CorruptRecordError

# A record's headers: (key, value) pairs (or a mapping); keys str (UTF-8) or bytes, values any
# bytes-like object or None for a null value.
_Headers: TypeAlias = (
    Iterable[tuple[str | bytes, Buffer | None]] | Mapping[str, Buffer | None] | Mapping[bytes, Buffer | None]
)
_Timestamps: TypeAlias = Iterable[int | None] | npt.NDArray[np.integer[Any]]
# Arrow-style binary columns for encode_arrays: int32 or int64 offsets (n + 1), a byte buffer, a mask
_Offsets: TypeAlias = npt.NDArray[np.int32] | npt.NDArray[np.int64]
_Valid: TypeAlias = npt.NDArray[np.bool_] | npt.NDArray[np.uint8]

#: One row per data record (offset, timestamp, key/value/header positions in ``data``, ...).
RECORD_DTYPE: Final[np.dtype[np.void]]
#: One row per batch (position, header fields, decoded attribute flags, control marker).
BATCH_DTYPE: Final[np.dtype[np.void]]
#: One row per record header (key/value positions in ``data``).
HEADER_DTYPE: Final[np.dtype[np.void]]

def decode(
    data: Buffer,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int | None = None,
    skip_batches: npt.ArrayLike | None = None,
    keep_skipped_rows: bool = True,
) -> RecordTable: ...
def scan(
    data: Buffer, start: int = 0, stop: int = -1
) -> tuple[npt.NDArray[np.void], int, CorruptRecordError | None]: ...
#: Statuses of :func:`stamps`, per batch.
STAMPS_OK: Final[int]
STAMPS_SKIPPED: Final[int]
STAMPS_LEGACY: Final[int]
STAMPS_CODEC: Final[int]
STAMPS_TOO_LARGE: Final[int]
STAMPS_CORRUPT: Final[int]

def stamps(
    data: Buffer,
    *,
    skip_batches: npt.ArrayLike | None = None,
    verify_crc: bool = True,
    max_decompressed_size: int | None = None,
) -> tuple[
    npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int32], npt.NDArray[np.int64], npt.NDArray[np.int8]
]: ...
def encode(
    values: Iterable[Buffer | None],
    keys: Iterable[Buffer | None] | None = None,
    timestamps: _Timestamps | None = None,
    headers: Iterable[_Headers | None] | None = None,
    *,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    max_batch_records: int = 0,
    max_batch_bytes: int = 0,
    compression: int = 0,
    compression_level: int | None = None,
    control: bool = False,
    out: Buffer | None = None,
) -> bytes | int: ...
def encode_arrays(
    value_offsets: _Offsets,
    value_data: Buffer,
    value_valid: _Valid | None = None,
    key_offsets: _Offsets | None = None,
    key_data: Buffer | None = None,
    key_valid: _Valid | None = None,
    timestamps: npt.ArrayLike | None = None,
    *,
    header_offsets: _Offsets | None = None,
    hkey_offsets: _Offsets | None = None,
    hkey_data: Buffer | None = None,
    hval_offsets: _Offsets | None = None,
    hval_data: Buffer | None = None,
    hval_valid: _Valid | None = None,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
    partition_leader_epoch: int = -1,
    timestamp_type: int = 0,
    max_batch_records: int = 0,
    max_batch_bytes: int = 0,
    compression: int = 0,
    compression_level: int | None = None,
    out: Buffer | None = None,
) -> bytes | int: ...
def encode_control(
    kind: str,
    producer_id: int,
    producer_epoch: int,
    *,
    coordinator_epoch: int = 0,
    base_offset: int = 0,
    timestamp: int | None = None,
    partition_leader_epoch: int = -1,
) -> bytes: ...

@disjoint_base
class BatchBuilder:
    @property
    def base_offset(self) -> int: ...
    def __init__(
        self,
        *,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        transactional: bool = False,
        partition_leader_epoch: int = -1,
        timestamp_type: str | int = "create",
        compression: str | int | None = None,
        compression_level: int | None = None,
    ) -> None: ...
    def __len__(self) -> int: ...
    @property
    def size_in_bytes(self) -> int: ...
    def append(
        self,
        value: Buffer | None,
        key: Buffer | None = None,
        timestamp: int | None = None,
        headers: _Headers | None = None,
    ) -> int: ...
    def build(self) -> bytes: ...

def slices(
    data: Buffer, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int32]
) -> list[bytes | None]: ...

# for tests and tools
def _decode_varint(data: Buffer, pos: int = 0) -> tuple[int, int]: ...
def _decode_varlong(data: Buffer, pos: int = 0) -> tuple[int, int]: ...
def _encode_varint(value: int) -> bytes: ...
def _encode_varlong(value: int) -> bytes: ...
def _check_layouts() -> None: ...
def _now_ms() -> int: ...

def set_threads(n: int) -> int: ...
def get_threads() -> int: ...

# kbatch's helper thread, for the compiled modules (its jobs are handed over from C)
@disjoint_base
class Helper:
    def __init__(self, threaded: bool) -> None: ...
    @property
    def threaded(self) -> bool: ...
    def wait_idle(self) -> None: ...
