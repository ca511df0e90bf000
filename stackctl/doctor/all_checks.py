"""Every doctor check, loaded in one place (the check modules register on import, in report order: the host's
checks, the image's, the server's own, then LMCache's live ones, the --deep ones and the tiers')."""

from __future__ import annotations

# By module path, not through stackctl.doctor's face, which imports this module (run_doctor).
import stackctl.doctor.host_checks  # noqa: F401, I001
import stackctl.doctor.image_checks  # noqa: F401
import stackctl.doctor.server_checks  # noqa: F401
import stackctl.doctor.omp_binding  # noqa: F401
import stackctl.doctor.lmcache_live  # noqa: F401
import stackctl.doctor.lmcache_deep  # noqa: F401
import stackctl.doctor.offload_checks  # noqa: F401
import stackctl.doctor.tier_checks  # noqa: F401
import stackctl.doctor.dtype_checks  # noqa: F401
from stackctl.doctor.registry import CHECKS, Check


def load_all() -> dict[str, Check]:
    """The registry, every check module imported."""
    return CHECKS
