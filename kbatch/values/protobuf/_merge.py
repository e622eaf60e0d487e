"""The merge slow path's bytes: a message whose singular message fields occur more than once,
rewritten so that each occurs once, as Protobuf merges them, with everything else where it was.

Protobuf's rule (protobuf.dev/programming-guides/encoding, "Last One Wins"): a singular
embedded message met twice is merged, as if with ``MergeFrom``, which is what parsing the
concatenation of the occurrences' payloads gives. So the rewrite is on the wire: the payloads
of a field's occurrences are concatenated into one occurrence (where the first stood), then
rewritten the same way one level down; repeated messages and map entries are rewritten item
by item, in their order. A oneof member clears its siblings: an occurrence of another member
drops what came before of the oneof (a message member met again after a sibling starts afresh,
as upb's parse does).

Why not upb's own ``SerializeToString`` of its parse: upb writes a map's entries in its hash
table's order, not in the order their keys first came, so a record taking this path had its maps
reordered where the kernel keeps the wire order (and a projection that skips the merged field
kept it). The rewrite keeps every other byte as it came: the kernel then decodes it as any
record, maps' first-key order and the last value of a key included.

The caller has parsed the body with upb first (its refusal is the record's error); a body this
walk cannot read anyway raises :class:`ValueError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Merger"]

_MESSAGE = 11  # FieldDescriptor.TYPE_MESSAGE
_WIRE = {1: 1, 6: 1, 16: 1, 2: 5, 7: 5, 15: 5, 9: 2, 11: 2, 12: 2, 10: 3}  # the others: varints (0)
_MAX_DEPTH = 100


@dataclass(frozen=True)
class _Field:
    wire: int  # the wire type of one (unpacked) value
    packable: bool  # a repeated scalar: wire 2 too (packed)
    merged: bool  # a singular message: its occurrences merged
    oneof: int  # index of its oneof in the message, or -1
    message: Any  # its message's descriptor (a message or a map entry), or None
    walk: bool  # a message whose bytes may hold a singular message twice: rewritten


def _may_merge(descriptor: Any) -> bool:
    """Whether a message of ``descriptor`` may hold a singular message field (at any depth):
    one that cannot is copied as it is, not walked."""
    seen, todo = {descriptor.full_name}, [descriptor]
    while todo:
        for fd in todo.pop().fields:
            if fd.type != _MESSAGE:
                continue
            if not fd.is_repeated:
                return True
            if fd.message_type.full_name not in seen:
                seen.add(fd.message_type.full_name)
                todo.append(fd.message_type)
    return False


class Merger:
    """Bodies of ``descriptor`` (upb's) rewritten with each singular message field written once,
    its occurrences merged (see the module); everything else as it came. One per batch: what
    each message type's fields need is worked out once."""

    def __init__(self, descriptor: Any) -> None:
        self.descriptor = descriptor
        self.plans: dict[str, dict[int, _Field]] = {}

    def __call__(self, body: bytes) -> bytes:
        """``body`` rewritten.

        Raises
        ------
        ValueError
            Where the bytes cannot be walked (cut short, a varint over 10 bytes, wire type 6 or
            7, an unmatched group end, more than 100 levels).
        """
        return _rewrite(bytes(body), self.descriptor, self.plans, 0)


def _plan(descriptor: Any, plans: dict[str, dict[int, _Field]]) -> dict[int, _Field]:
    """Field number -> what the rewrite does with it, for ``descriptor``."""
    plan = plans.get(descriptor.full_name)
    if plan is None:
        plan = {}
        oneofs = {o.full_name: k for k, o in enumerate(descriptor.oneofs)}
        for fd in descriptor.fields:
            sub = fd.message_type if fd.type == _MESSAGE else None
            oneof = fd.containing_oneof
            wire = _WIRE.get(fd.type, 0)
            plan[fd.number] = _Field(wire, fd.is_repeated and wire in (0, 1, 5), sub is not None and not fd.is_repeated,
                                     -1 if oneof is None else oneofs[oneof.full_name], sub,
                                     sub is not None and _may_merge(sub))
        plans[descriptor.full_name] = plan
    return plan


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """The varint at ``pos`` (at most 10 bytes) and the position after it."""
    if pos < len(data) and data[pos] < 0x80:
        return data[pos], pos + 1
    value = shift = 0
    for at in range(pos, min(pos + 10, len(data))):
        value |= (data[at] & 0x7F) << shift
        if data[at] < 0x80:
            return value, at + 1
        shift += 7
    raise ValueError(f"a varint cut short or longer than 10 bytes at byte {pos}")


def _encode(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _skip(data: bytes, pos: int, number: int, wire: int, depth: int) -> int:
    """The end of a value of ``wire`` type starting at ``pos`` (a group: past its end tag)."""
    if wire == 0:
        return _varint(data, pos)[1]
    if wire in (1, 5):
        end = pos + (8 if wire == 1 else 4)
    elif wire == 2:
        size, pos = _varint(data, pos)
        end = pos + size
    elif wire == 3:
        if depth >= _MAX_DEPTH:
            raise ValueError("groups nested deeper than 100")
        while True:
            key, pos = _varint(data, pos)
            if key & 7 == 4:
                if key >> 3 != number:
                    raise ValueError(f"an unmatched end of group at byte {pos}")
                return pos
            pos = _skip(data, pos, key >> 3, key & 7, depth + 1)
    else:
        raise ValueError(f"wire type {wire} at byte {pos}")
    if end > len(data):
        raise ValueError(f"a value cut short at byte {pos}")
    return end


def _rewrite(data: bytes, descriptor: Any, plans: dict[str, dict[int, _Field]], depth: int) -> bytes:
    if depth >= _MAX_DEPTH:
        raise ValueError("messages nested deeper than 100")
    plan = _plan(descriptor, plans)
    # (field number, its bytes or None for a merged field's place, its oneof or -1, that oneof's
    # generation then): a oneof's member set anew starts a generation, the older pieces dropped
    pieces: list[tuple[int, bytes | None, int, int]] = []
    parts: dict[int, list[bytes]] = {}  # a merged field's payloads, in their order
    members: dict[int, int] = {}  # each oneof's member met last
    generation: dict[int, int] = {}
    pos = 0
    size = len(data)
    while pos < size:
        start = pos
        key = data[pos]
        if key < 0x80:  # the common case: a one-byte tag, a one-byte varint or length
            pos += 1
        else:
            key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0 and pos < size and data[pos] < 0x80:
            end = pos + 1
        elif wire == 2 and pos < size and data[pos] < 0x80 and pos + 1 + data[pos] <= size:
            end = pos + 1 + data[pos]
        else:
            end = _skip(data, pos, number, wire, depth)
        field = plan.get(number)
        if field is None or (wire != field.wire and not (wire == 2 and field.packable)):
            pieces.append((-1, data[start:end], -1, 0))  # unknown, or a known field in another wire type
            pos = end
            continue
        oneof = field.oneof
        if oneof >= 0 and members.setdefault(oneof, number) != number:  # a sibling was set: cleared
            parts.pop(members[oneof], None)
            members[oneof] = number
            generation[oneof] = generation.get(oneof, 0) + 1
        gen = generation.get(oneof, 0)
        if field.merged:
            _, payload = _varint(data, pos)
            if number not in parts:
                parts[number] = []
                pieces.append((number, None, oneof, gen))
            parts[number].append(data[payload:end])
        elif field.walk:  # a repeated message or a map entry: each item rewritten
            _, payload = _varint(data, pos)
            item = _rewrite(data[payload:end], field.message, plans, depth + 1)
            pieces.append((number, data[start:pos] + _encode(len(item)) + item, oneof, gen))
        else:
            pieces.append((number, data[start:end], oneof, gen))
        pos = end
    out = bytearray()
    for number, piece, oneof, gen in pieces:
        if oneof >= 0 and gen != generation.get(oneof, 0):
            continue  # cleared by a sibling after it
        if piece is None:
            item = b"".join(parts[number])
            if plan[number].walk:  # (else the concatenation holds no message twice)
                item = _rewrite(item, plan[number].message, plans, depth + 1)
            out += _encode(number << 3 | 2) + _encode(len(item)) + item
        else:
            out += piece
    return bytes(out)

