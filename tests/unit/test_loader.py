import pytest

from stackctl.errors import RecipeError, StackctlError
from stackctl.recipe import load_recipe, load_recipe_text

MINIMAL = '[stack]\nname = "s"\n[model]\npath = "/m"\n'


def errors_of(text: str) -> list[str]:
    with pytest.raises(RecipeError) as info:
        load_recipe_text(text, "r.toml")
    return [f.format() for f in info.value.findings]


def test_minimal_recipe_gets_defaults():
    recipe = load_recipe_text(MINIMAL, "r.toml")
    assert recipe.stack.platform == "rocm"
    assert recipe.serve.prefix_caching is True
    assert recipe.cache.chunk_size == 256
    assert recipe.served_name == "m"


def test_unknown_key_suggests_the_close_one_with_position():
    lines = errors_of(MINIMAL + "[serve]\nprefix_cachng = true\n")
    assert lines == ["r.toml:6:1: serve.prefix_cachng: unknown key (fix: did you mean `prefix_caching`?)"]


def test_every_problem_is_reported_at_once():
    text = ('[stack]\nname = "s"\nplatform = "gpu"\n[model]\npath = "/m"\ntensor_parallel = 0\n'
            '[[cache.tiers]]\nkind = "cpu"\nsize_gb = -1\n[serve]\nport = "8000"\n')
    lines = errors_of(text)
    assert len(lines) == 4
    assert lines[0].startswith("r.toml:3:1: stack.platform: 'gpu' is not one of rocm, cpu")
    assert any(line.startswith("r.toml:6:1: model.tensor_parallel: must be >= 1") for line in lines)
    assert any(line.startswith("r.toml:9:1: cache.tiers[0].size_gb: must be > 0.0, got -1.0") for line in lines)
    assert any(line.startswith("r.toml:11:1: serve.port: must be an integer, not a string") for line in lines)


def test_required_keys_are_named():
    lines = errors_of("[stack]\nplatform = \"cpu\"\n")
    assert any("stack.name: is required" in line for line in lines)
    assert any("model.path: is required" in line for line in lines)


def test_inline_secrets_are_refused():
    text = MINIMAL + ('[cache]\nenabled = true\n[[cache.tiers]]\nkind = "s3"\nurl = "s3://h"\nregion = "r"\n'
                      'aws_secret_access_key = "abc"\n')
    lines = errors_of(text)
    assert lines == ["r.toml:11:1: cache.tiers[0].aws_secret_access_key: secrets never go in a recipe (fix: put the "
                     "value in a host environment variable and name it with secret_key_env)"]


def test_secret_looking_env_values_are_refused():
    lines = errors_of(MINIMAL + '[serve.env]\nHF_TOKEN = "hf_abc"\n')
    assert len(lines) == 1 and "serve.env.HF_TOKEN: looks like a secret" in lines[0]


def test_tier_fields_checked_per_kind():
    text = MINIMAL + '[[cache.tiers]]\nkind = "cpu"\npath = "/x"\n[[cache.tiers]]\nkind = "disk"\nsize_gb = 1\n'
    lines = errors_of(text)
    assert any("cache.tiers[0].path: does not apply to a cpu tier" in line for line in lines)
    assert any("cache.tiers[0]: a cpu tier needs size_gb" in line for line in lines)
    assert any("cache.tiers[1]: a disk tier needs path" in line for line in lines)


def test_one_tier_of_each_remote_kind():
    s3 = '[[cache.tiers]]\nkind = "s3"\nurl = "s3://h"\nregion = "r"\n'
    both = MINIMAL + '[[cache.tiers]]\nkind = "fs"\npath = "/a"\n' + s3
    assert [t.kind for t in load_recipe_text(both, "r.toml").cache.tiers] == ["fs", "s3"]
    assert any("cache.tiers[2]: only one s3 tier is supported" in line for line in errors_of(both + s3))


def test_toml_syntax_error_has_position():
    lines = errors_of('[stack]\nname = "s\n')
    assert lines[0].startswith("r.toml:2:")
    assert "TOML syntax" in lines[0]


def test_missing_file_is_a_clean_error(tmp_path):
    with pytest.raises(StackctlError, match="no such recipe file"):
        load_recipe(tmp_path / "nope.toml")


def test_bool_is_not_an_int():
    assert any("must be an integer, not a boolean" in line
               for line in errors_of(MINIMAL + "[serve]\nport = true\n"))
