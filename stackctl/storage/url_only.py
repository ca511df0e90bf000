"""A tier that is its URL alone (a server LMCache reaches itself, as its redis:// backend): nothing on this host to
mount, prepare or see; fleet holds hosts with the same URL to one set of cache keys."""

from __future__ import annotations

from stackctl.storage.base import Storage, url_place


class UrlOnly(Storage):
    name = "url-only"

    def place(self, tier) -> str:
        return url_place(tier)


URL_ONLY = UrlOnly()
