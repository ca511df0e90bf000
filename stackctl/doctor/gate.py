"""`up --gate SCOPES`: doctor run on the new deployment before `up` calls it done. The CLI hands `gate_for(scopes)`
to `up` as a callback, so the lifecycle never imports doctor; a failing check raises, and `up` rolls back."""

from __future__ import annotations

from stackctl.doctor import run_doctor
from stackctl.doctor.context import DoctorContext
from stackctl.doctor.registry import parse_scopes
from stackctl.errors import StackctlError


def gate_for(value: str):
    """The gate of a --gate value ("server", "image,server"), checked now, so a typo fails before any build: a
    function of (the stack spec, the bundle files up rendered, say) that raises StackctlError naming what failed."""
    scopes = parse_scopes(value, "--gate")

    def gate(spec, files: dict[str, bytes], say) -> None:
        say(f"gate: stackctl doctor --scope {','.join(scopes)}")
        results, broken = run_doctor(DoctorContext(spec, say=say, files=files), scopes)
        stack = spec.name
        failing = [r for r in results if r.status == "fail"]
        if failing:
            raise StackctlError(f"{stack}: gate failed (doctor --scope {value}): "
                                + "; ".join(f"{r.check_id}: {r.message}" for r in failing))
        if broken:
            raise StackctlError(f"{stack}: gate could not run (doctor --scope {value} crashed or found no engine)")

    return gate
