"""The check registry: every doctor check has a stable id, a scope, a severity, a summary, a fix and a doc page.

A check is a function from a DoctorContext to a Result. Checks never print; reporters do. A check that cannot
determine its fact returns SKIP with the reason, never PASS.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from stackctl import ids
from stackctl.text import clean_doc

SCOPES = ("host", "image", "server")
PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"
SKIPPED_BY_REQUEST = "skipped by request"  # the message of a check skipped by --skip or checks.skip


def parse_scopes(text: str, option: str = "--scope") -> list[str]:
    """The scopes of a --scope (or --gate) value ("host,image"), or a one-line error naming what is wrong."""
    from stackctl.errors import StackctlError

    scopes = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise StackctlError(f"{option}: unknown scope {', '.join(unknown)} (fix: use {', '.join(SCOPES)})")
    if not scopes:
        raise StackctlError(f"{option}: no scope given (fix: one or more of {', '.join(SCOPES)}, comma-separated)")
    return scopes


@dataclass(repr=False)
class Result:
    """One check's outcome. ``details`` holds the evidence (figures, log lines) for reporters and JSON. ``fix`` is
    the check's fix unless the check gave one that fits this case better (e.g. the recipe's platform).
    ``seconds`` is the check's wall time; the first check to need a shared fact (the engine, the image probe, the
    live proof) pays for gathering it."""

    status: str
    message: str
    details: dict = field(default_factory=dict)
    check_id: str = ""
    fix: str = ""
    seconds: float = 0.0

    def to_dict(self) -> dict:
        check = CHECKS[self.check_id]
        return {"id": self.check_id, "scope": check.scope, "severity": check.severity, "status": self.status,
                "message": self.message, "fix": self.fix if self.status in (FAIL, WARN) else "",
                "seconds": round(self.seconds, 3), "details": self.details}

    def __repr__(self):
        return f"Result({self.check_id}: {self.status}: {self.message})"


def passed(message: str, **details) -> Result:
    return Result(PASS, message, details)


def failed(message: str, *, fix: str = "", **details) -> Result:
    return Result(FAIL, message, details, fix=fix)


def warned(message: str, *, fix: str = "", **details) -> Result:
    return Result(WARN, message, details, fix=fix)


def skipped(reason: str, **details) -> Result:
    return Result(SKIP, reason, details)


@dataclass
class Check:
    """A registered check: id, scope, severity, summary, fix, doc page (`stackctl explain ID`), and the function."""

    id: str
    scope: str
    severity: str
    summary: str
    fix: str
    doc: str
    func: Callable = field(repr=False)

    def run(self, context) -> Result:
        """Run the check; a failure to determine the fact is a skip with the reason, never a pass."""
        from time import perf_counter

        started = perf_counter()
        try:
            result = self.func(context)
        except Unavailable as exc:
            result = skipped(str(exc))
        result.seconds = perf_counter() - started
        if self.severity == "warning" and result.status == FAIL:
            result.status = WARN
        result.check_id = self.id
        result.fix = result.fix or self.fix
        return result


class Unavailable(Exception):
    """A fact a check needs cannot be determined (no engine, no image, server down): the check skips."""


def require_this_machine(ctx, what: str) -> None:
    """Skip a host check whose fact is read from the machine doctor runs on (its Docker engine, a tier's mounted
    path, a measurement) when doctor judges a captured host tree instead (--host-root)."""
    root = getattr(ctx, "host_root", None)
    if root:
        raise Unavailable(f"judging the captured host {root}: {what} is read on the machine doctor runs on, "
                          "not in the capture")


CHECKS: dict[str, Check] = {}


def require_lmcache(spec, in_server: bool = True) -> None:
    """Skip with the reason unless LMCache runs in the vLLM process (in_server) or the image carries it: the cache
    off, or an offload engine (cache.offload) that runs LMCache as its own server or not at all."""
    from stackctl.knowledge.kinds import engine_of

    if not spec.recipe.cache.enabled:
        raise Unavailable("LMCache is off in the recipe")
    if not (spec.lmcache_in_server if in_server else spec.lmcache_in_image):
        engine = engine_of(spec.recipe)
        where = "runs as its own server, not in vLLM" if engine.lmcache_server else "does not run"
        raise Unavailable(f"cache.offload = {engine.name!r}: LMCache {where}; server.offload-hit proves the offload")


def check(check_id: str, scope: str, severity: str, summary: str, fix: str):
    """Register a check function under a stable id."""
    assert scope in SCOPES, scope

    def register(func):
        ids.register(check_id, ids.CHECK)
        CHECKS[check_id] = Check(check_id, scope, severity, summary, fix, clean_doc(func.__doc__ or summary), func)
        return func

    return register
