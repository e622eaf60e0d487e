from typing import Any

def decode_struct_array(
    data: Any,
    pos: int,
    end: int,
    count: int,
    program: tuple[Any, ...],
    tagged: bool,
    view: memoryview,
    records: type,
    /,
) -> tuple[list[dict[str, Any]], int] | None: ...
