"""What the hash-seed rules and checks share: where a recipe runs LMCache inside vLLM, and whether its keys need a
fixed PYTHONHASHSEED (stackctl/knowledge/hash_seed.py, for the recipe's vLLM and LMCache releases and
pre_caching_hash_algorithm)."""

from __future__ import annotations


TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:  # annotations only
    from stackctl.knowledge.hash_seed import SeedNeed


def lmcache_connections(spec) -> list[tuple]:
    """Where the recipe runs LMCache inside vLLM: `cache` (stackctl's connector), and each --kv-transfer-config in
    serve.extra_args (or connector of a MultiConnector there) naming such an LMCache connector, old name or new, or
    loading one from LMCache's own modules (knowledge/lmcache_connectors.py: not LMCacheMPConnector, whose keys a
    separate server computes)."""
    from stackctl.knowledge.kv_transfer import connector_configs
    from stackctl.knowledge.lmcache_connectors import config_runs_lmcache_in_vllm

    found: list[tuple] = [("cache",)] if spec.lmcache_in_server else []
    for path, config in connector_configs(spec.recipe):  # a MultiConnector's connectors too; not stackctl's own entry
        if path[0] == "serve" and path not in found and config_runs_lmcache_in_vllm(config):
            found.append(path)
    return found


def seed_need(spec) -> SeedNeed:
    """Whether this stack's LMCache keys need a fixed PYTHONHASHSEED (knowledge/hash_seed.py), for its vLLM and
    LMCache releases and pre_caching_hash_algorithm."""
    from stackctl.knowledge.hash_seed import algorithm_of, seed_need as need
    from stackctl.rules.registry import package_version

    lmcache = package_version(spec, "lmcache")
    return need(package_version(spec, "vllm"), lmcache, algorithm_of(spec.recipe.cache.extra, spec.recipe.serve.env, lmcache))
