"""Which names and values hold credentials: the importer never copies them into a recipe, it names the variable.
The detection itself is stackctl.secrets (one detector for import, validate and render)."""

from __future__ import annotations

import re

from stackctl.errors import StackctlError
from stackctl.importer.draft import REQUIRED_KEYS, Draft
from stackctl.knowledge.kinds import TIER_KINDS, tier_kind
from stackctl.secrets import (
    find_in_args,
    find_in_table,
    is_secret_name,
    mask,
    redact,
    secret_shape,
    strings_in,
)
from stackctl.storage.registry import storage_of_kind


def is_secret(key: str, value: str | None, context: str = "") -> bool:
    """An environment variable that must not be copied: a secret-looking name, AWS_*, or a secret-shaped value."""
    return bool(is_secret_name(key) or key.startswith("AWS_") or (value and secret_shape(value, context)))


def strip_secrets(extra: dict, prefix: str = "", found: list | None = None) -> list[str]:
    """Remove credential-looking keys and values (e.g. extra_config.aws_secret_access_key) at any depth; return
    their dotted names. The values removed are appended to `found` (for masking in notes)."""
    removed = []
    for key in list(extra):
        value = extra[key]
        if isinstance(value, dict):
            inner = strip_secrets(value, f"{prefix}{key}.", found)
            removed += inner
            if inner and not value:
                del extra[key]  # nothing left but the secrets
        elif str(key).lower().startswith("aws_") or find_in_table({key: value}, ()):
            del extra[key]
            removed.append(prefix + str(key))
            if found is not None:
                found.append(str(value))
    return removed


def secret_arg_positions(args: list[str], context: str = "") -> set[int]:
    """Indexes of command-line tokens that hold a secret (the flag and its value, or a secret-shaped token)."""
    positions = set()
    for path, _ in find_in_args(args, (), context):
        index = path[0]
        positions.add(index)
        flag = str(args[index])
        if "=" not in flag and not secret_shape(flag, context) and index + 1 < len(args):
            positions.add(index + 1)
        elif not flag.startswith("-") and index and str(args[index - 1]).startswith("-") \
                and "=" not in str(args[index - 1]):
            positions.add(index - 1)  # the flag whose value it is goes too: alone it would take the next word
    return positions


def refer_lmcache_secrets(draft: Draft, extra: dict) -> None:
    """Remove credentials from LMCache keys bound for cache.extra, and say how each can reach LMCache instead:
    S3 keys through the S3 tier's references (LMCache's S3 connector falls back to the AWS variables when
    extra_config has no keys: lmcache/v1/storage_backend/connector/s3_connector.py:106-118 in 0.5.6), other
    top-level keys through LMCACHE_<KEY> variables (lmcache/v1/config.py:999-1003), nested ones not at all."""
    found: list[str] = []
    removed = strip_secrets(extra, found=found)
    if not removed:
        return
    draft.secret_values += found
    s3 = [tier for tier, _ in draft.tiers if _key_env(tier)]
    aws = [name for name in removed if re.search(r"aws_|access_key|secret_key", name, re.IGNORECASE)]
    if aws and s3 and not s3[0].get("credentials_file"):
        for field, variable in _key_env(s3[0]).items():
            s3[0].setdefault(field, variable)
        draft.notes.append(f"LMCache S3 credentials in {', '.join(aws)} were NOT copied; the S3 tier reads "
                           f"{s3[0]['access_key_env']} and {s3[0]['secret_key_env']} from the host at run time: "
                           "export them there")
        removed = [name for name in removed if name not in aws]
    top = [name for name in removed if "." not in name]
    for name in top:
        draft.add_secret_env({_variable(name): _variable(name)})
    if top:
        draft.notes.append(f"LMCache credentials in {', '.join(top)} were NOT copied; LMCache reads them from "
                           f"{', '.join(_variable(n) for n in top)} (serve.secret_env): export those on the host")
    nested = [name for name in removed if "." in name]
    if nested:
        draft.notes.append(f"LMCache credentials in {', '.join(nested)} were NOT copied, and LMCache reads "
                           "extra_config keys from its config file only: no reference can carry them; give the "
                           "backend its credentials another way (its own credentials file or variables)")


def scrub_draft(draft: Draft) -> None:
    """The last guard before the draft becomes text: every secret left anywhere in it becomes a reference (or is
    dropped) with a note naming the host variable to export; notes and comments are masked."""
    serve = draft.serve
    sections = {section.name: section for section in draft.sections()}
    context = " ".join(strings_in(sections)) + " " + " ".join(strings_in([t for t, _ in draft.tiers]))
    env = serve.get("env", {})
    for key in [k for k, v in env.items() if is_secret(k, v, context)]:
        draft.secret_values.append(env.pop(key))
        draft.add_secret_env({key: key})
        draft.notes.append(f"serve.env {key} held a secret; not copied: export {key} on the host (serve.secret_env)")
    if "env" in serve and not env:
        del serve["env"]
    args = serve.get("extra_args", [])
    secret_at = secret_arg_positions(args, context)
    if secret_at:
        draft.secret_values += [args[i].split("=", 1)[-1] for i in secret_at
                                if "=" in args[i] or not args[i].startswith("-")]  # values, not flag names
        flags = sorted({args[i].split("=", 1)[0] for i in secret_at if args[i].startswith("-")})
        serve["extra_args"] = [a for i, a in enumerate(args) if i not in secret_at]
        if not serve["extra_args"]:
            del serve["extra_args"]
        names = ", ".join(re.sub(r"[^A-Za-z0-9]+", "_", flag.lstrip("-")).upper() for flag in flags)
        where = (f"export it on the host (e.g. as {names}) and name it in serve.secret_env if the server reads it "
                 "from its environment" if names else "pass it through a variable the server reads, named in "
                 "serve.secret_env")
        draft.notes.append(f"secrets on the command line ({', '.join(flags) or 'a secret-shaped argument'}) were NOT "
                           f"copied (a recipe argument is written into serve.sh): {where}")
    for section, key in ((draft.serve, "compilation_config"), (draft.cache, "extra")):
        table = section.get(key)
        if isinstance(table, dict):
            found: list[str] = []
            removed = strip_secrets(table, f"{section.name}.{key}.", found)
            if removed:
                draft.secret_values += found
                draft.notes.append(f"secrets in {', '.join(removed)} were NOT copied: set them through "
                                   "serve.secret_env (a host variable read at run time)")
    for tier, notes in draft.tiers:
        _scrub_url(draft, tier, "url", notes, context)
    for fields in draft.sections():
        for key, value in list(fields.items()):
            if isinstance(value, str) and secret_shape(value, context):
                if _scrub_url(draft, fields, key, [], context):
                    continue
                if f"{fields.name}.{key}" in REQUIRED_KEYS:  # no recipe without it
                    raise StackctlError(f"{fields.name}.{key} would be {mask(value)}, which looks like a secret "
                                        f"(fix: launch with a plain {key})")
                draft.secret_values.append(value)
                del fields[key]
                draft.notes.append(f"{fields.name}.{key} held a secret; NOT copied: set it by hand without the "
                                   "secret")
    draft.notes[:] = [redact(note, draft.secret_values) for note in draft.notes]
    for fields in draft.sections():
        for comment_key, lines in fields.comments.items():
            fields.comments[comment_key] = [redact(line, draft.secret_values) for line in lines]
    for _, notes in draft.tiers:
        notes[:] = [redact(note, draft.secret_values) for note in notes]


def _key_env(table: dict) -> dict[str, str]:
    """The key references of a draft's tier whose storage reads host credentials (an S3 bucket): {field: standard
    variable}; {} for any other table (a section has no kind)."""
    name = table["kind"] if "kind" in table else None  # a positioned table's get() refuses a missing key
    return storage_of_kind(tier_kind(name)).key_env if name in TIER_KINDS else {}


def _scrub_url(draft: Draft, table: dict, key: str, notes: list, context: str) -> bool:
    """Drop `user:password@` from a URL value; an S3 tier then reads its keys from host variables. True if done."""
    value = table.get(key) or ""
    match = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*://)([^/@\s]+)@(.*)$", value)
    if not match or not secret_shape(value, context) and ":" not in match.group(2):
        return False
    draft.secret_values += [match.group(2)] + match.group(2).split(":", 1)
    table[key] = match.group(1) + match.group(3)
    if _key_env(table):  # a tier (a section has no kind)
        for field, variable in _key_env(table).items():
            table.setdefault(field, variable)
        notes.append(f"the URL carried credentials, NOT copied: export {table['access_key_env']} and "
                     f"{table['secret_key_env']} on the host")
    else:
        draft.notes.append(f"{key} carried credentials in its URL; NOT copied (removed from the URL): give them "
                           "through a netrc file or a host variable instead")
    return True


def _variable(dotted: str) -> str:
    """The host variable suggested for a secret LMCache key: extra_config.s3_secret_key -> LMCACHE_S3_SECRET_KEY."""
    return "LMCACHE_" + re.sub(r"[^A-Za-z0-9]+", "_", dotted.rsplit(".", 1)[-1]).upper().strip("_")

