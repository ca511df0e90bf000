"""The one secret detector: which key names and which value shapes hold credentials, where they hide in a recipe,
and how to mention one without showing it.

Used by the recipe loader and the `secret-in-recipe` rule (validate), by render (which refuses to write a bundle
holding one, whatever was skipped) and by the importer (which turns every secret into a reference). Standard
library `re` only: the loader imports this on `validate`'s start-up path.

The patterns are kept as text and used through `re.search` & co., whose cache compiles each one the first time it
is needed: compiling all of them at import cost `validate` ~2 ms, and a clean recipe needs few of them (each shape
below is tried only on a value holding its literal).
"""

from __future__ import annotations

import re

# Key names that hold a secret, in any case, as a whole word of a snake/kebab/dotted/camel name:
# secret, secret_key, s3_secret_key, aws_secret_access_key, password, passwd, token, hf_token, api_key, apiKey,
# access_key, access_key_id, private_key, credentials, auth, authorization, ...
_SECRET_WORDS = (r"secret|secrets|password|passwd|passphrase|pwd|token|tokens|credential|credentials|apikey|"
                 r"api[_-]?key|access[_-]?key|access[_-]?key[_-]?id|private[_-]?key|auth|authorization|bearer|"
                 r"session[_-]?key|signing[_-]?key")
_SECRET_NAME = rf"(^|[_.\-]|(?<=[a-z]))({_SECRET_WORDS})([_.\-]|$)"
# Every word above and in SECRET_FLAG contains one of these (lower case).
_SECRET_STEMS = ("secret", "pass", "pwd", "token", "credential", "api", "access", "private", "auth", "bearer",
                 "session", "signing")
# Names that contain a secret word but hold no secret: counts, lengths, limits, budgets of tokens, file paths.
_NOT_SECRET_NAME = (r"(^|[_.\-])(max|min|num|count|len|length|limit|budget|size|per)([_.\-]|$)|"
                    r"[_.\-](file|path|env|dir|name)$|tokenizer|tokens$")

# Value shapes of well-known credentials: (label, literals one of which every match holds, pattern). Order matters
# only for the label a finding shows.
_AWS_KEY_ID = r"\b(AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}\b"
_SHAPES = (
    ("an AWS access key id", ("AKIA", "ASIA", "AGPA", "AIDA", "AROA", "ANPA", "ANVA", "AIPA"), _AWS_KEY_ID),
    ("a GitHub token", ("gh", "github_pat_"), r"\b(gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})\b"),
    ("a Hugging Face token", ("hf_",), r"\bhf_[A-Za-z0-9]{30,}\b"),
    ("an API key (sk-...)", ("sk-",), r"\bsk-(proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{20,}"),
    ("a Slack token", ("xox",), r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"),
    ("a JSON web token", ("eyJ",), r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"),
    ("a private key (PEM block)", ("PRIVATE KEY-----",), r"-----BEGIN ([A-Z0-9]+ )*PRIVATE KEY-----"),
    ("a URL with a password", ("@",), r"[A-Za-z][A-Za-z0-9+.\-]*://[^/@\s:]+:[^/@\s]+@"),
)
_URL_CREDENTIALS = r"([A-Za-z][A-Za-z0-9+.\-]*://)[^/@\s:]+:[^/@\s]+@"
# A 40-character AWS secret access key: only a secret next to an access key id (else any base64 hash matches).
_AWS_SECRET = r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])"

# Command-line flags whose value is a secret (`--api-key VALUE`, `--hf-token=VALUE`).
SECRET_FLAG = (r"^--?([a-z0-9]+[-_])*(api[-_]key|token|secret|password|passwd|credentials?|access[-_]key|"
               r"secret[-_]key|private[-_]key|auth)$")


def is_secret_name(name: str) -> bool:
    """A key or variable name that holds a secret (HF_TOKEN, s3_secret_key, apiKey), not a count or a path of one
    (max_tokens, secret_key_env, credentials_file)."""
    name = str(name)
    return (_may_name_secret(name) and bool(re.search(_SECRET_NAME, name, re.I))
            and not re.search(_NOT_SECRET_NAME, name, re.I))


def _may_name_secret(name: str) -> bool:
    """False for an ASCII name holding no secret word, the common case, answered without compiling a pattern (a
    non-ASCII one goes to the pattern: re.I matches some letters, e.g. the long s, that lower() leaves alone)."""
    return not name.isascii() or any(stem in name.lower() for stem in _SECRET_STEMS)


def secret_shape(value: str, context: str = "") -> str | None:
    """What kind of credential `value` looks like ("an AWS access key id"), or None. `context` is the text around
    it (the rest of the env, args or table): a 40-character key is a secret only next to an AWS key id."""
    if not isinstance(value, str) or len(value) < 8:
        return None
    for label, literals, pattern in _SHAPES:
        if any(literal in value for literal in literals) and re.search(pattern, value):
            return label
    if (len(value) >= 40 and any(_aws_secret_like(m.group(0)) for m in re.finditer(_AWS_SECRET, value))
            and _near_aws(context + " " + value)):
        return "an AWS secret access key"
    return None


def _aws_secret_like(text: str) -> bool:
    """40 characters of base64 with mixed case or a slash/plus: not a hex digest (git commit ids are 40 hex)."""
    return not re.fullmatch(r"[0-9a-fA-F]{40}", text) and bool(re.search(r"[a-z]", text) and
                                                                 re.search(r"[A-Z0-9/+]", text))


def _near_aws(context: str) -> bool:
    return bool(re.search(_AWS_KEY_ID, context) or re.search(r"aws|s3", context, re.I))


def mask(value: str) -> str:
    """How a secret is named in a message: its public prefix (AKIA, ghp_, hf_, sk-) at most, and its length."""
    value = str(value)
    prefix = re.match(r"(AKIA|ASIA|gh[pousr]_|github_pat_|hf_|sk-|xox[a-z]-|eyJ|-----BEGIN)", value)
    return f"{prefix.group(1) if prefix else ''}*** ({len(value)} characters)"


def redact(text: str, known: tuple | list | set = ()) -> str:
    """`text` with every secret-shaped part and every known secret value masked, for notes, errors and logs."""
    text = str(text)
    for value in sorted({v for v in known if isinstance(v, str) and len(v) >= 4}, key=len, reverse=True):
        text = text.replace(value, mask(value))
    near_aws = _near_aws(text)
    text = re.sub(_URL_CREDENTIALS, r"\1***:***@", text)  # first: the other masks would break the URL's shape
    for label, literals, pattern in _SHAPES:
        if label != "a URL with a password" and any(literal in text for literal in literals):
            text = re.sub(pattern, lambda m: mask(m.group(0)), text)
    if near_aws:
        text = re.sub(_AWS_SECRET, lambda m: mask(m.group(0)) if _aws_secret_like(m.group(0)) else m.group(0), text)
    return text


# -- where secrets hide in a recipe ---------------------------------------------------------------------------

def find_in_recipe(recipe) -> list[tuple[tuple, str]]:
    """Every secret in a loaded recipe as (key path, message without the value): free-form tables (cache.extra,
    serve.compilation_config) by key name and value shape at any depth, serve.env values, serve.extra_args (secret
    flags and value shapes), and every other string by shape (model.path, tier urls, build.pip_index, ...)."""
    serve, hits, data = recipe.serve, [], recipe.to_dict()
    context = " ".join(strings_in(data))
    hits += find_in_table(recipe.cache.extra, ("cache", "extra"), context)
    hits += find_in_table(serve.compilation_config, ("serve", "compilation_config"), context)
    for key, value in serve.env.items():
        label = "a secret-named variable" if is_secret_name(key) else secret_shape(value, context)
        if label:
            hits.append((("serve", "env", key), f"holds {label}: {mask(value)}"))
    hits += find_in_args(serve.extra_args, ("serve", "extra_args"), context)
    # Every other string of the recipe, by shape: model.path, tier urls, build.pip_index, and also the names in
    # serve.secret_env and *_key_env, where a pasted key would be taken for a variable name.
    done = {("cache", "extra"), ("serve", "compilation_config"), ("serve", "env"), ("serve", "extra_args")}
    for path, value in _leaf_strings(data, ()):
        if path[:2] in done:
            continue
        label = secret_shape(value, context)
        if label:
            hits.append((path, f"holds {label}: {mask(value)}"))
    return hits


def find_in_table(table, path: tuple, context: str = "") -> list[tuple[tuple, str]]:
    """Secrets in a nested table (dicts and lists, any depth): by key name, or by the shape of string values."""
    hits = []
    items = table.items() if isinstance(table, dict) else enumerate(table) if isinstance(table, list) else ()
    for key, value in items:
        here = path + (key,)
        if isinstance(value, (dict, list)):
            hits += find_in_table(value, here, context)
        elif isinstance(key, str) and is_secret_name(key) and value not in (None, "") and not isinstance(value, bool):
            hits.append((here, f"`{key}` holds a secret: {mask(value)}"))
        else:
            label = secret_shape(value, context) if isinstance(value, str) else None
            if label:
                hits.append((here, f"holds {label}: {mask(value)}"))
    return hits


def find_in_args(args: list, path: tuple, context: str = "") -> list[tuple[tuple, str]]:
    """Secrets on a command line: the value of a secret flag (`--api-key V`, `--api-key=V`), or a secret shape."""
    hits, i = [], 0
    while i < len(args):
        token = str(args[i])
        flag, eq, attached = token.partition("=")
        secret_flag = _may_name_secret(flag) and re.match(SECRET_FLAG, flag, re.I)
        if secret_flag and (eq or i + 1 < len(args) and not str(args[i + 1]).startswith("-")):
            value = attached if eq else str(args[i + 1])
            hits.append((path + (i,), f"{flag} carries a secret on the command line: {mask(value)}"))
            i += 1 if eq else 2
            continue
        label = secret_shape(token, context)
        if label:
            hits.append((path + (i,), f"holds {label}: {mask(token)}"))
        i += 1
    return hits


def _leaf_strings(value, path: tuple):
    """(key path, string) of every string in a nested value."""
    if isinstance(value, str):
        yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _leaf_strings(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaf_strings(item, path + (index,))


def strings_in(value) -> list[str]:
    """Every string in a nested value, table keys included (the context a 40-character key is judged in)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in [str(k)] + strings_in(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings_in(v)]
    return []
