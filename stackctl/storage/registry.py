"""The storages by name: a tier kind's `storage` (knowledge/kinds.py) names one of them."""

from __future__ import annotations

from stackctl.errors import StackctlError
from stackctl.knowledge.kinds import kind_of
from stackctl.storage.base import Storage
from stackctl.storage.host_directory import HOST_DIRECTORY
from stackctl.storage.memory import MEMORY
from stackctl.storage.s3_bucket import S3_BUCKET
from stackctl.storage.url_only import URL_ONLY

STORAGES: dict[str, Storage] = {}


def register(storage: Storage) -> None:
    """Make a storage known by its name: the shipped ones below, any other the same way."""
    STORAGES[storage.name] = storage


for _storage in (MEMORY, HOST_DIRECTORY, S3_BUCKET, URL_ONLY):
    register(_storage)


def storage_named(name: str) -> Storage:
    storage = STORAGES.get(name)
    if storage is None:
        raise StackctlError(f"unknown storage {name!r} (known: {', '.join(STORAGES)})")
    return storage


def storage_of_kind(kind) -> Storage:
    """The storage of a tier kind's record."""
    return storage_named(kind.storage)


def storage_of(tier) -> Storage:
    """The storage of a recipe tier (by its kind)."""
    return storage_of_kind(kind_of(tier))
