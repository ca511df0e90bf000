"""The plan for a recipe: gathers the model shape, GPU memory, weights size, tier sizes and host RAM/disk, then
sizes them with make_plan."""

from __future__ import annotations

import os
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.knowledge.kinds import kind_of, platform_of
from stackctl.knowledge.kv_math import GiB
from stackctl.plan.make import Plan, chunk_advice, make_plan


def plan_recipe(recipe, *, users: int, context_tokens: int, gpu: str | None = None, host=None,
                host_ram_bytes: int | None = None, serve_dtype: str | None = None) -> Plan:
    """The plan for a recipe: model shape from its config.json (else the built-in table), GPU memory from the host
    (else --gpu, else the recipe's gpu_arch), tier sizes from the recipe, RAM from --host-ram (else this host, and
    the plan says so) and disk free space from this host; with LMCache, what its chunk size costs a hit beside
    vLLM's KV block (chunk_advice). `serve_dtype`: the dtype the server computes in when it is known (a CPU stack's
    decision by `up`: float32 KV takes twice the bytes), else on a CPU stack with model.dtype "auto" the decision
    `up` makes on `host` by its CPU flags, else the recipe's model.dtype."""
    from stackctl.bundle.stackspec import lmcache_chunk_size, vllm_block_size
    from stackctl.knowledge.gpu_table import lookup_gpu
    from stackctl.knowledge.model_table import lookup, recipe_shape
    from stackctl.knowledge.weights import weights_size

    model_dir = Path(recipe.model.path)
    resolved = recipe_shape(recipe)
    if resolved is None:
        raise StackctlError(f"{recipe.source}: model.path {recipe.model.path!r}: no config.json there and not in the "
                            "built-in model table (fix: run plan where the model directory is readable)")
    shape, shape_source = resolved
    notes = [f"model shape from {shape_source}"]
    if serve_dtype is None and host is not None:
        serve_dtype = host_dtype(recipe, host, notes)
    weights = weights_size(model_dir) if model_dir.is_dir() else None
    weights_bytes = weights.bytes if weights else None
    if weights is None:
        entry = lookup(recipe.model.path)
        weights_bytes = entry.weights_bytes if entry else None
        if entry and weights_bytes:
            notes.append(f"weights size from the built-in table ({entry.weights_source})")
    vram = None
    if host is not None and host.gpus and platform_of(recipe).has_gpus:
        vram = min((g.vram_bytes for g in host.gpus if g.vram_bytes), default=None)
        if vram:
            notes.append(f"GPU memory probed on this host ({host.gpus[0].name})")
    if vram is None and platform_of(recipe).has_gpus:
        match = lookup_gpu(gpu or " ".join(recipe.versions.gpu_arch))
        if match:
            vram = match.spec.vram_bytes
            notes.append(f"GPU memory from the built-in table: {match.spec.name}" + (f" ({match.note})"
                                                                                       if match.note else ""))
    cpu = recipe.tiers_of("cpu") if recipe.cache.enabled else []
    disk = recipe.tiers_of("disk") if recipe.cache.enabled else []
    disk_free = None
    if disk and os.path.isdir(disk[0].path):
        stat = os.statvfs(disk[0].path)
        disk_free = stat.f_bavail * stat.f_frsize
    ram, ram_source = host_ram_bytes, "--host-ram"
    if ram is not None:
        notes.append(f"host RAM {ram / GiB:,.1f} GiB from --host-ram")
    elif host is not None and host.memory.total_bytes:
        ram, ram_source = host.memory.total_bytes, "this machine"
        notes.append(f"host RAM {ram / GiB:,.1f} GiB: this machine's; plan for the serving host with --host-ram GIB")
    remote = [t.kind for t in recipe.cache.tiers if kind_of(t).remote] if recipe.cache.enabled else []
    explicit = kv_cache_size(recipe)
    if explicit is not None:
        notes.append(f"HBM for KV set outright: {explicit[0]:,} bytes ({explicit[1]}), whatever the memory")
    plan = make_plan(
        shape, tensor_parallel=recipe.model.tensor_parallel, kv_cache_dtype=recipe.model.kv_cache_dtype,
        gpu_memory_utilization=recipe.serve.gpu_memory_utilization, gpu_vram_bytes=vram,
        weights_bytes=weights_bytes, cpu_tier_bytes=int(cpu[0].size_gb * GiB) if cpu else None,
        disk_tier_bytes=int(disk[0].size_gb * GiB) if disk else None, users=users, context_tokens=context_tokens,
        host_ram_bytes=ram, disk_free_bytes=disk_free, serve_dtype=serve_dtype or recipe.model.dtype, extra_notes=notes,
        remote_tiers=remote, kv_cache_bytes=explicit[0] if explicit else None)
    plan.host_ram_source = ram_source if ram is not None else ""
    chunk = lmcache_chunk_size(recipe) if recipe.cache.enabled else None
    if chunk:
        kind, text = chunk_advice(chunk, vllm_block_size(recipe), platform_of(recipe).cpu_computes)
        (plan.warnings if kind == "warning" else plan.notes).append(text)
    limit = recipe.model.max_model_len
    if limit and context_tokens > limit:
        plan.warnings.append(f"--context {context_tokens:,} exceeds model.max_model_len {limit:,}: vLLM refuses "
                             f"longer requests; plan with --context {limit:,} or raise max_model_len")
    return plan


def host_dtype(recipe, host, notes: list[str]) -> str | None:
    """The dtype `up` would serve a CPU stack with model.dtype "auto" in on this host, from its CPU flags (capped as
    the stack's environment caps them), noted; None where the recipe or vLLM decides. `up` measures in the image
    when it can; on the CPUs measured (AMX, and AVX-512 capped to AVX2) the flags and the measurement agreed."""
    from stackctl.host.dtype import decide_by_flags, host_decides

    if not host_decides(recipe) or not host.isa.known:
        return None
    decision = decide_by_flags(recipe, host.isa)
    notes.append(f"dtype {decision.reason}: what `up` picks on this machine; plan for another CPU with model.dtype "
                 "set to what it runs natively")
    return decision.served


def kv_cache_size(recipe) -> tuple[int, str] | None:
    """The KV cache size the recipe sets outright, and where: VLLM_CPU_KVCACHE_SPACE (GiB) in serve.env on cpu,
    which vLLM applies over the flag (vllm 0.32.0 vllm/platforms/cpu.py:324-327), else --kv-cache-memory-bytes in
    serve.extra_args (vllm/engine/arg_utils.py:1363, read by vllm/utils/argparse_utils.py:29 human_readable_int).
    None when vLLM sizes the cache itself."""
    from stackctl.knowledge.serve_flags import human_int

    space = recipe.serve.env.get("VLLM_CPU_KVCACHE_SPACE", "")
    if not platform_of(recipe).has_gpus and str(space).strip().isdigit():
        return int(space) * GiB, f"VLLM_CPU_KVCACHE_SPACE={space} in serve.env"
    args = list(recipe.serve.extra_args)
    for index, arg in enumerate(args):
        name, _, inline = arg.partition("=")
        if name != "--kv-cache-memory-bytes":
            continue
        value = inline if inline else (args[index + 1] if index + 1 < len(args) else "")
        size = human_int(value)
        if size is not None and size > 0:
            return size, f"--kv-cache-memory-bytes {value} in serve.extra_args"
    return None
