"""Doctor reporters: a table for people, JSON and JUnit XML for CI. Checks never print; these do."""

from __future__ import annotations

import json
from xml.sax.saxutils import escape, quoteattr

from stackctl.doctor.registry import CHECKS, FAIL, PASS, SKIP, SKIPPED_BY_REQUEST, WARN

_MARKS = {PASS: "ok", WARN: "WARN", FAIL: "FAIL", SKIP: "skip"}


def summary(results) -> dict:
    counts = {PASS: 0, WARN: 0, FAIL: 0, SKIP: 0}
    for result in results:
        counts[result.status] += 1
    return counts


def table(results, title: str) -> str:
    lines = [title]
    width = max((len(r.check_id) for r in results), default=10)
    scope = None
    for result in results:
        check = CHECKS[result.check_id]
        if check.scope != scope:
            scope = check.scope
            lines.append(f"\n{scope}")
        lines.append(f"  {_MARKS[result.status]:<4}  {result.check_id:<{width}}  {result.message}")
        if result.status in (FAIL, WARN):
            lines.append(f"  {'':<4}  {'':<{width}}  fix: {result.fix}")
    counts = summary(results)
    requested = skipped_by_request(results)
    lines.append(f"\n{counts[PASS]} passed, {counts[FAIL]} failed, {counts[WARN]} warnings, {counts[SKIP]} skipped "
                 f"({len(requested)} by request{': ' + ', '.join(requested) if requested else ''})")
    if counts[FAIL]:
        lines.append("NOT HEALTHY: the stack is not what the recipe says (see `stackctl explain ID`).")
    return "\n".join(lines)


def skipped_by_request(results) -> list[str]:
    """Ids skipped by --skip or the recipe's checks.skip (not the checks that could not determine their fact)."""
    return [r.check_id for r in results if r.status == SKIP and r.message == SKIPPED_BY_REQUEST]


def as_json(results, meta: dict) -> str:
    return json.dumps({**meta, "summary": summary(results), "skipped_by_request": skipped_by_request(results),
                       "results": [r.to_dict() for r in results]}, indent=2)


def junit(results, suite: str) -> str:
    """JUnit XML: one testcase per check; fail -> <failure>, skip -> <skipped>, warn -> passes with system-out."""
    counts = summary(results)
    cases = []
    for result in results:
        check = CHECKS[result.check_id]
        name = quoteattr(result.check_id)
        head = f'    <testcase classname={quoteattr(f"stackctl.doctor.{check.scope}")} name={name} time="0">'
        body = ""
        if result.status == FAIL:
            body = (f"\n      <failure message={quoteattr(result.message)} type={quoteattr(check.severity)}>"
                    f"{escape(result.message)}\nfix: {escape(result.fix)}</failure>\n    ")
        elif result.status == SKIP:
            body = f"\n      <skipped message={quoteattr(result.message)}/>\n    "
        elif result.status == WARN:
            body = f"\n      <system-out>{escape('warning: ' + result.message)}</system-out>\n    "
        cases.append(f"{head}{body}</testcase>")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuites tests="{len(results)}" failures="{counts[FAIL]}" skipped="{counts[SKIP]}">\n'
            f'  <testsuite name={quoteattr(suite)} tests="{len(results)}" failures="{counts[FAIL]}" errors="0" '
            f'skipped="{counts[SKIP]}">\n' + "\n".join(cases) + "\n  </testsuite>\n</testsuites>\n")
