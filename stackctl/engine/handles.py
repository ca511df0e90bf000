"""What a caller holds of the engine, its containers and its images: stackctl's own handles, which name only what
stackctl reads of one (a container's id, name, status and labels; an image's id and labels; nothing of the engine).
Everything else, the engine's records and every operation, goes through docker_adapter, the one module that opens a
handle: no caller reaches docker-py's objects or their fields, and a
handle around a unit test's fake behaves as one around the engine's."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any


class _Opaque:
    __slots__ = ("_native",)
    _native: Any

    def __init__(self, native: Any):
        object.__setattr__(self, "_native", native)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is read-only")


class Engine(_Opaque):
    """A Docker engine, to hand to docker_adapter's functions: nothing to read on it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"Engine({type(self._native).__name__})"


class _Handle(_Opaque):
    __slots__ = ()

    @property
    def id(self) -> str:
        return str(self._native.id)

    @property
    def labels(self) -> MappingProxyType:
        return MappingProxyType(dict(self._native.labels or {}))

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.id == self.id  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.id[:19]})"


class Container(_Handle):
    """A container: its id, name, labels and status (as the engine said when last asked: docker_adapter.refresh)."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return str(self._native.name)

    @property
    def status(self) -> str:
        return str(self._native.status)


class Image(_Handle):
    """An image: its id and labels."""

    __slots__ = ()


def opened(thing: Any) -> Any:
    """The engine's own object behind a handle (anything else as it is). For docker_adapter only."""
    return thing._native if isinstance(thing, _Opaque) else thing
