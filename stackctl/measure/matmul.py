"""This host's matmul peak per dtype, measured inside the stack's image by probes/matmul/peak.py.

Figures are kept under the image id, the environment, the CPU set and the CPU's features (state dir), since none of
those change them without changing the key; `fresh=True` measures again, and what is kept and returned is the best
figure each dtype reached (a probe that shared the CPUs with other work measured less than the host can do).
"""

from __future__ import annotations

import json

from stackctl.engine import docker_adapter
from stackctl.host.matmul import MatmulPeak, parse_probe
from stackctl.resources import shipped
from stackctl.state.store import stack_dir, write_atomically

PROBE_IN_CONTAINER = "/opt/stackctl/probes/matmul_peak.py"
TIMEOUT_S = 180


def cache_key(image_id: str, environment: dict, cpuset: dict, isa: dict, probe: bytes) -> str:
    """Everything the figures depend on: the image, the environment, the CPUs, the CPU's features and the probe."""
    import hashlib

    probe_hash = hashlib.sha256(probe).hexdigest()
    return hashlib.sha256(json.dumps([image_id, environment, cpuset, isa, probe_hash],
                                     sort_keys=True).encode()).hexdigest()[:16]


def measure(engine, image_id: str, *, environment: dict, cpuset: dict, isa: dict, stack: str,
            dtypes: tuple[str, ...] = ("float32", "bfloat16"), fresh: bool = False) -> MatmulPeak:
    """Run the probe in the image `image_id` with the stack's environment and CPU set; reuse the figures kept
    under the same key unless `fresh`. A fresh measurement is kept, and returned, as the best of it and the figures
    kept before: a peak is the best this host reaches, and a probe measured beside a running server (bench measures
    after its arms, with the server still polling) reads low, which once put a prefill at 120% of "the peak".
    Raises ValueError when the probe cannot measure."""
    probe = shipped("probes") / "matmul" / "peak.py"
    key = cache_key(image_id, environment, cpuset, isa, probe.read_bytes())
    cache_file = stack_dir(stack) / "matmul" / f"{key}.json"
    kept = _read_kept(cache_file)
    if kept is not None and not fresh:
        return kept
    output = docker_adapter.run_to_end(
        engine, image_id, ["python", PROBE_IN_CONTAINER, "--dtypes", ",".join(dtypes)],
        environment=environment, volumes={str(probe): {"bind": PROBE_IN_CONTAINER, "mode": "ro"}},
        timeout=TIMEOUT_S, **cpuset)
    best = parse_probe(output)
    best = best.best_of(kept) if kept else best
    write_atomically(cache_file, json.dumps(best.to_dict()))
    return best


def _read_kept(cache_file) -> MatmulPeak | None:
    """The figures kept under a key; None when there are none (a damaged file is measured again)."""
    if not cache_file.is_file():
        return None
    try:
        return MatmulPeak.from_dict(json.loads(cache_file.read_text()))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
