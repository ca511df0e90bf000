"""A tier kept in the server process's memory (cpu): nothing on the host to mount, prepare or see."""

from __future__ import annotations

from stackctl.storage.base import Storage


class Memory(Storage):
    name = "memory"


MEMORY = Memory()
