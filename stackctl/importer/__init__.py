"""Import an existing launch into a commented recipe: the inverse of stackspec.serve_args, stackspec.environment and
stackspec.lmcache_config.

A launch is a shell script (env assignments, then `vllm serve MODEL ...`, `python -m
vllm.entrypoints.openai.api_server --model MODEL ...` or `docker run ... IMAGE vllm serve ...`, possibly behind
numactl/taskset/exec), plus optionally the LMCache YAML it used. Nothing is dropped silently: vLLM flags without a
recipe field go to serve.extra_args verbatim, LMCache keys without one go to cache.extra, and whatever could not be
carried over is named in a comment. Secret values are never copied: the recipe names the variable instead.

The way through, one module each: shell (words of a script) -> launch and docker (the server command, its
environment and container) -> build (fills the draft: flags, environment, lmcache, host, stack) -> draft (commented
TOML through toml_writer, checked by the recipe loader). lmcache_yaml reads the LMCache file; credentials says what
is a secret; values and flag_values hold the small checks and conversions they share.
"""

from __future__ import annotations

import re
from pathlib import Path

from stackctl.errors import StackctlError
from stackctl.importer.build import build_draft
from stackctl.importer.credentials import is_secret
from stackctl.importer.draft import Draft, render_loadable
from stackctl.importer.flags import BOOL_FLAGS, VALUE_FLAGS
from stackctl.importer.launch import Launch, parse_launch
from stackctl.importer.lmcache_yaml import read_flat_yaml, read_lmcache_yaml
from stackctl.importer.shell import command_words, expand, split_commands
from stackctl.importer.toml_writer import toml_key, toml_string, toml_value
from stackctl.importer.values import CONTROL
from stackctl.recipe import model
from stackctl.secrets import redact

# The names tests used while the importer was one module.
_VALUE_FLAGS, _BOOL_FLAGS, _is_secret = VALUE_FLAGS, BOOL_FLAGS, is_secret

__all__ = ["BOOL_FLAGS", "VALUE_FLAGS", "Launch", "command_words", "expand", "import_launch", "import_launch_text",
           "is_secret", "parse_launch", "read_flat_yaml", "read_lmcache_yaml", "split_commands", "toml_key",
           "toml_string", "toml_value"]


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
        launch = parse_launch(text, script_dir)
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


def _read(path, what: str) -> str:
    """A small text file (not a FIFO or a device, at most MAX_INPUT_BYTES), checked before anything is read."""
    from stackctl.importer.input_limits import MAX_INPUT_BYTES
    from stackctl.recipe.loader import read_small_text

    try:
        return read_small_text(str(path), what, MAX_INPUT_BYTES)
    except FileNotFoundError:
        raise StackctlError(f"{path}: no such {what} (fix: check the path)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StackctlError(f"{path}: cannot read {what}: {exc}") from None
