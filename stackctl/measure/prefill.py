"""A running stack's prefill floor (host/prefill.py's Floor), read from its container: the model's cost from its
config.json there and the dtype its server's log reports."""

from __future__ import annotations

import json

from stackctl.engine import docker_adapter
from stackctl.host.isa import canonical_dtype
from stackctl.host.prefill import Floor, served_dtype
from stackctl.knowledge.model_flops import prefill_cost


def model_floor(container, model_path: str, log: str | None = None) -> Floor:
    """A running stack's floor without the matmul figures: the model's cost from its config.json in the container and
    the dtype from the server's log (`log`, when the caller has read it already). The caller adds the figures
    (`Floor.with_peak`): bench measures them in its run, doctor reads the ones it keeps."""
    missing = []
    cost = None
    raw = docker_adapter.read_file(container, f"{model_path.rstrip('/')}/config.json")
    if raw is None:
        missing.append(f"no config.json under {model_path} in the container")
    else:
        try:
            cost = prefill_cost(json.loads(raw))
        except ValueError as exc:
            missing.append(str(exc))
    dtype = canonical_dtype(served_dtype(docker_adapter.logs_text(container) if log is None else log))
    if dtype is None:
        missing.append("the server's log names no dtype")
    return Floor(cost, dtype, None, "; ".join(missing))
