"""Arrays of structs keyed by their ``mapKey`` fields."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["KeyedList"]

class KeyedList(list):  # type: ignore[type-arg]
    """A decoded array of structs whose definition marks key fields (``mapKey``).

    Kafka's JSON definitions mark the fields that identify an element of some
    arrays (``"mapKey": true``: a topic by its ``name``, a broker by its
    ``node_id``, a config resource by ``(resource_type, resource_name)``).
    Decoding such an array gives a ``KeyedList``: a ``list`` of dicts, equal
    to the plain list of the same dicts, encoded the same way, plus lookup by
    key. The key of an element is the value of its one key field, or the
    tuple of the values when several fields make up the key (in definition
    order).

    Lookups scan the list (it stays a plain mutable list, so there is no index
    to go stale); for many lookups take :meth:`by_key` once.

    Parameters
    ----------
    items : iterable of dict, optional
        The elements.
    key_fields : tuple of str
        The dict keys that make up the key.

    Examples
    --------
    >>> brokers = KeyedList([{"node_id": 1, "host": "a"}, {"node_id": 2, "host": "b"}], ("node_id",))
    >>> brokers.find(2)["host"], brokers.find(3), 2 in brokers.by_key()
    ('b', None, True)
    >>> brokers == [{"node_id": 1, "host": "a"}, {"node_id": 2, "host": "b"}]
    True
    """

    __slots__ = ("key_fields",)

    key_fields: tuple[str, ...]

    def __init__(self, items: Iterable[Any] = (), key_fields: Iterable[str] = ()) -> None:
        super().__init__(items)
        self.key_fields = tuple(key_fields)
        if not self.key_fields:
            raise ValueError("a KeyedList needs at least one key field")

    def key_of(self, item: dict[str, Any]) -> Any:
        """The key of one element (a value, or a tuple for a composite key)."""
        fields = self.key_fields
        if len(fields) == 1:
            return item.get(fields[0])
        return tuple(item.get(f) for f in fields)

    def find(self, key: Any, default: Any = None) -> Any:
        """The first element whose key is ``key``, else ``default``.

        Parameters
        ----------
        key : object
            The key value; a tuple of values for a composite key.
        default : object, optional
            Returned when no element has the key.
        """
        key_of = self.key_of
        for item in self:
            if key_of(item) == key:
                return item
        return default

    def find_all(self, key: Any) -> list[Any]:
        """Every element whose key is ``key`` (Kafka allows duplicates), in order."""
        key_of = self.key_of
        return [item for item in self if key_of(item) == key]

    def by_key(self) -> dict[Any, Any]:
        """A new ``dict`` from key to element (the first element of duplicate keys)."""
        out: dict[Any, Any] = {}
        key_of = self.key_of
        for item in self:
            out.setdefault(key_of(item), item)
        return out

    def copy(self) -> KeyedList:
        """A shallow copy, keeping the key fields."""
        return KeyedList(self, self.key_fields)

    def __reduce__(self) -> tuple[Any, ...]:
        return KeyedList, (list(self), self.key_fields)


def keyed(key_fields: tuple[str, ...]) -> Any:
    """A function turning a decoded list into a :class:`KeyedList` with ``key_fields``."""

    def wrap(items: list[Any]) -> KeyedList:
        return KeyedList(items, key_fields)

    return wrap

