"""`stackctl doctor`: prove that a stack is what its recipe says, on the host, in the image, and live."""

from __future__ import annotations

from stackctl.doctor.registry import (
    CHECKS,
    SCOPES,
    SKIP,
    SKIPPED_BY_REQUEST,
    Result,
)


def run_doctor(context, scopes=SCOPES, skip=()) -> tuple[list[Result], bool]:
    """Run every registered check of the given scopes, in scope order. Returns (results, doctor_failed) where
    doctor_failed means doctor itself could not run part of its job (a check crashed, or no engine)."""
    from stackctl.doctor.all_checks import load_all

    load_all()
    skipped = set(skip) | set(context.recipe.checks.skip)
    results, broken = [], False
    for scope in SCOPES:
        if scope not in scopes:
            continue
        for check in [c for c in CHECKS.values() if c.scope == scope]:
            if check.id in skipped:
                results.append(Result(SKIP, SKIPPED_BY_REQUEST, check_id=check.id))
                continue
            try:
                results.append(check.run(context))
            except Exception as exc:  # a crashed check must not hide the others; doctor reports exit 2
                broken = True
                results.append(Result(SKIP, f"check crashed: {type(exc).__name__}: {exc}", check_id=check.id))
    if any(scope in scopes for scope in ("image", "server")) and context.engine_or_none() is None:
        broken = True
    return results, broken
