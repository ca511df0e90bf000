"""server.omp-binding: whether vLLM-CPU kept cores free of its OpenMP threads for its scheduler (and KV connector),
judged from the binding it logged (doctor/parsers/omp_log.py)."""

from __future__ import annotations

from stackctl.doctor.parsers.omp_log import RESERVE_ENV, parse_binding
from stackctl.doctor.registry import Unavailable, check, passed, warned
from stackctl.knowledge.kinds import platform_of


@check("server.omp-binding", "server", "warning",
       "vLLM-CPU keeps cores free of its OpenMP threads for its scheduler (and KV connector)",
       f"give the stack more cores than vLLM reserves (one per worker, two with a KV connector), or set serve.env "
       f"{RESERVE_ENV} = \"1\" to keep one core for the scheduler (one core fewer computes)")
def omp_binding(ctx):
    """Reads the binding the server logged at start. Passes when vLLM reserved cores that its OpenMP threads do not
    use; warns when it reserved none because the container has too few cores (its own warning `Selected CPU core
    number (N) should be greater than reserved CPU core number (N)`): every step's OpenMP team then shares its cores
    with the scheduler and the connector, and any other load on them slows the server several-fold. Seen on a 2-core
    host with `stackctl bench --sweep` (1 user, 1,024-token contexts): vLLM gave the LMCache server both cores and the
    HBM-only server one; with the host idle the LMCache server's p50 TTFT was 0.6x the other's, with the host busy
    with other work 7x."""
    if not platform_of(ctx.recipe).cpu_computes:
        raise Unavailable("the GPUs compute here: vLLM binds no OpenMP threads")
    ctx.require_healthy()
    binding = parse_binding(ctx.server_log())
    if binding is None:
        raise Unavailable("the server logged no OpenMP binding (VLLM_CPU_OMP_THREADS_BIND=nobind, or a vLLM that does "
                          "not log it)")
    details = {"compute_cores": list(binding.compute_cores), "reserved": list(binding.reserved),
               "wanted_reserved": binding.wanted_reserved}
    if not binding.reserved:
        why = (f"vLLM wanted {binding.wanted_reserved} reserved and the container has "
               f"{len(binding.compute_cores)}" if binding.too_few_cores else "none reserved")
        return warned(f"{binding.describe()}: {why}; the scheduler and the KV connector share every core with the "
                      f"OpenMP threads", **details)
    shared = set(binding.reserved) & set(binding.compute_cores)
    if shared:
        return warned(f"{binding.describe()}: cores {sorted(shared)} are both reserved and computing", **details)
    return passed(binding.describe(), **details)
