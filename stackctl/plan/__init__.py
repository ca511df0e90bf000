"""KV-cache capacity planning: does the working set fit in HBM, and which LMCache tier has to hold it?

One module per step: capacity (bytes and tokens per place), regime (the smallest place that holds the working set,
and the recommendation), make (the Plan record and make_plan, which puts the two together), text (the plan for
people) and recipe (plan_recipe: the facts a recipe and its host give, gathered for make_plan).
"""

from __future__ import annotations

from stackctl.plan.capacity import (
    HOST_RAM_HEADROOM_FRACTION,
    HOST_RAM_HEADROOM_MIN_BYTES,
    OVERHEAD_RESERVE_FRACTION,
    host_ram_headroom,
)
from stackctl.plan.make import Plan, make_plan
from stackctl.plan.recipe import plan_recipe
from stackctl.plan.regime import (
    REGIME_CPU_TIER,
    REGIME_DISK_TIER,
    REGIME_DOES_NOT_FIT,
    REGIME_FITS_HBM,
    REGIME_REMOTE_TIER,
    REGIME_UNKNOWN,
)
from stackctl.plan.text import format_text

__all__ = [
    "HOST_RAM_HEADROOM_FRACTION", "HOST_RAM_HEADROOM_MIN_BYTES", "OVERHEAD_RESERVE_FRACTION", "host_ram_headroom",
    "Plan", "make_plan", "plan_recipe", "format_text",
    "REGIME_CPU_TIER", "REGIME_DISK_TIER", "REGIME_DOES_NOT_FIT", "REGIME_FITS_HBM", "REGIME_REMOTE_TIER",
    "REGIME_UNKNOWN",
]
