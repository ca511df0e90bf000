"""Whether LMCache's cache keys depend on PYTHONHASHSEED, per vLLM release, LMCache release and
`pre_caching_hash_algorithm`, from the facts both packages' sources give (stackctl/knowledge/facts/).

LMCache chains its chunk keys from vLLM's NONE_HASH: its TokenDatabase calls vLLM's `init_none_hash` with its own
hash function (LMCache facts `chunk_hash.none_hash_from_vllm`). That function is vLLM's `get_hash_fn_by_name(NAME)`
for a name vLLM resolves (vLLM facts `hash_functions`), else Python's builtin `hash` (`chunk_hash.builtin_fallback`;
`builtin`, LMCache's default, is such a name). Without PYTHONHASHSEED, vLLM seeds NONE_HASH from `os.urandom` in
every release before 0.29 (`none_hash.unset = "random"`); from 0.29 on from the fixed string "vllm-none-hash",
except for the hash functions it lists as not collision resistant (xxhash), which still get a random seed
(`none_hash.unset = "fixed"`, `random_for`). Python's `hash` of a string varies per process unless PYTHONHASHSEED
is fixed, so with `builtin` the key chain still starts somewhere else in every process. Only sha256 / sha256_cbor on
vLLM 0.29+ give every process the same keys without the seed.
"""

from __future__ import annotations

from stackctl.knowledge import facts

# LMCache maps the name vLLM used before its rename (lmcache/v1/token_database.py `_try_get_hash`).
_RENAMED = {"sha256_cbor_64bit": "sha256_cbor"}


class SeedNeed:
    """Whether a fixed PYTHONHASHSEED is needed for cache hits across processes, and why (with citations)."""

    def __init__(self, needed: bool, why: str):
        self.needed = needed
        self.why = why

    def __repr__(self) -> str:
        return f"SeedNeed({self.needed}, {self.why!r})"


def algorithm_of(extra: dict, env: dict, lmcache_version: str | None) -> str:
    """The pre_caching_hash_algorithm a stack runs with: LMCACHE_PRE_CACHING_HASH_ALGORITHM, else the LMCache
    config's key, else the release's default (LMCache facts `config`)."""
    value = env.get("LMCACHE_PRE_CACHING_HASH_ALGORITHM") or extra.get("pre_caching_hash_algorithm")
    if value:
        return str(value)
    release = facts.release("lmcache", lmcache_version) if lmcache_version else None
    entry = release.section("config").get("pre_caching_hash_algorithm") if release else None
    return str(entry["default"]) if entry and entry.get("default") else "builtin"


def seed_need(vllm_version: str | None, lmcache_version: str | None, algorithm: str) -> SeedNeed:
    """Whether LMCache's keys on this vLLM / LMCache / algorithm differ between processes without PYTHONHASHSEED."""
    vllm = facts.release("vllm", vllm_version) if vllm_version else None
    lmcache = facts.release("lmcache", lmcache_version) if lmcache_version else None
    if vllm is None:
        return SeedNeed(True, "the vLLM release is unknown, and every vLLM before 0.29 draws NONE_HASH from "
                              "os.urandom when PYTHONHASHSEED is unset")
    none_hash = vllm.section("none_hash")
    name = _RENAMED.get(algorithm, algorithm)
    functions = vllm.section("hash_functions")
    fallback = lmcache.section("chunk_hash").get("builtin_fallback") if lmcache else None
    if name in functions:
        function, how = functions[name]["function"], f"vLLM's {name} ({vllm.cite(functions[name]['at'])})"
    else:
        function = "builtin"
        where = f", {lmcache.cite(fallback)}" if lmcache is not None and fallback else ""
        how = (f"Python's builtin hash (LMCache falls back to it for {algorithm!r}, which {vllm.name} does not "
               f"resolve{where})")
    unset = none_hash.get("unset")
    if unset == "random":
        return SeedNeed(True, f"{vllm.label()} seeds NONE_HASH from os.urandom when PYTHONHASHSEED is unset "
                              f"({vllm.cite(none_hash['random_at'])}), whatever the hash function")
    if unset != "fixed":
        return SeedNeed(True, f"{vllm.label()}: how NONE_HASH is seeded is not in its facts")
    if function == "builtin":
        return SeedNeed(True, f"LMCache hashes with {how}; {vllm.label()} derives NONE_HASH from the string "
                              f"{none_hash.get('default_seed')!r} ({vllm.cite(none_hash['at'])}), and Python hashes a "
                              "string differently in every process unless PYTHONHASHSEED is fixed")
    if function in none_hash.get("random_for", []):
        return SeedNeed(True, f"LMCache hashes with {how}; {vllm.label()} draws a random NONE_HASH seed for it "
                              f"when PYTHONHASHSEED is unset ({vllm.cite(none_hash['random_at'])})")
    return SeedNeed(False, f"LMCache hashes with {how}; {vllm.label()} derives NONE_HASH from the fixed seed "
                           f"{none_hash.get('default_seed')!r} when PYTHONHASHSEED is unset "
                           f"({vllm.cite(none_hash['default_at'])}): every process computes the same keys")
