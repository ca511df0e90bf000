"""What doctor keeps about a stack's image (stackctl/doctor/image_cache.py): which inputs name a kept answer, and
when a kept answer is used, asked again or replaced."""

from __future__ import annotations

import hashlib
import json

from helpers import RECIPES

from stackctl.bundle import stackspec
from stackctl.doctor.image_cache import cache_key, cached
from stackctl.doctor.own_parsers import key_parts, server_arguments
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec

ARGS = ["/models/tiny", "--port", "8000"]
YAML = b"chunk_size: 256\n"
ENV = {"PYTHONHASHSEED": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}
DRIVER = b"print('probe')\n"


def parsers_key(arguments=ARGS, lmcache_yaml=YAML, environment=ENV, driver=DRIVER, image="sha256:aaa") -> str:
    return cache_key([image] + key_parts(arguments, lmcache_yaml, environment, driver))


def test_image_facts_keep_the_key_they_had():
    """Facts kept before the helper was shared are still found: same inputs, same file name."""
    environment, algo = {"B": "2", "A": "1"}, "sha256"
    before = hashlib.sha256(json.dumps(["sha256:abc", environment, algo], sort_keys=True).encode()).hexdigest()[:16]
    assert cache_key(["sha256:abc", environment, algo]) == before


def test_the_same_inputs_name_the_same_answer_whatever_the_table_order():
    assert parsers_key() == parsers_key(environment=dict(reversed(list(ENV.items()))))
    assert len(parsers_key()) == 16


def test_every_input_of_the_parsers_names_another_answer():
    keys = {
        parsers_key(),
        parsers_key(image="sha256:bbb"),
        parsers_key(arguments=ARGS + ["--enforce-eager"]),
        parsers_key(arguments=list(reversed(ARGS))),  # argument order matters to argparse
        parsers_key(lmcache_yaml=b"chunk_size: 512\n"),
        parsers_key(lmcache_yaml=None),  # LMCache off: nothing to load
        parsers_key(lmcache_yaml=b""),
        parsers_key(environment=dict(ENV, PYTHONHASHSEED="1")),
        parsers_key(driver=DRIVER + b"# changed\n"),  # the probe script is stackctl's, not the image's
    }
    assert len(keys) == 9


def test_the_key_holds_no_file_content_only_digests():
    """lmcache.yaml may carry a store's address; the key names it by digest (bytes are not JSON either)."""
    parts = key_parts(ARGS, YAML, ENV, DRIVER)
    assert YAML.decode() not in json.dumps(parts) and DRIVER.decode() not in json.dumps(parts)


def test_the_parsers_are_asked_about_what_serve_sh_passes():
    recipe = load_recipe(RECIPES / "cpu-smoke.toml")
    assert server_arguments(StackSpec(recipe)) == [recipe.model.path] + stackspec.serve_args(recipe)


def test_a_kept_answer_is_used_until_asked_afresh(tmp_path):
    asked = []

    def ask():
        asked.append(1)
        return {"answer": len(asked)}

    path = tmp_path / "stack" / "image-parsers" / "key.json"
    assert cached(path, ask) == {"answer": 1}
    assert cached(path, ask) == {"answer": 1} and len(asked) == 1
    assert cached(path, ask, use_cache=False) == {"answer": 2}  # --fresh asks again and keeps the new answer
    assert cached(path, ask) == {"answer": 2} and len(asked) == 2


def test_a_damaged_file_is_asked_again_and_replaced(tmp_path):
    path = tmp_path / "key.json"
    path.write_text('{"answer": ')
    assert cached(path, lambda: {"answer": 3}) == {"answer": 3}
    assert json.loads(path.read_text()) == {"answer": 3}
    assert [p.name for p in tmp_path.iterdir()] == ["key.json"]
