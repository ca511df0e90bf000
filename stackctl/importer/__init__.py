"""Import an existing launch into a commented recipe: the inverse of stackspec.serve_args, stackspec.environment and
stackspec.lmcache_config.

A launch is a shell script (env assignments, then `vllm serve MODEL ...`, `python -m
vllm.entrypoints.openai.api_server --model MODEL ...`, `docker run ... IMAGE [vllm serve] MODEL ...`, ATOM's own
server, possibly behind numactl/taskset/exec or inside a container started first), a compose file or a Kubernetes
manifest, plus optionally the LMCache YAML it used. Nothing is dropped silently: vLLM flags without a
recipe field go to serve.extra_args verbatim, LMCache keys without one go to cache.extra, and whatever could not be
carried over is named in a comment. Secret values are never copied: the recipe names the variable instead.

The way through, one stage per module:
  shell          the script's commands and words, heredocs and functions
  launch         the server command, its wrappers, environment and the container it runs in
  container      `docker run` / `podman run` options, and what images run without a command
  manifest       compose services and Kubernetes containers, read as YAML (yaml_input: the limits)
  platform       platform and engine (ROCm, NVIDIA translated, CPU; vLLM or ATOM), the base image
  atom_server    ATOM's own server command translated to `vllm serve` with the ATOM plugin
  flag_values    how vLLM spells and reads a flag and its value (flags.py maps them to recipe keys)
  lmcache        the LMCache config: its YAML (and the limits on what is read), its settings as cache and tiers
  mapping        fills the draft: flags (flags.py), environment, LMCache settings (lmcache.py), host, stack
  credentials    what is a secret; secrets become references to host variables
  writer         the draft as commented TOML, checked by the recipe loader
The draft itself (draft.py) is a typed record: one section of values per recipe section, keyed by the recipe model's
field names. Values only the old launch's run time knew (shell references, placeholders) are found by
stackctl.unresolved, the one detector the importer, the `unresolved-value` rule and render share.
"""

from __future__ import annotations

import re
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.importer.draft import CONTROL, Draft
from stackctl.importer.launch import Launch, parse_launch
from stackctl.importer.lmcache import read_lmcache_yaml
from stackctl.importer.manifest import looks_like_manifest, parse_manifest
from stackctl.importer.mapping import build_draft
from stackctl.importer.writer import render_loadable
from stackctl.importer.yaml_input import MAX_INPUT_BYTES
from stackctl.recipe import model
from stackctl.secrets import redact

__all__ = ["import_launch", "import_launch_text"]


def import_launch(script: Path, lmcache_config: Path | None = None, name: str | None = None) -> str:
    """Recipe TOML text (commented) for the launch in `script` and, if given, its LMCache YAML."""
    text = _read(script, "launch script")
    yaml_text = _read(lmcache_config, "LMCache config") if lmcache_config else None
    return import_launch_text(text, yaml_text, name, script_name=Path(script).name,
                              lmcache_name=Path(lmcache_config).name if lmcache_config else None,
                              script_dir=Path(script).parent)


def import_launch_text(text: str, lmcache_yaml: str | None = None, name: str | None = None, *,
                       script_name: str = "launch.sh", lmcache_name: str | None = None,
                       script_dir: Path | None = None) -> str:
    """Same as import_launch, from text. The result always loads with the recipe loader."""
    if name is not None and (CONTROL.search(name) or not re.match(model.NAME_PATTERN, name)):
        raise StackctlError(f"--name {name!r}: must match {model.NAME_PATTERN} (lower case, digits, . _ -)")
    draft = Draft()
    try:
        lmcache = read_lmcache_yaml(lmcache_yaml, lmcache_name or "LMCache config") if lmcache_yaml is not None \
            else None
    except StackctlError as exc:
        raise StackctlError(redact(str(exc))) from None  # a YAML error quotes the line: it may hold a secret
    except RecursionError:
        raise StackctlError(f"{lmcache_name or 'LMCache config'}: values nested too deeply to be a config "
                            "(fix: check the file)") from None
    try:
        launch = parse_manifest(text, script_name, script_dir) if looks_like_manifest(text) \
            else parse_launch(text, script_dir)
        if lmcache_yaml is None:
            lmcache_yaml, lmcache_name = _followed_config(launch, script_dir)
            if lmcache_yaml is not None:
                draft.notes.append(f"LMCache config read from {lmcache_name} (the script's LMCACHE_CONFIG_FILE), as "
                                   "if --lmcache-config had named it")
        lmcache = read_lmcache_yaml(lmcache_yaml, lmcache_name or "LMCache config") \
            if lmcache_yaml is not None else None
        build_draft(draft, launch, lmcache, name, lmcache_given=lmcache_yaml is not None)
    except StackctlError as exc:
        raise StackctlError(redact(f"{script_name}: {exc}", draft.secret_values)) from None
    except RecursionError:
        raise StackctlError(f"{script_name}: a value (JSON of a flag?) nested too deeply to import (fix: check "
                            "the script)") from None
    sources = script_name + (f" and {lmcache_name}" if lmcache_name else "")
    return render_loadable(draft, sources)


def _followed_config(launch: Launch, script_dir: Path | None) -> tuple[str | None, str | None]:
    """(text, name) of the file the server's LMCACHE_CONFIG_FILE names, when the script writes it (a heredoc) or it
    is readable here (a container path through its volume, a relative path from the script's folder)."""
    path = launch.env.get("LMCACHE_CONFIG_FILE")
    if not path or "$" in path:
        return None, None
    if path in launch.files:
        return launch.files[path], f"{path} (written by the script)"
    host_path = launch.host_path(path)[0]
    candidate = Path(host_path) if host_path.startswith("/") or script_dir is None else Path(script_dir) / host_path
    if not candidate.is_file():
        launch.notes.append(f"LMCACHE_CONFIG_FILE={path} is not readable here: its settings were not imported "
                            "(pass the file with --lmcache-config)")
        return None, None
    return _read(candidate, "LMCache config"), str(candidate)


def _read(path: Path | str, what: str) -> str:
    """A small text file (not a FIFO or a device, at most MAX_INPUT_BYTES), checked before anything is read."""
    from stackctl.recipe.loader import read_small_text

    try:
        return read_small_text(str(path), what, MAX_INPUT_BYTES)
    except FileNotFoundError:
        raise StackctlError(f"{path}: no such {what} (fix: check the path)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StackctlError(f"{path}: cannot read {what}: {exc}") from None
