"""Rules that keep the recipe the one source of truth: no secret in it, nothing that bypasses the other rules
through the free-form keys (cache.extra, serve.extra_args), no unknown ids in checks.skip, no unsafe host paths.

They register in the same catalog as stackctl/recipe/rules.py (imported at its end), with the same fixtures in
tests/fixtures/rules/<id>/.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stackctl import secrets
from stackctl.recipe.model import Recipe
from stackctl.recipe.rules import rule

if TYPE_CHECKING:  # annotations only
    from typing import Iterator

    from stackctl.recipe.rules import Hit


@rule("secret-in-recipe", "error",
      "a secret value is written in the recipe: it would reach the bundle, the image or a log",
      "put the value in a host environment variable and name it: serve.secret_env, or the S3 tier's "
      "access_key_env / secret_key_env")
def _secret_in_recipe(recipe: Recipe) -> Iterator[Hit]:
    """A recipe is a file people share, commit and paste into issues; everything in it is rendered into the bundle
    (serve.sh, lmcache.yaml, stack.env) and may end in an image layer or a log. A secret written in it has leaked.

    stackctl looks everywhere a value can hide: by key name (secret, secret_key, s3_secret_key, access_key,
    password, token, api_key, ... at any depth of cache.extra and serve.compilation_config), by value shape (AWS
    access key ids AKIA/ASIA..., a 40-character secret key next to one, GitHub ghp_/github_pat_, Hugging Face
    hf_, sk- API keys, Slack xox?- tokens, JSON web tokens, PEM private keys, URLs with user:password) in serve.env
    values, serve.extra_args (`--api-key VALUE`, `--api-key=VALUE`), model.path, tier URLs and build.pip_index.
    Messages never show the value, only its kind, its public prefix and its length.

    `stackctl render` and `up` refuse such a recipe even when this rule is skipped.

    Fix: export the value on the host and name the variable: `serve.secret_env = { VLLM_API_KEY = "MY_KEY" }`
    (container variable = host variable), or the S3 tier's `access_key_env` / `secret_key_env`. The value
    reaches the container at run time only.
    """
    yield from secrets.find_in_recipe(recipe)
