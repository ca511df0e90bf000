"""Which names and values hold credentials: the importer never copies them into a recipe, it names the variable."""

from __future__ import annotations

import re

# The loader refuses these names in serve.env; the importer moves them to serve.secret_env before it gets there.
from stackctl.recipe.loader import SECRET_ENV_NAME

# LMCache config keys that hold credentials (narrower: min_retrieve_tokens is no secret).
_SECRET_CONFIG_KEY = re.compile(r"(^|_)(secret|password|passwd|token|credentials?|access_key(_id)?|api_key|"
                                r"private_key)$", re.I)
_URL_CREDENTIALS = re.compile(r"://[^/@\s:]+:[^/@\s]+@")  # scheme://user:password@host


def is_secret(key: str, value: str | None) -> bool:
    """An environment variable that must not be copied: a secret-looking name, AWS_*, or a URL with a password."""
    return bool(SECRET_ENV_NAME.search(key) or key.startswith("AWS_") or (value and _URL_CREDENTIALS.search(value)))


def strip_secrets(extra: dict, prefix: str = "") -> list[str]:
    """Remove credential-looking keys (e.g. extra_config.aws_secret_access_key); return their names."""
    removed = []
    for key in list(extra):
        value = extra[key]
        if _SECRET_CONFIG_KEY.search(key) or key.lower().startswith("aws_") or \
                isinstance(value, str) and _URL_CREDENTIALS.search(value):
            del extra[key]
            removed.append(prefix + key)
        elif isinstance(value, dict):
            removed += strip_secrets(value, f"{prefix}{key}.")
    return removed
