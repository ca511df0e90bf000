"""Filling the draft recipe from a launch: each mapping in the order its results depend on."""

from __future__ import annotations

import posixpath
import re

from stackctl.errors import StackctlError
from stackctl.importer.draft import Draft
from stackctl.importer.environment import import_env, secret_comment
from stackctl.importer.flags import ServerFlags
from stackctl.importer.host import import_host
from stackctl.importer.launch import Launch
from stackctl.importer.lmcache import import_cache
from stackctl.importer.stack import import_stack, platform_and_engine


def build_draft(draft: Draft, launch: Launch, lmcache: dict | None, name: str | None, lmcache_given: bool) -> None:
    """Fill draft from the launch and its LMCache config (a StackctlError when the server names no model)."""
    draft.notes += launch.notes
    flags = ServerFlags(draft, launch)
    flags.read()
    if not draft.get("model", "path"):
        raise StackctlError("the server command names no model (fix: `vllm serve MODEL` or `--model MODEL`)")
    _served_name(draft, flags.model_arg)
    platform, engine = platform_and_engine(draft, launch)
    env_cache = import_env(draft, launch, platform, engine)
    import_cache(draft, launch, lmcache, env_cache, flags.lmcache_overrides, lmcache_given)
    import_host(draft, launch)
    import_stack(draft, launch, name)
    secret_comment(draft)
    _note_unresolved(draft)


def _served_name(draft: Draft, model_arg: str) -> None:
    """Without --served-model-name vLLM serves the model argument as given; stackctl's default is its basename."""
    default = posixpath.basename(draft.get("model", "path").rstrip("/"))
    served = draft.get("model", "served_name")
    if served is None and model_arg != default:
        draft.set("model", "served_name", model_arg, "vLLM's default: the model argument as given")
    elif served == default:
        del draft.values["model"]["served_name"]


def _note_unresolved(draft: Draft) -> None:
    """Values that still hold a shell reference the script did not set (the user's environment had it)."""
    texts = [draft.get("model", "path") or ""] + list(draft.get("serve", "env", {}).values()) \
        + list(draft.get("serve", "extra_args", []))
    found = sorted({m.group(0) for text in texts for m in re.finditer(r"\$(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*|\()",
                                                                      text)})
    if found:
        draft.notes.append(f"unresolved shell references kept as written: {' '.join(found)} (replace them with "
                           "their values)")
