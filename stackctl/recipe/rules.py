"""The rule catalog: every silent failure a recipe alone can reveal.

Each rule has a stable id, a severity, a one-line summary, a fix, and a doc page (its docstring, shown by
`stackctl explain ID`). A rule is a function from a Recipe to (key path, message) pairs; the registry turns those
into located Findings. Every rule ships a passing and a failing fixture in tests/fixtures/rules/<id>/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stackctl.findings import Finding, key_path_text
from stackctl.knowledge import compat
from stackctl.recipe.model import Recipe
from stackctl.recipe.positions import lookup
from stackctl.text import clean_doc

if TYPE_CHECKING:  # annotations only: typing is not imported at run time
    from typing import Callable, Iterable, Iterator

Hit = tuple  # (key path tuple, message)


class Rule:
    """A registered rule: id, severity, summary, fix, doc page, and the check function."""

    def __init__(self, id: str, severity: str, summary: str, fix: str, doc: str, check: Callable):
        self.id, self.severity, self.summary, self.fix, self.doc, self.check = id, severity, summary, fix, doc, check


RULES: dict[str, Rule] = {}


def rule(rule_id: str, severity: str, summary: str, fix: str):
    """Register a rule function under a stable id."""

    def register(check: Callable[[Recipe], Iterable[Hit]]):
        doc = clean_doc(check.__doc__ or summary)
        RULES[rule_id] = Rule(rule_id, severity, summary, fix, doc, check)
        return check

    return register


def run_rules(recipe: Recipe, skip: Iterable[str] = ()) -> list[Finding]:
    """All findings of all rules not skipped (by the caller or the recipe's checks.skip), in file order."""
    skipped = set(skip) | set(recipe.checks.skip)
    findings = []
    for rule_ in RULES.values():
        if rule_.id in skipped:
            continue
        for path, message in rule_.check(recipe):
            path = (path,) if isinstance(path, str) else tuple(path)
            line, col = lookup(recipe.positions, path)
            findings.append(Finding(recipe.source, line, col, key_path_text(path), message, rule_.fix,
                                    rule_.id, rule_.severity))
    return sorted(findings, key=lambda f: (f.line, f.col, f.rule_id))


# -- helpers shared by rules ----------------------------------------------------------------------------------

def effective_hash_seed(recipe: Recipe) -> str | None:
    """The PYTHONHASHSEED the server will run with: cache.hash_seed, else serve.env, else None."""
    if recipe.cache.hash_seed is not None:
        return str(recipe.cache.hash_seed)
    seed = recipe.serve.env.get("PYTHONHASHSEED")
    return None if seed in (None, "", "random") else seed


def remote_tiers(recipe: Recipe) -> list[tuple[int, object]]:
    return [(i, t) for i, t in enumerate(recipe.cache.tiers) if t.kind in ("s3", "fs")]


def lmcache_source(recipe: Recipe) -> str:
    """How LMCache gets into the image: "source" (the default on every platform) or "wheel"."""
    return recipe.build.lmcache_from or "source"


def vllm_version(recipe: Recipe) -> str | None:
    if recipe.versions.vllm:
        return recipe.versions.vllm
    defaults = compat.table()["defaults"]
    if recipe.stack.platform == "cpu":
        return defaults["cpu_vllm"]
    return defaults["atom_vllm"] if recipe.stack.engine == "atom-vllm" else None


def cudagraph_mode(recipe: Recipe) -> str | None:
    mode = recipe.serve.cudagraph_mode or recipe.serve.compilation_config.get("cudagraph_mode")
    return str(mode).upper() if mode else None


# -- the rules ------------------------------------------------------------------------------------------------

@rule("lmcache-hash-seed", "error",
      "LMCache is on but PYTHONHASHSEED is not fixed: 0% cache hits across processes and restarts",
      "set cache.hash_seed = 0 (any fixed value, the same everywhere)")
def _lmcache_hash_seed(recipe: Recipe) -> Iterator[Hit]:
    """Without PYTHONHASHSEED, vLLM's `init_none_hash` seeds the prefix hash chain with `os.urandom(32)` in every
    process. LMCache chains its chunk keys from that seed, so every process, every restart and every tensor-parallel
    rank computes different keys for the same tokens: the cache stores data nobody can find. Nothing errors; the
    hit rate is simply 0%.

    Fix: set `cache.hash_seed` (stackctl exports it as PYTHONHASHSEED in every server process). Shared remote tiers
    have their own rule, `remote-tier-hash-seed`.
    """
    if recipe.cache.enabled and effective_hash_seed(recipe) is None and not remote_tiers(recipe):
        yield ("cache", "LMCache enabled without a fixed hash seed (PYTHONHASHSEED)")


@rule("remote-tier-hash-seed", "error",
      "a shared remote tier (S3, fs) without a fixed hash seed: hosts can never hit each other's entries",
      "set cache.hash_seed to the same value on every host that shares the tier")
def _remote_tier_hash_seed(recipe: Recipe) -> Iterator[Hit]:
    """A remote tier is shared by many servers, often on many hosts. Cache keys derive from vLLM's NONE_HASH, which
    is random per process unless PYTHONHASHSEED is fixed. With a random seed, no server ever reads what another wrote:
    the shared tier fills with unreachable entries and the hit rate stays at 0%.

    Fix: set `cache.hash_seed` to one value used by every host sharing the tier.
    """
    if recipe.cache.enabled and effective_hash_seed(recipe) is None:
        for index, tier in remote_tiers(recipe):
            yield (("cache", "tiers", index), f"{tier.kind} tier shared without a fixed hash seed")


@rule("lmcache-prefix-caching-off", "error",
      "LMCache is on but vLLM prefix caching is off",
      "set serve.prefix_caching = true")
def _prefix_caching_off(recipe: Recipe) -> Iterator[Hit]:
    """LMCache computes its keys from the same block hashes that vLLM's prefix cache uses. With
    `--enable-prefix-caching` off, the keys become inconsistent and the HBM tier (the fastest one) is lost too.

    Fix: keep `serve.prefix_caching = true` whenever `cache.enabled = true`.
    """
    if recipe.cache.enabled and not recipe.serve.prefix_caching:
        yield (("serve", "prefix_caching"), "prefix caching disabled while LMCache is enabled")


@rule("save-decode-cache", "error",
      "save_decode_cache = true offloads every decode step synchronously: 100-250 s stalls",
      "set cache.save_decode_cache = false")
def _save_decode_cache(recipe: Recipe) -> Iterator[Hit]:
    """LMCache's `save_decode_cache` stores the KV of every generated token, synchronously, on every decode step.
    Under load this stalls requests for 100 to 250 seconds. Prefill KV (the part worth reusing) is saved without it.

    Fix: `cache.save_decode_cache = false` (LMCache's default).
    """
    if recipe.cache.enabled and recipe.cache.save_decode_cache:
        yield (("cache", "save_decode_cache"), "decode-step KV offload enabled")


@rule("atom-cuda-graphs", "error",
      "ATOM without CUDA/HIP graphs loses 3-5x throughput",
      'remove enforce_eager and set serve.cudagraph_mode = "FULL_AND_PIECEWISE"')
def _atom_cuda_graphs(recipe: Recipe) -> Iterator[Hit]:
    """AMD's ATOM plugin relies on graph capture; run eagerly it loses 3 to 5 times its throughput, and nothing
    reports an error. `--enforce-eager` forces cudagraph_mode NONE.

    Fix: never `enforce_eager` in production; pass `cudagraph_mode = "FULL_AND_PIECEWISE"` (or PIECEWISE when LMCache
    layer-wise transfer is on).
    """
    if recipe.stack.engine != "atom-vllm":
        return
    if recipe.serve.enforce_eager:
        yield (("serve", "enforce_eager"), "ATOM run with --enforce-eager (graphs off)")
    elif cudagraph_mode(recipe) == "NONE":
        yield (("serve", "cudagraph_mode"), "ATOM run with cudagraph_mode NONE")


@rule("tier-needs-cpu-tier", "error",
      "a disk or remote tier without a CPU tier: LMCache stages those through its CPU backend",
      "add a [[cache.tiers]] with kind = \"cpu\" before the other tiers")
def _tier_needs_cpu(recipe: Recipe) -> Iterator[Hit]:
    """LMCache's `local_disk` backend writes through the CPU backend (`local_cpu`), and its remote backends (S3, fs)
    use the CPU backend as their buffer (0.5.6 asserts "Remote backend requires local CPU backend as a buffer").
    Without a CPU tier the lower tiers are silently never used, or the connector fails to start.

    Fix: add a CPU tier (`kind = "cpu"`, `size_gb = ...`).
    """
    if recipe.cache.enabled and not recipe.tiers_of("cpu"):
        for index, tier in enumerate(recipe.cache.tiers):
            if tier.kind in ("disk", "s3", "fs"):
                yield (("cache", "tiers", index), f"{tier.kind} tier without a CPU tier")
                return


@rule("gpu-visibility-mismatch", "error",
      "HIP_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES disagree",
      "set only HIP_VISIBLE_DEVICES, or give both the same value")
def _gpu_visibility(recipe: Recipe) -> Iterator[Hit]:
    """On ROCm, vLLM reads both variables and refuses to start with `Inconsistent GPU visibility env vars` when they
    differ; some launchers set one and inherit the other from the host.

    Fix: set one of them (stackctl passes GPUs by device mapping anyway), or both to the same list.
    """
    env = recipe.serve.env
    hip, cuda = env.get("HIP_VISIBLE_DEVICES"), env.get("CUDA_VISIBLE_DEVICES")
    if hip is not None and cuda is not None and hip.replace(" ", "") != cuda.replace(" ", ""):
        yield (("serve", "env", "CUDA_VISIBLE_DEVICES"), f"HIP_VISIBLE_DEVICES={hip} but CUDA_VISIBLE_DEVICES={cuda}")


@rule("lmcache-wheel-on-rocm", "error",
      "LMCache from the PyPI wheel on ROCm: a CUDA build, 1.7x slower than no cache at all",
      'set build.lmcache_from = "source" (stackctl builds it with BUILD_WITH_HIP=1)')
def _lmcache_wheel_on_rocm(recipe: Recipe) -> Iterator[Hit]:
    """The LMCache wheel on PyPI is built for CUDA: its native module links `libcudart`. On ROCm it either fails to
    load, or LMCache falls back to slow Python/torch operations, which made a published stack 1.7x slower than no
    cache at all, without a single error.

    Fix: build LMCache from source for HIP (`build.lmcache_from = "source"`, the ROCm default).
    """
    if recipe.stack.platform == "rocm" and recipe.cache.enabled and lmcache_source(recipe) == "wheel":
        yield (("build", "lmcache_from"), "LMCache installed from the PyPI (CUDA) wheel on platform rocm")


@rule("layerwise-needs-piecewise", "warning",
      "LMCache layer-wise transfer with a FULL cudagraph mode: vLLM downgrades to PIECEWISE",
      'set serve.cudagraph_mode = "PIECEWISE"')
def _layerwise_full(recipe: Recipe) -> Iterator[Hit]:
    """`use_layerwise = true` needs per-layer hooks that full graphs cannot contain; vLLM silently downgrades the
    mode to PIECEWISE with a warning, so the recipe does not describe what runs.

    Fix: ask for PIECEWISE explicitly.
    """
    mode = cudagraph_mode(recipe)
    if recipe.cache.enabled and recipe.cache.use_layerwise and mode and mode.startswith("FULL"):
        yield (("serve", "cudagraph_mode"), f"{mode} with cache.use_layerwise = true")


@rule("lmcache-tp-known-stall", "warning",
      "the LMCache connector with tensor parallel > 4 on vLLM 0.19.x is a known stall",
      "use another vLLM release, or tensor_parallel <= 4")
def _tp_known_stall(recipe: Recipe) -> Iterator[Hit]:
    """vLLM 0.19.x with the LMCache connector and more than four tensor-parallel ranks hangs with
    `No available shared memory broadcast block found in 60 seconds` repeating. See compat.toml `known_issues`.
    """
    if not recipe.cache.enabled:
        return
    for issue in compat.table()["known_issues"]:
        if issue["id"] != "lmcache-tp-connector-vllm-019":
            continue
        if (recipe.model.tensor_parallel >= issue["min_tensor_parallel"]
                and compat.in_range(vllm_version(recipe), issue["vllm_since"], issue["vllm_until"])):
            yield (("model", "tensor_parallel"), f"tensor_parallel {recipe.model.tensor_parallel} on vLLM "
                   f"{vllm_version(recipe)}: {issue['summary']}")


@rule("pass-config-version", "error",
      "a compilation pass_config key the pinned vLLM does not accept: `vllm serve` exits 2",
      "remove the key, or pin a vLLM release that has it")
def _pass_config_version(recipe: Recipe) -> Iterator[Hit]:
    """vLLM's config classes forbid unknown keys. A `pass_config` key copied from a recipe written for another release
    (e.g. `fuse_minimax_qk_norm`, which exists only in vLLM 0.20.0 - 0.23.x) makes the server exit with
    `Unexpected keyword argument`. The ranges are kept in stackctl/knowledge/compat.toml.
    """
    pass_config = recipe.serve.compilation_config.get("pass_config")
    if not isinstance(pass_config, dict):
        return
    version = vllm_version(recipe)
    for entry in compat.table()["pass_config_keys"]:
        if entry["key"] in pass_config and compat.in_range(version, entry.get("since"), entry.get("until")) is False:
            span = compat.describe_range(entry.get("since"), entry.get("until"))
            yield (("serve", "compilation_config", "pass_config", entry["key"]),
                   f"pass_config.{entry['key']} exists only in vLLM {span}; the stack pins {version}")


@rule("compilation-key-removed", "error",
      "a compilation_config key that was renamed or removed",
      "use the replacement key (e.g. `mode` instead of `level`)")
def _compilation_key_removed(recipe: Recipe) -> Iterator[Hit]:
    """`compilation_config.level` became `mode`; current vLLM releases reject the old key at start-up.
    The table is in stackctl/knowledge/compat.toml.
    """
    version = vllm_version(recipe)
    for entry in compat.table()["compilation_keys"]:
        if entry["key"] in recipe.serve.compilation_config and compat.in_range(version, until=entry["until"]) is not True:
            yield (("serve", "compilation_config", entry["key"]),
                   f"`{entry['key']}` is not accepted by vLLM >= {entry['until']}; use `{entry['replacement']}`")


@rule("removed-env-var", "warning",
      "an environment variable the pinned vLLM no longer knows",
      "remove it from serve.env")
def _removed_env(recipe: Recipe) -> Iterator[Hit]:
    """vLLM warns `Unknown vLLM environment variable detected: VLLM_USE_V1` and ignores it: the setting the recipe
    seems to make does nothing.
    """
    version = vllm_version(recipe)
    for entry in compat.table()["removed_env"]:
        if entry["name"] in recipe.serve.env and compat.in_range(version, since=entry["since"]) is not False:
            yield (("serve", "env", entry["name"]), f"{entry['name']} is ignored since vLLM {entry['since']}")


@rule("lmcache-version-unpinned", "error",
      "LMCache is on but no LMCache version or git ref is pinned",
      'set versions.lmcache = "0.5.6" (or versions.lmcache_git = "URL@REF")')
def _lmcache_unpinned(recipe: Recipe) -> Iterator[Hit]:
    """An unpinned LMCache makes every build a different stack: module names (`c_ops` vs `cuda_ops`), config keys
    and wheels change between releases, and the image checks cannot know what to expect.
    """
    if recipe.cache.enabled and not (recipe.versions.lmcache or recipe.versions.lmcache_git):
        yield (("versions",), "no LMCache version pinned")


@rule("tiers-without-cache", "warning",
      "KV tiers are listed but cache.enabled is false: they are ignored",
      "set cache.enabled = true, or remove the tiers")
def _tiers_without_cache(recipe: Recipe) -> Iterator[Hit]:
    """Tiers only take effect through LMCache. With `cache.enabled = false` the server runs HBM-only."""
    if recipe.cache.tiers and not recipe.cache.enabled:
        yield (("cache", "tiers"), f"{len(recipe.cache.tiers)} tier(s) configured but LMCache is off")


@rule("s3-credentials-unset", "warning",
      "an S3 tier without a credentials reference",
      "set access_key_env and secret_key_env (names of host variables) or credentials_file")
def _s3_credentials(recipe: Recipe) -> Iterator[Hit]:
    """Without credentials LMCache's S3 client falls back to whatever the container finds (often nothing), and every
    remote store fails quietly in the background. Name the host variables (or a credentials file): stackctl passes
    them to the container at run time only, never into a file or an image layer.
    """
    for index, tier in enumerate(recipe.cache.tiers):
        if tier.kind == "s3" and not tier.credentials_file and not (tier.access_key_env and tier.secret_key_env):
            yield (("cache", "tiers", index), "S3 tier has no credentials reference")


@rule("lmcache-on-cpu-platform", "warning",
      "LMCache on platform cpu has no connector for the CPU device: it runs in degraded (recompute) mode",
      "set cache.enabled = false on platform cpu, or run on rocm")
def _lmcache_on_cpu(recipe: Recipe) -> Iterator[Hit]:
    """vLLM's CPU build with LMCache logs `No supported cpu connector found.` and then `System will operate in
    degraded mode (recompute)`: the server is healthy, but nothing is stored or loaded. `stackctl doctor` catches it
    at run time; this rule says so before anything is built.
    """
    if recipe.stack.platform == "cpu" and recipe.cache.enabled:
        yield (("cache", "enabled"), "LMCache enabled on platform cpu")
