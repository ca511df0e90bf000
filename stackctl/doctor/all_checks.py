"""Every doctor check, loaded in one place (the check modules register on import, in report order: the host's
checks, the image's, the server's own, then LMCache's live ones, the --deep ones and the tiers')."""

from __future__ import annotations

from stackctl.doctor import (host_checks, image_checks, server_checks, lmcache_live,  # noqa: F401, I001
                             lmcache_deep, tier_checks, dtype_checks)
from stackctl.doctor.registry import CHECKS, Check


def load_all() -> dict[str, Check]:
    """The registry, every check module imported."""
    return CHECKS
