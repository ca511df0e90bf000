"""The facts generator's readers of remote_url schemes, NONE_HASH seeding and LMCache's chunk hash, on source
trees laid out like the packages' own (the statements are the released ones, LMCache 0.5.6
lmcache/v1/storage_backend/connector/{sagemaker_hyperpod,redis}_adapter.py, vLLM 0.28.0 / 0.29.0
vllm/v1/core/kv_cache_utils.py, LMCache 0.5.6 lmcache/v1/token_database.py, cut to the lines that matter)."""

from __future__ import annotations

import sys

import pytest
from helpers import REPO, write_tree

sys.path.insert(0, str(REPO / "scripts"))

from factgen import lmcache_facts, vllm_facts  # noqa: E402
from factgen.pysource import SourceTree  # noqa: E402


def _tree(tmp_path, files: dict[str, str]) -> SourceTree:
    return SourceTree(write_tree(tmp_path, files))


CONNECTOR = "lmcache/v1/storage_backend/connector/"


def test_schemes_come_from_init_and_can_parse_only(tmp_path):
    tree = _tree(tmp_path, {
        CONNECTOR + "sagemaker_hyperpod_adapter.py": '''
            class SageMakerHyperPodConnectorAdapter(ConnectorAdapter):
                def __init__(self) -> None:
                    super().__init__("sagemaker-hyperpod://")

                def _endpoint(self, expanded_url, use_https):
                    raw_url = expanded_url.removeprefix("sagemaker-hyperpod://")
                    if raw_url.startswith("http://") or raw_url.startswith("https://"):
                        return raw_url
            ''',
        CONNECTOR + "redis_adapter.py": '''
            class RedisConnectorAdapter(ConnectorAdapter):
                def __init__(self) -> None:
                    super().__init__("redis://")

                def can_parse(self, url: str) -> bool:
                    return url.startswith((self.schema, "rediss://", "unix://", "plugin://redis"))
            ''',
    })
    schemes = lmcache_facts.remote_url_schemes(tree)
    assert sorted(schemes) == ["plugin", "redis", "rediss", "sagemaker-hyperpod", "unix"]
    assert schemes["sagemaker-hyperpod"].endswith("sagemaker_hyperpod_adapter.py:4")


UTILS = "vllm/v1/core/kv_cache_utils.py"


def test_none_hash_random_before_0_29(tmp_path):
    tree = _tree(tmp_path, {UTILS: '''
        import os

        def init_none_hash(hash_fn):
            global NONE_HASH
            hash_seed = os.getenv("PYTHONHASHSEED")
            if hash_seed is None:
                NONE_HASH = BlockHash(os.urandom(32))
            else:
                NONE_HASH = BlockHash(hash_fn(hash_seed))
        '''})
    assert vllm_facts.none_hash(tree) == {"unset": "random", "at": UTILS + ":4", "random_at": UTILS + ":8"}


def test_none_hash_fixed_from_0_29_except_xxhash(tmp_path):
    tree = _tree(tmp_path, {UTILS: '''
        import os
        DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
        _NON_CRYPTO_HASH_FUNCTIONS = frozenset({xxhash, xxhash_cbor})

        def resolve_none_hash_seed(hash_fn):
            hash_seed = os.getenv("PYTHONHASHSEED")
            if hash_seed is not None:
                return hash_seed
            if hash_fn in _NON_CRYPTO_HASH_FUNCTIONS:
                return os.urandom(32).hex()
            return DEFAULT_NONE_HASH_SEED

        def init_none_hash(hash_fn):
            global NONE_HASH
            NONE_HASH = BlockHash(hash_fn(resolve_none_hash_seed(hash_fn)))
        '''})
    facts = vllm_facts.none_hash(tree)
    assert (facts["unset"], facts["default_seed"], facts["random_for"]) == ("fixed", "vllm-none-hash",
                                                                           ["xxhash", "xxhash_cbor"])
    assert (facts["default_at"], facts["random_at"]) == (UTILS + ":3", UTILS + ":11")


def test_an_unknown_seeding_stops_the_generator(tmp_path):
    tree = _tree(tmp_path, {UTILS: "def init_none_hash(hash_fn):\n    global NONE_HASH\n    NONE_HASH = b''\n"})
    with pytest.raises(SystemExit, match="teach factgen"):
        vllm_facts.none_hash(tree)


def test_hash_functions_and_lmcache_chunk_hash(tmp_path):
    tree = _tree(tmp_path, {
        "vllm/utils/hashing.py": '''
            def get_hash_fn_by_name(hash_fn_name):
                if hash_fn_name == "sha256":
                    return sha256
                if hash_fn_name == "xxhash":
                    return xxhash
                raise ValueError(f"Unsupported hash function: {hash_fn_name}")
            ''',
        "lmcache/v1/token_database.py": '''
            class TokenDatabase:
                def __init__(self, config=None):
                    self.hash_func = self._get_vllm_hash_func("builtin")
                    kv_cache_utils.init_none_hash(self.hash_func)

                def _get_vllm_hash_func(self, hash_algorithm):
                    return hash
            ''',
    })
    assert vllm_facts.hash_functions(tree) == {
        "sha256": {"function": "sha256", "at": "vllm/utils/hashing.py:3"},
        "xxhash": {"function": "xxhash", "at": "vllm/utils/hashing.py:5"}}
    assert lmcache_facts.chunk_hash(tree) == {"builtin_fallback": "lmcache/v1/token_database.py:8",
                                              "none_hash_from_vllm": "lmcache/v1/token_database.py:5"}
