"""The CPU stack's dtype: whether this CPU multiplies it natively (host), and what the live server really computes in
(server). An emulated bf16 is the silent 50x of CPU stacks: vLLM serves it on every x86 CPU without a word."""

from __future__ import annotations

from stackctl.doctor.registry import Unavailable, check, failed, passed
from stackctl.host.isa import canonical_dtype
from stackctl.host.prefill import served_dtype
from stackctl.knowledge.kinds import platform_of


def _cpu_only(ctx) -> None:
    if not platform_of(ctx.recipe).cpu_computes:
        raise Unavailable(f"platform {ctx.recipe.stack.platform}: the GPU computes, not this CPU")


def matmul_peak(ctx, fresh: bool = False):
    """This host's matmul GFLOP/s per dtype, measured in the stack's image (kept under the image id; --fresh, or
    `fresh`, measures again and keeps the best); None with the reason when there is no engine or image."""
    def measure():
        from stackctl.measure.matmul import measure as run_probe

        try:
            engine = ctx.engine()
        except Unavailable as exc:
            return None, str(exc)
        try:
            image = ctx.image()  # the inspect the image checks made already
        except Unavailable:
            return None, f"image {ctx.image_tag} not built"
        try:
            peak = run_probe(engine, image.id, environment=dict(ctx.spec.environment), cpuset=_cpuset(ctx),
                             isa=_isa(ctx).to_dict(), stack=ctx.recipe.stack.name,
                             fresh=fresh or not ctx.use_cache)
        except ValueError as exc:
            return None, str(exc)
        return peak, ""

    return ctx.remember("matmul-peak-fresh" if fresh else "matmul-peak", measure)


def _cpuset(ctx) -> dict:
    """The CPU set `up` gives the container: the probe measures on the same CPUs."""
    from stackctl.host import PinningError, pinning_for
    from stackctl.host.placement import placement

    try:
        return placement(pinning_for(ctx.recipe, ctx.host)).cpuset
    except PinningError:
        return {}


def _isa(ctx):
    from stackctl.host.dtype import stack_isa

    return stack_isa(ctx.recipe, ctx.host.isa)


@check("host.cpu-dtype", "host", "error", "the CPU stack's dtype runs natively on this CPU",
       'set model.dtype = "auto" (float32 where this CPU emulates bf16) or "float32"')
def cpu_dtype(ctx):
    """The dtype the stack serves in (the recipe's model.dtype, or stackctl up's decision for "auto") against this
    CPU: its features (/proc/cpuinfo, capped by ONEDNN_MAX_CPU_ISA in the stack's environment) and the GFLOP/s of a
    prefill-sized matmul in each dtype, measured in the stack's image on this host's CPUs (probes/matmul/peak.py).
    A 16-bit dtype at half of float32's speed or more is native, under a tenth emulated, and in between the CPU's
    flags decide (a probe beside other work reads low): without AVX512-BF16 or AMX bf16 ran 0.4 GFLOP/s against
    float32's 124 on an AMD EPYC host, and a prompt took 33 s instead of under one."""
    from stackctl.host.dtype import decide_dtype

    _cpu_only(ctx)
    isa = _isa(ctx)
    if getattr(ctx, "host_root", None):  # a captured host: judged by its CPU features alone
        peak, why = None, f"judging the captured host {ctx.host_root}, the matmul runs only on this machine"
    else:
        peak, why = matmul_peak(ctx)
    decision = decide_dtype(ctx.recipe, isa, peak)
    details = {"isa": isa.to_dict(), "decision": decision.to_dict()}
    if decision.emulated is None:
        raise Unavailable(f"CPU features unknown and the matmul not measured ({why or 'no figures'})")
    measured = "" if peak else f"; matmul not measured: {why}"
    if decision.emulated:
        return failed(f"{decision.reason}{measured}", **details)
    return passed(f"{decision.reason}{measured}", **details)


@check("server.dtype", "server", "error", "the running server computes in a dtype this CPU runs natively",
       'set model.dtype = "auto" and run `stackctl up` again (stackctl then passes the dtype this CPU runs natively)')
def server_dtype(ctx):
    """What the live server computes in, read from vLLM's engine start-up line in its log (`dtype=torch.X`), judged
    against this CPU like host.cpu-dtype: a server can run another dtype than the recipe meant (a server started
    before stackctl decided the dtype, a --dtype in extra_args, vLLM's own choice of bf16 on every x86 CPU)."""
    from stackctl.host.dtype import decide_dtype, emulated_on, evidence, host_decides

    _cpu_only(ctx)
    running = served_dtype(ctx.server_log())
    if running is None:
        raise Unavailable("the server's log has no engine start-up line with its dtype")
    served = canonical_dtype(running)
    if served is None:
        raise Unavailable(f"the server runs {running}, which is no float dtype this check judges")
    isa = _isa(ctx)
    peak, why = matmul_peak(ctx)
    decision = decide_dtype(ctx.recipe, isa, peak)
    details = {"served": running, "decision": decision.to_dict()}
    emulated = emulated_on(served, isa, peak)
    if emulated is None:
        raise Unavailable(f"the server runs {running}; CPU features unknown and matmul not measured ({why})")
    if emulated:
        return failed(f"the server computes in {running}, which this CPU emulates ({evidence(served, isa, peak)})",
                      **details)
    if host_decides(ctx.recipe) and decision.served and served != decision.served:
        return failed(f"the server computes in {running}, but stackctl's decision for this host is "
                      f"{decision.served}: the container was started without it", **details)
    return passed(f"the server computes in {running}, native on this CPU ({evidence(served, isa, peak)})",
                  **details)


def prefill_floor(ctx):
    """The running stack's prefill floor (host/prefill.py): model config and dtype from the container, this host's
    matmul figures as host.cpu-dtype measured them. None where there is no running container."""
    def read():
        from stackctl.measure.prefill import model_floor

        floor = model_floor(ctx.container(), ctx.recipe.model.path, ctx.server_log())
        if not platform_of(ctx.recipe).cpu_computes:
            return floor
        peak, why = matmul_peak(ctx)
        return floor.with_peak(peak, why)

    from stackctl.host.prefill import Floor

    # The rate annotates a figure: it never breaks the check that prints it, but says why it is missing.
    try:
        return ctx.remember("prefill-floor", read)
    except Unavailable as exc:
        return Floor(None, None, None, str(exc))
    except Exception as exc:  # noqa: BLE001 - see above: reported where the rate would have been
        return Floor(None, None, None, f"its measurement failed: {type(exc).__name__}: {exc}")


def cold_rate_text(ctx, prompt_tokens: int, cached_tokens: int, ttft_s: float) -> str:
    """" (1,000 tokens recomputed at 3,030 tok/s, 860 GFLOP/s = 61% of this host's bfloat16 matmul peak)" for a
    cold TTFT, so a slow host or an emulated dtype shows in the line a user reads; " (prefill rate unknown: why)"
    when a part failed; "" without a running container."""
    floor = prefill_floor(ctx)
    if floor is None:
        return ""
    rate = floor.rate(prompt_tokens, cached_tokens, ttft_s)
    if rate is not None and rate.get("error") and floor.peak is not None:
        # Above the kept peak: that peak was measured beside other work (up's probe while another stack started).
        # Measured again now, between requests, the best of both stands; still above it, the figure is reported
        # as a failed measurement.
        peak, _ = matmul_peak(ctx, fresh=True)
        if peak is not None:
            floor = floor.with_peak(peak)
            rate = floor.rate(prompt_tokens, cached_tokens, ttft_s)
    return f" ({floor.text(rate)})"
