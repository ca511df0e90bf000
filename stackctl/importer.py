"""Import an existing launch into a commented recipe: the inverse of stackspec.serve_args, stackspec.environment and
stackspec.lmcache_config.

A launch is a shell script (env assignments, then `vllm serve MODEL ...`, `python -m
vllm.entrypoints.openai.api_server --model MODEL ...` or `docker run ... IMAGE vllm serve ...`, possibly behind
numactl/taskset/exec), plus optionally the LMCache YAML it used. Nothing is dropped silently: vLLM flags without a
recipe field go to serve.extra_args verbatim, LMCache keys without one go to cache.extra, and whatever could not be
carried over is named in a comment. Secret values are never copied: the recipe names the variable instead.

Sections of this module: shell reading, finding the launch, vLLM flags, environment, LMCache config, TOML output.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
import shlex
from pathlib import Path

from stackctl import stackspec
from stackctl.errors import StackctlError
from stackctl.recipe import model

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
# Same words as the loader's secret check (it refuses such names in serve.env), plus AWS_* variables.
_SECRET_NAME = re.compile(r"(SECRET|PASSWORD|TOKEN|ACCESS_KEY|API_KEY|PRIVATE_KEY|CREDENTIAL)", re.I)
# LMCache config keys that hold credentials (narrower: min_retrieve_tokens is no secret).
_SECRET_CONFIG_KEY = re.compile(r"(^|_)(secret|password|passwd|token|credentials?|access_key(_id)?|api_key|"
                                r"private_key)$", re.I)
_URL_CREDENTIALS = re.compile(r"://[^/@\s:]+:[^/@\s]+@")  # scheme://user:password@host


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
    if name is not None and (_CONTROL.search(name) or not re.match(model.NAME_PATTERN, name)):
        raise StackctlError(f"--name {name!r}: must match {model.NAME_PATTERN} (lower case, digits, . _ -)")
    lmcache = read_lmcache_yaml(lmcache_yaml, lmcache_name or "LMCache config") if lmcache_yaml is not None else None
    draft = _Draft()
    try:
        launch = parse_launch(text, script_dir)
        _build(draft, launch, lmcache, name, lmcache_given=lmcache_yaml is not None)
    except StackctlError as exc:
        raise StackctlError(f"{script_name}: {exc}") from None
    sources = script_name + (f" and {lmcache_name}" if lmcache_name else "")
    return _render_loadable(draft, sources)


def _read(path, what: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StackctlError(f"{path}: no such {what} (fix: check the path)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StackctlError(f"{path}: cannot read {what}: {exc}") from None


def _render_loadable(draft: _Draft, sources: str) -> str:
    """The draft as TOML that the recipe loader accepts. Values the loader still refuses (odd input the mapping did
    not foresee, e.g. control characters deep in a table) are dropped with a note naming them."""
    from stackctl.errors import RecipeError
    from stackctl.recipe.loader import load_recipe_text

    for _ in range(8):
        text = draft.render(sources)
        try:
            load_recipe_text(text, "<imported recipe>")
            return text
        except RecipeError as exc:
            for finding in exc.findings:
                if not draft.drop(finding.key):
                    raise RuntimeError(f"stackctl import produced a recipe that does not load:\n{exc}\n---\n"
                                       f"{text}") from None
                draft.notes.append(f"{finding.key} dropped: {finding.message}; set it by hand")
    raise RuntimeError("stackctl import could not produce a recipe that loads")  # pragma: no cover


# -- shell reading --------------------------------------------------------------------------------------------
# Commands are split by a small scanner that knows quotes, comments, line continuations and separators; each
# command's words then come from shlex. A `$` that must stay literal (single quotes, `\$`) is marked before shlex
# sees it, and so is an unquoted `$` (its expansion is split into words, as the shell does).

_LITERAL_DOLLAR = "\x00"
_BARE_DOLLAR = "\x01"
_VARIABLE = re.compile(r"([\x01$])(?:\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+?])([^}]*))?\}|([A-Za-z_][A-Za-z0-9_]*))")
_KEYWORDS = {"if", "then", "elif", "else", "do", "while", "until", "!", "{", "time"}


def split_commands(text: str) -> list[str]:
    """Simple commands of a shell text (separators: newline ; & && || |), continuations joined, comments dropped."""
    text = text.replace(_LITERAL_DOLLAR, "").replace(_BARE_DOLLAR, "")  # the scanner's own markers
    commands: list[str] = []
    buf: list[str] = []
    quote = ""
    depth = 0  # inside $( ... )
    i, n = 0, len(text)

    def flush():
        command = "".join(buf).strip()
        if command:
            commands.append(command)
        buf.clear()

    while i < n:
        c, nxt = text[i], text[i + 1:i + 2]
        if quote == "'":
            buf.append(_LITERAL_DOLLAR if c == "$" else c)
            quote = "" if c == "'" else quote
        elif c == "\\":
            if nxt == "\n":
                pass  # line continuation
            elif nxt == "$":
                buf.append(_LITERAL_DOLLAR)
            else:
                buf.append(c + nxt)
            i += 2
            continue
        elif quote:  # double quotes or backticks
            buf.append(c)
            quote = "" if c == quote else quote
        elif c in "'\"`":
            quote = c
            buf.append(c)
        elif c == "$" and nxt == "(":
            depth += 1
            buf.append("$(")
            i += 2
            continue
        elif c == "$":
            buf.append(_BARE_DOLLAR)
        elif depth:
            depth += {"(": 1, ")": -1}.get(c, 0)
            buf.append(c)
        elif c == "#" and (not buf or buf[-1] in " \t"):
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c in "\n;":
            flush()
        elif c == "&" and ((buf and buf[-1] in "<>") or nxt == ">"):
            buf.append(c)  # redirection: 2>&1, &>file
        elif c in "&|":
            flush()
            i += 2 if nxt in ("&", "|") and (c == "|" or nxt == "&") else 1
            continue
        else:
            buf.append(c)
        i += 1
    if quote:
        raise StackctlError(f"unterminated {quote} quote in the launch script (fix: close the quote)")
    flush()
    return commands


def command_words(command: str) -> list[str]:
    """shlex words of one command, `$` markers kept for expand()."""
    try:
        words = shlex.split(command, posix=True)
    except ValueError as exc:
        raise StackctlError(f"cannot read the launch script near {_show(command)}: {exc}") from None
    kept, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif re.fullmatch(r"\d*(>>?|<|&>>?|>\|)", word):
            skip = True  # the redirection's target is the next word
        elif not re.fullmatch(r"\d*(>>?|<|&>>?)\S+", word):
            kept.append(word)
    return kept


def expand(word: str, variables: dict, split: bool = True) -> list[str]:
    """Expand $NAME, ${NAME}, ${NAME:-default} with variables the script set; unknown references stay as written.
    Unquoted expansions are split into words (like the shell) when split is true."""
    pieces: list[tuple[str, str]] = []  # (text, "text" | "split" (unquoted expansion) | "whole")
    pos = 0
    for match in _VARIABLE.finditer(word):
        pieces.append((word[pos:match.start()], "text"))
        pos = match.end()
        marker, name, op, arg = match.group(1), match.group(2) or match.group(5), match.group(3), match.group(4)
        value = variables.get(name)
        if op and op.startswith(":") and value == "":
            value = None
        if op and op.endswith("+"):
            value = "" if value is None else _restore(arg or "")
        elif value is None and op and op[-1] in "-=":
            value = _restore(arg or "")
        if value is None:
            pieces.append((_restore(match.group(0)), "text"))
        else:
            pieces.append((value, "split" if split and marker == _BARE_DOLLAR else "whole"))
    pieces.append((word[pos:], "text"))
    words, current, literal = [], "", False
    for text, kind in pieces:
        if kind != "split":
            current += _restore(text)
            literal = literal or bool(text) or kind == "whole"
            continue
        parts = re.split(r"[ \t\n]+", text)
        current += parts[0]
        for part in parts[1:]:
            if current or literal:
                words.append(current)
            current, literal = part, False
    if current or literal or word == "":
        words.append(current)
    return words


def _restore(text: str) -> str:
    return text.replace(_LITERAL_DOLLAR, "$").replace(_BARE_DOLLAR, "$")


def _show(text: str) -> str:
    text = _restore(text)
    return repr(text if len(text) < 60 else text[:57] + "...")


# -- finding the launch ---------------------------------------------------------------------------------------

class Launch:
    """What a launch script runs: the server's argv and environment, and the container around it (if any)."""

    def __init__(self):
        self.kind = ""                  # "vllm serve", "api_server" or "image entrypoint"
        self.args: list[str] = []       # server arguments after `vllm serve` / `-m module`
        self.env: dict[str, str] = {}   # the server process's environment as the script sets it
        self.passthrough: list[str] = []  # docker -e NAME: taken from the host at run time
        self.image: str | None = None
        self.devices: list[str] = []
        self.volumes: list[tuple[str, str]] = []  # (host, container)
        self.container_name: str | None = None
        self.shm_size: str | None = None
        self.numa: str | None = None    # numactl --cpunodebind / --membind
        self.cpus: str | None = None    # taskset -c / docker --cpuset-cpus
        self.notes: list[str] = []


def parse_launch(text: str, script_dir: Path | None = None) -> Launch:
    """The first server launch in a shell script (a StackctlError when there is none)."""
    launches = _scan(text, {}, set(), script_dir, in_container=False)
    if not launches:
        raise StackctlError("no server command found (fix: the script must run `vllm serve MODEL ...`, `python -m "
                            "vllm.entrypoints.openai.api_server --model MODEL ...` or `docker run ... IMAGE vllm "
                            "serve MODEL ...`)")
    launch = launches[0]
    if len(launches) > 1:
        launch.notes.append(f"the script starts {len(launches)} servers; imported the first one")
    return launch


def _scan(text: str, variables: dict, exported: set, script_dir, in_container: bool) -> list[Launch]:
    launches = []
    for command in split_commands(text):
        words = command_words(command)
        while words and words[0] in _KEYWORDS:
            words = words[1:]
        if not words:
            continue
        head = words[0]
        if all(_ASSIGNMENT.match(w) for w in words):
            for word in words:
                key, value = _assignment(word, variables)
                if value is not None:
                    variables[key] = value
        elif head in ("export", "declare", "typeset", "readonly", "local"):
            exporting = head == "export" or any(w.startswith("-") and "x" in w for w in words[1:])
            for word in words[1:]:
                if word.startswith("-"):
                    continue
                key, value = _assignment(word, variables)
                if value is not None:
                    variables[key] = value
                if exporting:
                    exported.add(key)
        elif head == "unset":
            for word in words[1:]:
                variables.pop(word, None)
                exported.discard(word)
        else:
            launch = _launch_in(words, variables, exported, script_dir, in_container)
            if launch is not None:
                launches.append(launch)
    return launches


def _assignment(word: str, variables: dict) -> tuple[str, str | None]:
    match = _ASSIGNMENT.match(word)
    if not match:
        return word, None
    if match.group(2).startswith("("):
        return match.group(1), None  # bash array: not an environment value
    return match.group(1), (expand(match.group(2), variables, split=False) or [""])[0]


def _launch_in(words, variables, exported, script_dir, in_container) -> Launch | None:
    """The launch in one command, if it starts a server (directly, through docker, or through `bash -c`)."""
    inline = {}
    index = 0
    while index < len(words) and _ASSIGNMENT.match(words[index]):
        key, value = _assignment(words[index], variables)
        if value is not None:
            inline[key] = value
        index += 1
    argv = [part for word in words[index:] for part in expand(word, variables)]
    env = {key: variables[key] for key in sorted(exported) if key in variables}
    env.update(inline)
    for position, word in enumerate(argv):
        base = posixpath.basename(word)
        if base in ("docker", "podman") and not in_container:
            rest = argv[position + 1:]
            if rest[:1] == ["run"] or rest[:2] == ["container", "run"]:
                return _docker_launch(rest[1 if rest[0] == "run" else 2:], env, script_dir)
        kind, start = _server_at(argv, position)
        if kind:
            launch = Launch()
            launch.kind, launch.args, launch.env = kind, argv[start:], env
            _read_wrappers(argv[:position], launch)
            return launch
        if base in ("bash", "sh") and position + 2 < len(argv) and argv[position + 1] in ("-c", "-lc", "-ec"):
            inner = _scan(argv[position + 2], {**variables, **inline}, set(exported) | set(inline), script_dir,
                          in_container)
            if inner:
                _read_wrappers(argv[:position], inner[0])
                return inner[0]
            return None
    return None


def _server_at(argv: list[str], i: int) -> tuple[str, int]:
    """("vllm serve" | "api_server", index of its first argument) when a server command starts at argv[i]."""
    base = posixpath.basename(argv[i])
    if base == "vllm" and argv[i + 1:i + 2] == ["serve"]:
        return "vllm serve", i + 2
    if re.fullmatch(r"python[0-9.]*", base) and argv[i + 1:i + 3] == ["-m", "vllm.entrypoints.openai.api_server"]:
        return "api_server", i + 3
    return "", 0


def _read_wrappers(prefix: list[str], launch: Launch) -> None:
    """numactl / taskset / env in front of the server: pinning and extra variables."""
    for i, word in enumerate(prefix):
        base = posixpath.basename(word)
        value = prefix[i + 1] if i + 1 < len(prefix) else ""
        if base == "numactl":
            for opt, node_value in _options(prefix[i + 1:], ("--cpunodebind", "-N", "--membind", "-m")):
                if re.fullmatch(r"[0-9,-]+", node_value) and (launch.numa is None or opt in ("--cpunodebind", "-N")):
                    launch.numa = node_value
        elif base == "taskset":
            for opt, cpus in _options(prefix[i + 1:], ("-c", "--cpu-list")):
                launch.cpus = cpus
            if launch.cpus is None and value:
                launch.notes.append(f"taskset with a CPU mask ({value}) is not imported: set host.isolcpus to the "
                                    "CPU list")
        elif _ASSIGNMENT.match(word):
            key, val = word.split("=", 1)
            launch.env[key] = val


def _options(words: list[str], names: tuple) -> list[tuple[str, str]]:
    """(option, value) pairs for `--opt=value`, `--opt value`, `-o value` and `-ovalue` forms."""
    found = []
    for i, word in enumerate(words):
        for name in names:
            if word == name and i + 1 < len(words):
                found.append((name, words[i + 1]))
            elif word.startswith(name + "="):
                found.append((name, word[len(name) + 1:]))
            elif len(name) == 2 and word.startswith(name) and len(word) > 2 and not word.startswith("--"):
                found.append((name, word[2:]))
    return found


# docker run options that take a value (long, and short letters); everything else is a flag.
_DOCKER_VALUE_OPTIONS = {
    "--env", "--env-file", "--volume", "--mount", "--publish", "--name", "--device", "--group-add", "--cap-add",
    "--cap-drop", "--security-opt", "--shm-size", "--ipc", "--network", "--net", "--workdir", "--user",
    "--entrypoint", "--gpus", "--cpuset-cpus", "--cpuset-mems", "--memory", "--memory-swap", "--ulimit", "--label",
    "--label-file", "--hostname", "--restart", "--runtime", "--pid", "--platform", "--add-host", "--log-driver",
    "--log-opt", "--tmpfs", "--pull", "--cpus", "--cpu-shares", "--stop-signal", "--stop-timeout", "--dns",
    "--userns", "--uts", "--cgroupns", "--cgroup-parent", "--cidfile", "--volumes-from", "--link", "--expose",
    "--device-cgroup-rule", "--sysctl", "--health-cmd", "--health-interval", "--health-retries",
    "--health-timeout", "--health-start-period", "--mac-address", "--ip", "--ip6", "--network-alias",
    "--oom-score-adj", "--storage-opt", "--blkio-weight", "--attach", "--detach-keys", "--annotation",
    "--memory-reservation", "--pids-limit",
}
_DOCKER_SHORT = {"e": "--env", "v": "--volume", "p": "--publish", "w": "--workdir", "u": "--user", "m": "--memory",
                 "l": "--label", "h": "--hostname", "a": "--attach", "c": "--cpu-shares"}


def _docker_launch(words: list[str], host_env: dict, script_dir) -> Launch | None:
    """`docker run [options] IMAGE [command]`: the container's environment, devices and mounts, then the server.
    host_env is what the script exported (docker -e NAME copies from it)."""
    options: list[tuple[str, str]] = []
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-":
        word = words[i]
        if word == "--":
            i += 1
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if eq:
                options.append((name, value))
            elif name in _DOCKER_VALUE_OPTIONS and i + 1 < len(words):
                options.append((name, words[i + 1]))
                i += 1
            else:
                options.append((name, ""))
        else:
            for pos, letter in enumerate(word[1:], start=1):
                if letter in _DOCKER_SHORT:
                    value = word[pos + 1:]
                    if not value and i + 1 < len(words):
                        value = words[i + 1]
                        i += 1
                    options.append((_DOCKER_SHORT[letter], value))
                    break
                options.append((f"-{letter}", ""))
        i += 1
    if i >= len(words):
        return None
    image, command = words[i], words[i + 1:]
    container_env: dict[str, str] = {}
    passthrough: list[str] = []
    notes = []
    entrypoint = None
    launch = Launch()
    for name, value in options:
        if name == "--env":
            key, eq, val = value.partition("=")
            if eq:
                container_env[key] = val
            elif key in host_env:
                container_env[key] = host_env[key]
            else:
                passthrough.append(key)
        elif name == "--env-file":
            container_env.update(_env_file(value, script_dir, notes))
        elif name == "--device":
            launch.devices.append(value.split(":", 1)[0])
        elif name == "--volume":
            parts = value.split(":")
            if len(parts) >= 2:
                launch.volumes.append((parts[0], parts[1]))
        elif name == "--mount":
            fields = dict(item.partition("=")[::2] for item in value.split(","))
            source = fields.get("source") or fields.get("src")
            target = fields.get("target") or fields.get("destination") or fields.get("dst")
            if source and target:
                launch.volumes.append((source, target))
        elif name == "--name":
            launch.container_name = value
        elif name == "--shm-size":
            launch.shm_size = value.lower()
        elif name == "--cpuset-cpus":
            launch.cpus = value
        elif name == "--cpuset-mems":
            launch.numa = launch.numa or value
        elif name == "--entrypoint":
            entrypoint = value
        elif name == "--publish":
            notes.append(f"docker -p {value}: stackctl runs with host networking, so the server listens on "
                         "serve.port itself")
    if entrypoint:
        command = [entrypoint] + command
    inner_vars = dict(container_env)
    if command and command[0].startswith("-"):
        server = Launch()
        server.kind, server.args = "image entrypoint", command
        notes.append(f"the container command starts with a flag: assumed {image}'s entrypoint is the vLLM OpenAI "
                     "server")
    else:
        inner = _scan(shlex.join(command), inner_vars, set(inner_vars), script_dir, in_container=True)
        if not inner:
            return None
        server = inner[0]
    launch.kind, launch.args = server.kind, server.args
    launch.env = {**container_env, **server.env}
    launch.passthrough = passthrough
    launch.image = image
    launch.numa = server.numa or launch.numa
    launch.cpus = server.cpus or launch.cpus
    launch.notes = notes + server.notes
    hidden = sorted(key for key in host_env if key == "PYTHONHASHSEED" and key not in launch.env)
    for key in hidden:
        launch.notes.append(f"{key} is set in the script but not passed to the container (no -e {key}): the "
                            "server ran without it")
    return launch


def _env_file(path: str, script_dir, notes: list) -> dict:
    """docker --env-file: KEY=VALUE lines, taken literally."""
    candidate = Path(path)
    if not candidate.is_absolute() and script_dir is not None:
        candidate = Path(script_dir) / candidate
    try:
        lines = candidate.read_text(encoding="utf-8").splitlines()
    except OSError:
        notes.append(f"docker --env-file {path} could not be read: add its variables to serve.env")
        return {}
    env = {}
    for line in lines:
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            env[key.strip()] = value
    return env


# -- the draft recipe -----------------------------------------------------------------------------------------

class _Draft:
    """Recipe values by section, with a comment per key, section notes and header notes; renders itself as TOML."""

    def __init__(self):
        self.values: dict[str, dict] = {section: {} for section in model.SECTION_TYPES}
        self.comments: dict[tuple, list[str]] = {}
        self.tiers: list[tuple[dict, list[str]]] = []
        self.notes: list[str] = []

    def set(self, section: str, key: str, value, comment: str | None = None) -> None:
        self.values[section][key] = value
        if comment:
            self.comment(section, key, comment)

    def comment(self, section: str, key: str, text: str) -> None:
        self.comments.setdefault((section, key), []).append(text)

    def get(self, section: str, key: str, default=None):
        return self.values[section].get(key, default)

    def drop(self, key_path: str) -> bool:
        """Remove the value at a loader key path (`serve.env.X`, `cache.tiers[1].path`); False if there is none."""
        tier = re.match(r"cache\.tiers\[(\d+)\]", key_path)
        if tier and int(tier.group(1)) < len(self.tiers):
            del self.tiers[int(tier.group(1))]
            return True
        parts = key_path.split(".")
        if len(parts) >= 2 and parts[0] in self.values and parts[1] in self.values[parts[0]] and parts[1] != "name":
            del self.values[parts[0]][parts[1]]
            return True
        return False

    def render(self, sources: str) -> str:
        lines = [f"# Imported by `stackctl init --from-command` from {_clean(sources)}.",
                 "# Check every value, then run `stackctl validate` on this file: its rules report what the old "
                 "launch", "# got wrong (a missing hash seed, graphs off, ...)."]
        if self.notes:
            lines.append("#")
            lines.append("# Import notes:")
            for note in self.notes:
                lines += _comment_lines(note, bullet=True)
        for section, cls in model.SECTION_TYPES.items():
            values = self.values[section]
            section_notes = self.comments.get((section, ""), [])
            has_tiers = section == "cache" and self.tiers
            if not values and not section_notes and not has_tiers:
                continue
            lines += ["", f"[{section}]"]
            for note in section_notes:
                lines += _comment_lines(note)
            for spec in model.recipe_fields(cls):
                if spec.name in values:
                    for note in self.comments.get((section, spec.name), []):
                        lines += _comment_lines(note)
                    lines.append(f"{toml_key(spec.name)} = {toml_value(values[spec.name])}")
            if has_tiers:
                for tier, notes in self.tiers:
                    lines += ["", "[[cache.tiers]]"]
                    for note in notes:
                        lines += _comment_lines(note)
                    for spec in model.recipe_fields(model.Tier):
                        if spec.name in tier:
                            lines.append(f"{toml_key(spec.name)} = {toml_value(tier[spec.name])}")
        return "\n".join(lines) + "\n"


def _clean(text: str) -> str:
    """Comment text on one line: control characters (newlines) would end the TOML comment."""
    return _CONTROL.sub(" ", text)


def _comment_lines(text: str, bullet: bool = False) -> list[str]:
    import textwrap

    first, rest = ("# - ", "#   ") if bullet else ("# ", "# ")
    wrapped = textwrap.wrap(_clean(text), width=112, break_long_words=False, break_on_hyphens=False) or [""]
    return [(first if i == 0 else rest) + line for i, line in enumerate(wrapped)]


def _fits(cls, key: str, value) -> bool:
    """Whether value meets the recipe field's declared constraints, so the imported recipe loads."""
    meta = cls._fields[key].meta
    if isinstance(value, str) and _CONTROL.search(value):
        return False
    if "choices" in meta and value not in meta["choices"]:
        return False
    if "pattern" in meta and isinstance(value, str) and not re.match(meta["pattern"], value):
        return False
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if "minimum" in meta and value < meta["minimum"] or "maximum" in meta and value > meta["maximum"]:
            return False
        if "exclusive_minimum" in meta and value <= meta["exclusive_minimum"]:
            return False
    return True


def _build(draft: _Draft, launch: Launch, lmcache: dict | None, name: str | None, lmcache_given: bool) -> None:
    draft.notes += launch.notes
    flags = _ServerFlags(draft, launch)
    flags.read()
    if not draft.get("model", "path"):
        raise StackctlError("the server command names no model (fix: `vllm serve MODEL` or `--model MODEL`)")
    _served_name(draft, flags.model_arg)
    platform, engine = _platform_and_engine(draft, launch)
    env_cache = _import_env(draft, launch, platform, engine)
    _import_cache(draft, launch, lmcache, env_cache, flags.lmcache_overrides, lmcache_given)
    _import_host(draft, launch)
    _import_stack(draft, launch, name)
    _secret_comment(draft)
    _note_unresolved(draft)


def _served_name(draft: _Draft, model_arg: str) -> None:
    """Without --served-model-name vLLM serves the model argument as given; stackctl's default is its basename."""
    default = posixpath.basename(draft.get("model", "path").rstrip("/"))
    served = draft.get("model", "served_name")
    if served is None and model_arg != default:
        draft.set("model", "served_name", model_arg, "vLLM's default: the model argument as given")
    elif served == default:
        del draft.values["model"]["served_name"]


def _import_stack(draft: _Draft, launch: Launch, name: str | None) -> None:
    path = draft.get("model", "path")
    served = draft.get("model", "served_name") or ""
    candidates = [name, launch.container_name, posixpath.basename(served.rstrip("/")),
                  posixpath.basename(path.rstrip("/"))]
    for candidate in candidates:
        slug = _slug(candidate or "")
        if slug:
            break
    else:
        slug = "imported-stack"
    draft.values["stack"] = {"name": slug, **draft.values["stack"]}
    if not name:
        draft.comment("stack", "name", "derived from the launch; choose your own (image tag, container name)")
    if launch.image:
        if _fits(model.Stack, "base_image", launch.image):
            draft.set("stack", "base_image", launch.image, "the image the old launch ran")
        else:
            draft.notes.append(f"image {launch.image!r} is not a valid stack.base_image: set it by hand")
        version = _vllm_version_from_image(launch.image)
        if version:
            draft.set("versions", "vllm", version, "from the image tag")
    if draft.get("cache", "enabled"):
        draft.comment("versions", "", "The LMCache version is not visible in a launch: pin the one your image had, "
                                      'e.g. lmcache = "0.5.6".')


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9_.-]+", "-", text.lower()).strip("-_.")[:63].rstrip("-_.")
    return slug if re.match(model.NAME_PATTERN, slug) else ""


def _vllm_version_from_image(image: str) -> str | None:
    repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
    match = re.search(r"vllm[_-]?v?(\d+\.\d+\.\d+)", tag, re.I)
    if not match and "vllm" in repo.lower():
        match = re.fullmatch(r"v?(\d+\.\d+\.\d+)(?:[-+._][A-Za-z0-9._-]*)?", tag)
    return match.group(1) if match and _fits(model.Versions, "vllm", match.group(1)) else None


_ROCM_PREFIXES = ("HIP_", "ROCR_", "VLLM_ROCM_", "AITER_", "ATOM_")


def _platform_and_engine(draft: _Draft, launch: Launch) -> tuple[str, str]:
    env, image = launch.env, (launch.image or "").lower()
    if "/dev/kfd" in launch.devices:
        platform, why = "rocm", "docker --device /dev/kfd"
    elif any(k.startswith("VLLM_CPU_") for k in env) or env.get("VLLM_TARGET_DEVICE") == "cpu" or "cpu" in image:
        platform, why = "cpu", "the launch sets up vLLM's CPU backend"
    elif "rocm" in image or any(k.startswith(_ROCM_PREFIXES) for k in env):
        named = sorted(k for k in env if k.startswith(_ROCM_PREFIXES))
        platform, why = "rocm", f"ROCm variables ({', '.join(named[:3])})" if named else "a ROCm image"
    else:
        platform, why = "rocm", "assumed: nothing in the launch names the platform"
    draft.set("stack", "platform", platform, why)
    if platform == "cpu" or env.get("ATOM_DISABLE_VLLM_PLUGIN") == "1":
        engine, why = "vllm", ("ATOM_DISABLE_VLLM_PLUGIN=1" if platform != "cpu" else "")
    elif "atom" in image:
        engine, why = "atom-vllm", 'the image name contains "atom"'
    elif any(k.startswith("ATOM_") for k in env):
        engine, why = "atom-vllm", "ATOM_* variables are set"
    else:
        engine, why = "vllm", ""
    draft.set("stack", "engine", engine, why or None)
    return platform, engine


# -- vLLM flags -----------------------------------------------------------------------------------------------

# flag -> (section, key, converter): the inverse of stackspec.serve_args.
_VALUE_FLAGS = {
    "--host": ("serve", "host", str),
    "--port": ("serve", "port", int),
    "--tensor-parallel-size": ("model", "tensor_parallel", int),
    "-tp": ("model", "tensor_parallel", int),
    "--dtype": ("model", "dtype", str),
    "--kv-cache-dtype": ("model", "kv_cache_dtype", str),
    "--max-model-len": ("model", "max_model_len", "human_int"),
    "--gpu-memory-utilization": ("serve", "gpu_memory_utilization", float),
    "--max-num-batched-tokens": ("serve", "max_num_batched_tokens", "human_int"),
    "--max-num-seqs": ("serve", "max_num_seqs", int),
    "--block-size": ("serve", "block_size", int),
    "--prefix-caching-hash-algo": ("serve", "prefix_caching_hash_algo", str),
    "--reasoning-parser": ("model", "reasoning_parser", str),
}
_BOOL_FLAGS = {
    "--trust-remote-code": ("model", "trust_remote_code"),
    "--enable-prefix-caching": ("serve", "prefix_caching"),
    "--async-scheduling": ("serve", "async_scheduling"),
    "--enforce-eager": ("serve", "enforce_eager"),
}
_SECRET_FLAG = re.compile(r"^--([a-z0-9]+-)*(api-key|token|secret|password|credentials?|access-key)$")
_SECRET_FLAG_ENV = {"--api-key": "VLLM_API_KEY", "--hf-token": "HF_TOKEN"}


def _flag_name(token: str) -> str:
    """vLLM's spelling of a flag: underscores become dashes in the name (before any `.` or `=`)."""
    if not token.startswith("--"):
        return token.split("=", 1)[0]
    name = token.split("=", 1)[0]
    head, dot, tail = name.partition(".")
    return head.replace("_", "-") + dot + tail


class _ServerFlags:
    """Reads the server's argv into the draft: known flags to recipe keys, the rest verbatim to extra_args."""

    def __init__(self, draft: _Draft, launch: Launch):
        self.draft, self.launch, self.args = draft, launch, launch.args
        self.extra: list[str] = []
        self.compilation: list[tuple[list[str], str, object]] = []  # (tokens, dotted key or "", value)
        self.kv_transfer: list[tuple[list[str], str, object]] = []
        self.tool_choice: list[str] = []
        self.tool_parser: tuple[list[str], str] | None = None
        self.lmcache_overrides: dict = {}
        self.model_arg = ""

    def read(self) -> None:
        args, i = self.args, 0
        if self.launch.kind == "vllm serve" and args and not args[0].startswith("-"):
            self.set_model(args[0], "")
            i = 1
        while i < len(args):
            i = self.read_one(i)
        self.finish()

    def value_at(self, i: int) -> tuple[str | None, int]:
        """The value of the flag at i (`--flag=value` or the next token) and the index after it."""
        token = self.args[i]
        if token.startswith("-") and "=" in token:
            return token.split("=", 1)[1], i + 1
        if i + 1 < len(self.args) and not self.args[i + 1].startswith("--"):
            return self.args[i + 1], i + 2
        return None, i + 1

    def read_one(self, i: int) -> int:
        token = self.args[i]
        name = _flag_name(token)
        if not token.startswith("-"):
            self.extra.append(token)
            return i + 1
        if name == "--model":
            value, after = self.value_at(i)
            if value is not None:
                self.set_model(value, "from --model")
            return after
        if name in _VALUE_FLAGS:
            return self.read_value_flag(i, name)
        bare = name[5:] if name.startswith("--no-") else name[2:]
        if "--" + bare in _BOOL_FLAGS and "=" not in token:
            section, key = _BOOL_FLAGS["--" + bare]
            self.draft.set(section, key, not name.startswith("--no-"))
            return i + 1
        if name == "--served-model-name":
            return self.read_served_names(i)
        if name in ("--compilation-config", "-cc") or name.startswith(("--compilation-config.", "-cc.")):
            return self.read_dict_flag(i, name, self.compilation)
        if name == "-O" or name.startswith("-O.") or token.startswith("-O") or name == "--optimization-level":
            return self.read_optimization(i, token)
        if name == "--kv-transfer-config" or name.startswith("--kv-transfer-config."):
            return self.read_dict_flag(i, name, self.kv_transfer)
        if name == "--enable-auto-tool-choice":
            self.tool_choice = [token]
            return i + 1
        if name == "--tool-call-parser":
            value, after = self.value_at(i)
            if value is not None:
                self.tool_parser = (self.args[i:after], value)
            return after
        if _SECRET_FLAG.match(name):
            return self.read_secret_flag(i, name)
        self.extra.append(token)
        return i + 1

    def set_model(self, path: str, why: str) -> None:
        if _CONTROL.search(path) or not path:
            raise StackctlError(f"model {path!r}: not a usable model path (fix: a directory or a Hugging Face id)")
        self.model_arg = path
        host_path, mapped = _host_path(path, self.launch)
        self.draft.set("model", "path", host_path, why or None)
        if mapped:
            self.draft.comment("model", "path", f"host path of the container's {path} (docker volume): stackctl "
                                                "mounts it at the same path")

    def read_value_flag(self, i: int, name: str) -> int:
        section, key, convert = _VALUE_FLAGS[name]
        value, after = self.value_at(i)
        tokens = self.args[i:after]
        converted = _convert(value, convert) if value is not None else None
        cls = model.SECTION_TYPES[section]
        if converted is None or not _fits(cls, key, converted):
            self.extra += tokens
            if value is not None:
                self.draft.notes.append(f"{name} {value}: not a valid {section}.{key}; kept in serve.extra_args")
            return after
        self.draft.set(section, key, converted)
        return after

    def read_served_names(self, i: int) -> int:
        token = self.args[i]
        names = [token.split("=", 1)[1]] if "=" in token else []
        after = i + 1
        if not names:
            while after < len(self.args) and not self.args[after].startswith("-"):
                names.append(self.args[after])
                after += 1
        if names and _fits(model.Model, "served_name", names[0]):
            self.draft.set("model", "served_name", names[0])
            if len(names) > 1:
                self.draft.notes.append(f"--served-model-name aliases {', '.join(names[1:])} dropped: a recipe "
                                        "serves one name")
        else:
            self.extra += self.args[i:after]
        return after

    def read_dict_flag(self, i: int, name: str, store: list) -> int:
        value, after = self.value_at(i)
        tokens = self.args[i:after]
        dotted = name.split(".", 1)[1] if "." in name else ""
        if value is None:
            self.extra += tokens
            return after
        try:
            parsed = json.loads(value)
        except ValueError:
            parsed = value if dotted else _INVALID
        store.append((tokens, dotted, parsed))
        return after

    def read_optimization(self, i: int, token: str) -> int:
        """-O3 / -O 3 / --optimization-level 3 is vLLM's optimization level (no recipe field: kept verbatim);
        -O '{json}' and -O.key=value are the older spelling of --compilation-config."""
        if token.startswith("-O.") or (token == "-O" and i + 1 < len(self.args)
                                       and self.args[i + 1].lstrip().startswith("{")):
            return self.read_dict_flag(i, "-cc" + token[2:].split("=", 1)[0], self.compilation)
        attached = (token.startswith("-O") and token != "-O") or "=" in token
        after = min(i + 1 if attached else i + 2, len(self.args))
        self.extra += self.args[i:after]
        self.draft.comment("serve", "extra_args", "-O / --optimization-level is kept as given; it also sets the "
                                                  "default cudagraph_mode (O2/O3: FULL_AND_PIECEWISE)")
        return after

    def read_secret_flag(self, i: int, name: str) -> int:
        value, after = self.value_at(i)
        if value is None or value.startswith("-"):
            self.extra.append(self.args[i])
            return i + 1
        variable = _SECRET_FLAG_ENV.get(name)
        if variable:
            self.draft.values["serve"].setdefault("secret_env", {})[variable] = variable
            self.draft.notes.append(f"{name} carried a secret on the command line; not copied: vLLM reads "
                                    f"{variable} instead (serve.secret_env)")
        else:
            self.draft.notes.append(f"{name} carried a secret on the command line; not copied: pass it through "
                                    "serve.secret_env")
        return after

    def finish(self) -> None:
        self.finish_compilation()
        self.finish_kv_transfer()
        if self.tool_choice and self.tool_parser and _fits(model.Model, "tool_call_parser", self.tool_parser[1]):
            self.draft.set("model", "tool_call_parser", self.tool_parser[1])
        else:
            self.extra += self.tool_choice + (self.tool_parser[0] if self.tool_parser else [])
        extra = []
        for token in self.extra:
            token = _one_line(token)
            if token is None:
                self.draft.notes.append("a multi-line argument that is not JSON was dropped: add it to "
                                        "serve.extra_args by hand")
            else:
                extra.append(token)
        if extra:
            self.draft.set("serve", "extra_args", extra, "flags stackctl has no field for, kept as given")

    def finish_compilation(self) -> None:
        config = _merge_dict_flags(self.compilation)
        if config is None:
            for tokens, _, _ in self.compilation:
                self.extra += tokens
            return
        if not self.compilation:
            return
        if _has_control(config):
            for tokens, _, _ in self.compilation:
                self.extra += tokens
            return
        mode = config.pop("cudagraph_mode", None)
        if isinstance(mode, str) and mode.upper() in model.CUDAGRAPH_MODES:
            self.draft.set("serve", "cudagraph_mode", mode.upper())
        elif mode is not None:
            config["cudagraph_mode"] = mode
        dropped = _drop_nulls(config)
        if dropped:
            self.draft.notes.append(f"--compilation-config keys set to null (vLLM's default) were dropped: "
                                    f"{', '.join(dropped)}")
        if config:
            self.draft.set("serve", "compilation_config", config)

    def finish_kv_transfer(self) -> None:
        config = _merge_dict_flags(self.kv_transfer)
        tokens = [t for entry in self.kv_transfer for t in entry[0]]
        if config is None or config.get("kv_connector") != stackspec.KV_CONNECTOR["kv_connector"]:
            if config and "LMCache" in json.dumps(config):
                self.draft.notes.append("--kv-transfer-config names LMCache in a form stackctl does not manage; "
                                        "kept in serve.extra_args")
            self.extra += tokens
            return
        self.draft.set("cache", "enabled", True, "--kv-transfer-config with LMCacheConnectorV1")
        rest = dict(config)
        rest.pop("kv_connector")
        extra_config = rest.pop("kv_connector_extra_config", None) or {}
        other = {}
        if isinstance(extra_config, dict):
            for key, value in extra_config.items():
                if key.startswith("lmcache."):
                    self.lmcache_overrides[key[len("lmcache."):]] = value
                else:
                    other[key] = value
        if rest != {"kv_role": stackspec.KV_CONNECTOR["kv_role"]} or other or not isinstance(extra_config, dict):
            self.extra += tokens
            self.draft.notes.append("--kv-transfer-config has settings beyond stackctl's connector config; kept in "
                                    "serve.extra_args, where it overrides the one stackctl writes")


_INVALID = object()


def _merge_dict_flags(entries: list) -> dict | None:
    """Merge JSON / dotted forms of a config flag the way vLLM does; None when one is not a JSON object."""
    merged: dict = {}
    for _, dotted, value in entries:
        if value is _INVALID:
            return None
        if dotted:
            target = merged
            keys = dotted.split(".")
            for key in keys[:-1]:
                target = target.setdefault(key, {})
                if not isinstance(target, dict):
                    return None
            target[keys[-1]] = value
        elif isinstance(value, dict):
            merged.update(value)
        else:
            return None
    return merged


def _has_control(value) -> bool:
    if isinstance(value, str):
        return bool(_CONTROL.search(value))
    if isinstance(value, dict):
        return any(_has_control(k) or _has_control(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_control(item) for item in value)
    return False


def _drop_nulls(config: dict, prefix: str = "") -> list[str]:
    dropped = []
    for key in list(config):
        if config[key] is None:
            del config[key]
            dropped.append(prefix + key)
        elif isinstance(config[key], dict):
            dropped += _drop_nulls(config[key], f"{prefix}{key}.")
        elif isinstance(config[key], list) and any(item is None for item in config[key]):
            del config[key]
            dropped.append(prefix + key)
    return dropped


def _convert(value: str, convert):
    try:
        if convert == "human_int":
            return _human_int(value)
        if convert is float:
            return float(value)
        return convert(value)
    except ValueError:
        return None


def _human_int(value: str) -> int:
    """vLLM's human-readable integers: 32k = 32000, 32K = 32768."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgtKMGT])", value.strip())
    if not match:
        return int(value)
    number, suffix = match.groups()
    if suffix.islower():
        return int(float(number) * 1000 ** ("kmgt".index(suffix) + 1))
    return int(number) * 1024 ** ("KMGT".index(suffix) + 1)


def _one_line(token: str) -> str | None:
    """A token without control characters (the loader refuses them): multi-line JSON is compacted."""
    if not _CONTROL.search(token):
        return token
    try:
        return json.dumps(json.loads(token), separators=(",", ":"))
    except ValueError:
        return None


def _host_path(path: str, launch: Launch) -> tuple[str, bool]:
    """The host path behind a container path (docker -v): stackctl mounts host paths at the same place."""
    if not path.startswith("/"):
        return path, False
    for host, container in sorted(launch.volumes, key=lambda v: -len(v[1])):
        container = container.rstrip("/") or "/"
        if host.startswith("/") and (path == container or path.startswith(container.rstrip("/") + "/")):
            mapped = posixpath.normpath(host.rstrip("/") + path[len(container.rstrip("/")):]) if container != "/" \
                else posixpath.normpath(host + path)
            return mapped, mapped != path
    return path, False


# -- environment ----------------------------------------------------------------------------------------------

# LMCache reads LMCACHE_<KEY> variables over its YAML; these keys have recipe fields.
_LMCACHE_KEYS = ("chunk_size", "local_cpu", "max_local_cpu_size", "local_disk", "max_local_disk_size", "remote_url",
                 "remote_storage_plugins", "remote_serde", "save_decode_cache", "use_layerwise",
                 "enable_async_loading")


def _is_secret(key: str, value: str | None) -> bool:
    return bool(_SECRET_NAME.search(key) or key.startswith("AWS_") or (value and _URL_CREDENTIALS.search(value)))


def _import_env(draft: _Draft, launch: Launch, platform: str, engine: str) -> dict:
    """Split the server environment into recipe keys, serve.env and secret references; return LMCACHE_* overrides."""
    env, secrets, lmcache = {}, {}, {}
    for key, value in launch.env.items():
        if key == "LMCACHE_CONFIG_FILE":
            draft.notes.append(f"LMCACHE_CONFIG_FILE={value} dropped: stackctl writes lmcache.yaml from the recipe "
                               "(import that file with --lmcache-config)")
        elif key == "PYTHONHASHSEED" and re.fullmatch(r"\d+", value) and _fits(model.Cache, "hash_seed", int(value)):
            draft.set("cache", "hash_seed", int(value), "from PYTHONHASHSEED")
        elif key == "VLLM_SERVER_DEV_MODE" and value == "1":
            draft.set("serve", "dev_endpoints", True, "from VLLM_SERVER_DEV_MODE=1")
        elif key == "ATOM_DISABLE_VLLM_PLUGIN" and value == "1" and engine == "vllm" and platform == "rocm":
            pass  # stackctl sets it for every plain-vLLM stack on rocm
        elif key == "STACKCTL_NUMA_NODES" and re.fullmatch(r"\d+(,\d+)*", value):
            nodes = [int(n) for n in value.split(",")]
            draft.set("host", "numa", nodes[0] if len(nodes) == 1 else nodes)
        elif key == "AWS_SHARED_CREDENTIALS_FILE":
            lmcache["__credentials_file__"] = _host_path(value, launch)[0]
        elif key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            lmcache[f"__{key}__"] = key
            secrets[key] = key
        elif key.startswith("LMCACHE_") and key[8:].lower() in _LMCACHE_KEYS:
            lmcache[key[8:].lower()] = value
        elif _is_secret(key, value):
            secrets[key] = key
        elif _CONTROL.search(key + value) or not key:
            draft.notes.append(f"{key}: a value with control characters (newlines) was dropped; set it by hand")
        else:
            env[key] = value
    for key in launch.passthrough:
        secrets[key] = key
    if env:
        draft.set("serve", "env", env)
    if secrets:
        draft.values["serve"].setdefault("secret_env", {}).update(secrets)
    return lmcache


def _secret_comment(draft: _Draft) -> None:
    secrets = draft.get("serve", "secret_env")
    if secrets:
        draft.comment("serve", "secret_env", f"Values not copied: {', '.join(sorted(secrets))} (secrets, or passed "
                                             "through from the host). Export them where stackctl runs; they reach "
                                             "the container at run time only.")


def _note_unresolved(draft: _Draft) -> None:
    """Values that still hold a shell reference the script did not set (the user's environment had it)."""
    texts = [draft.get("model", "path") or ""] + list(draft.get("serve", "env", {}).values()) \
        + list(draft.get("serve", "extra_args", []))
    found = sorted({m.group(0) for text in texts for m in re.finditer(r"\$(\{[^}]*\}|[A-Za-z_][A-Za-z0-9_]*|\()",
                                                                      text)})
    if found:
        draft.notes.append(f"unresolved shell references kept as written: {' '.join(found)} (replace them with "
                           "their values)")


def _import_host(draft: _Draft, launch: Launch) -> None:
    if launch.numa and "numa" not in draft.values["host"]:
        nodes = _expand_cpulist(launch.numa)
        if nodes:
            draft.set("host", "numa", nodes[0] if len(nodes) == 1 else nodes, "from numactl / --cpuset-mems")
    if launch.cpus:
        if re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", launch.cpus):
            draft.set("host", "isolcpus", launch.cpus, "the CPUs the old launch was pinned to")
        else:
            draft.notes.append(f"CPU pinning {launch.cpus!r} not imported: set host.isolcpus")
    if launch.shm_size and _fits(model.Host, "shm_size", launch.shm_size):
        draft.set("host", "shm_size", launch.shm_size)
    if launch.kind and draft.get("serve", "host") is None:
        draft.set("serve", "host", "0.0.0.0", "vLLM binds all interfaces without --host; stackctl's default is "
                                              "127.0.0.1")


def _expand_cpulist(text: str) -> list[int]:
    nodes: list[int] = []
    for part in text.split(","):
        if re.fullmatch(r"\d+", part):
            nodes.append(int(part))
        elif re.fullmatch(r"\d+-\d+", part):
            low, high = map(int, part.split("-"))
            nodes += list(range(low, high + 1))
        else:
            return []
    return sorted(set(nodes))


# -- LMCache config -------------------------------------------------------------------------------------------

def read_lmcache_yaml(text: str, source: str = "LMCache config") -> dict:
    """An LMCache config file as a dict: PyYAML when installed, else a reader for the flat `key: value` form."""
    try:
        import yaml
    except ImportError:
        return read_flat_yaml(text, source)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise StackctlError(f"{source}: not valid YAML: {_clean(str(exc))}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise StackctlError(f"{source}: must be a mapping of LMCache keys")
    return data


def read_flat_yaml(text: str, source: str = "LMCache config") -> dict:
    """The flat YAML stackctl writes (and most hand-written LMCache configs): `key: value` lines, values as JSON or
    plain YAML scalars, comments. Anything nested needs PyYAML."""
    if text.lstrip().startswith("{"):
        try:
            return dict(json.loads(text))
        except ValueError as exc:
            raise StackctlError(f"{source}: not valid JSON: {exc}") from None
    data = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped in ("---", "..."):
            continue
        match = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_.-]*)\s*:(?:\s+(.*))?", line.rstrip())
        if line[:1] in (" ", "\t") or not match:
            raise StackctlError(f"{source}:{number}: only flat `key: value` lines can be read without PyYAML "
                                "(fix: pip install pyyaml)")
        data[match.group(1)] = _yaml_scalar(match.group(2) or "", f"{source}:{number}")
    return data


def _yaml_scalar(text: str, where: str):
    text = text.strip()
    if text[:1] in ('"', "{", "["):
        try:
            value, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            raise StackctlError(f"{where}: cannot read {text!r} without PyYAML (fix: pip install pyyaml)") from None
        if text[end:].strip() and not text[end:].strip().startswith("#"):
            raise StackctlError(f"{where}: unexpected text after the value")
        return value
    if text[:1] == "'":
        end = re.match(r"'((?:[^']|'')*)'", text)
        if not end:
            raise StackctlError(f"{where}: unterminated quote")
        return end.group(1).replace("''", "'")
    text = re.split(r"\s+#", text, maxsplit=1)[0].strip()
    # Plain scalars resolve as in YAML 1.1 (PyYAML's safe_load, which LMCache uses): `1e5` is a string there.
    for words, value in _YAML_WORDS:
        if text in words:
            return value
    if re.fullmatch(r"[-+]?(0|[1-9][0-9]*)", text):
        return int(text)
    if re.fullmatch(r"[-+]?([0-9]+\.[0-9]*|\.[0-9]+)([eE][-+][0-9]+)?", text):
        return float(text)
    if re.fullmatch(r"[-+]?[0-9][0-9_:xXoObB.]*|[-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN)", text) and \
            not re.search(r"[eE]", text) or text[:1] in "&*!|>%@`" or ": " in text:
        raise StackctlError(f"{where}: cannot read {text!r} without PyYAML (fix: pip install pyyaml)")
    return text


_YAML_WORDS = ((("true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"), True),
               (("false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"), False),
               (("", "~", "null", "Null", "NULL"), None))


def _to_bool(value) -> bool:
    """LMCache's reading of a boolean: true only for true / 1."""
    return value if isinstance(value, bool) else str(value).strip().lower() in ("true", "1")


def _to_number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _total_size(per_rank: float, tp: int) -> float:
    """Recipe size (all ranks) from LMCache's per-rank size; undo stackctl's rounding to 3 decimals."""
    total = per_rank * tp
    nearest = round(total)
    return float(nearest) if nearest and abs(total - nearest) <= 0.0005 * tp else round(total, 3)


def _import_cache(draft: _Draft, launch: Launch, yaml_config: dict | None, env_config: dict, overrides: dict,
                  yaml_given: bool) -> None:
    """LMCache settings: the YAML, then LMCACHE_* variables, then kv_connector_extra_config (LMCache's order)."""
    config = dict(yaml_config or {})
    env_config = dict(env_config)
    credentials_file = env_config.pop("__credentials_file__", None)
    key_env = {name: env_config.pop(f"__{name}__", None) for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    config.update(env_config)
    config.update(overrides)
    enabled = bool(draft.get("cache", "enabled"))
    if not enabled and not config:
        return
    if not enabled:
        draft.notes.append("LMCache settings found but the server has no LMCacheConnectorV1 --kv-transfer-config: "
                           "imported with cache.enabled = false")
        draft.set("cache", "enabled", False)
    tp = draft.get("model", "tensor_parallel", 1)
    extra: dict = {}
    if "chunk_size" in config:
        chunk = config.pop("chunk_size")
        if isinstance(chunk, str) and chunk.strip().isdigit():
            chunk = int(chunk)
        if isinstance(chunk, int) and not isinstance(chunk, bool) and _fits(model.Cache, "chunk_size", chunk):
            draft.set("cache", "chunk_size", chunk)
        else:
            extra["chunk_size"] = chunk
    _cpu_tier(draft, config, tp, extra)
    _disk_tier(draft, launch, config, tp, extra)
    _remote_tier(draft, launch, config, extra, credentials_file, key_env)
    for key, field in (("save_decode_cache", "save_decode_cache"), ("use_layerwise", "use_layerwise"),
                       ("enable_async_loading", "async_loading")):
        if key in config:
            value = _to_bool(config.pop(key))
            if value:
                draft.set("cache", field, True)
    for key, value in config.items():
        if value is not None:
            extra[key] = value
    secret_keys = _strip_secrets(extra)
    if secret_keys:
        draft.notes.append(f"LMCache credentials in {', '.join(secret_keys)} were NOT copied: export them on the "
                           "host and name the variables in the s3 tier's access_key_env / secret_key_env")
    dropped = _drop_nulls(extra)
    if dropped:
        draft.notes.append(f"LMCache keys with null values dropped: {', '.join(dropped)}")
    if extra:
        draft.set("cache", "extra", extra, "LMCache keys without a recipe field, written to lmcache.yaml as given")
    if not yaml_given and enabled and not env_config and not overrides:
        draft.comment("cache", "", "No LMCache config was given (--lmcache-config): LMCache's defaults are imported "
                                   "(CPU tier of 5 GiB per rank, chunk 256).")


def _cpu_tier(draft: _Draft, config: dict, tp: int, extra: dict) -> None:
    local_cpu = _to_bool(config.pop("local_cpu", True))
    size = config.pop("max_local_cpu_size", None)
    defaulted = size is None
    size = 5.0 if size is None else _to_number(size)
    if not local_cpu:
        return
    if size is None or size <= 0:
        extra["max_local_cpu_size"] = size
        draft.notes.append("LMCache local_cpu with no usable max_local_cpu_size: no CPU tier imported")
        return
    total = _total_size(size, tp)
    note = f"LMCache max_local_cpu_size {size:g} GiB per rank x tensor_parallel {tp}"
    draft.tiers.append(({"kind": "cpu", "size_gb": total}, [note + (" (LMCache's default)" if defaulted else "")]))


def _disk_tier(draft: _Draft, launch: Launch, config: dict, tp: int, extra: dict) -> None:
    disk = config.pop("local_disk", None)
    size = config.pop("max_local_disk_size", None)
    if not disk:
        if size is not None:
            extra["max_local_disk_size"] = size
        return
    path = str(disk)
    path = path[len("file://"):] if path.startswith("file://") else path
    path = path.rstrip("/") or "/"
    number = _to_number(size) if size is not None else 0.0
    if not path.startswith("/") or not number or number <= 0:
        extra["local_disk"], extra["max_local_disk_size"] = disk, size
        if path.startswith("/"):
            draft.notes.append("LMCache local_disk with max_local_disk_size 0: LMCache never used that disk; kept in "
                               "cache.extra")
        return
    host_path, mapped = _host_path(path, launch)
    notes = [f"LMCache max_local_disk_size {number:g} GiB per rank x tensor_parallel {tp}"]
    if mapped:
        notes.append(f"host path of the container's {path} (docker volume)")
    draft.tiers.append(({"kind": "disk", "path": host_path, "size_gb": _total_size(number, tp)}, notes))


def _remote_tier(draft: _Draft, launch: Launch, config: dict, extra: dict, credentials_file, key_env: dict) -> None:
    remote = config.pop("remote_url", None)
    extra_config = config.pop("extra_config", None)
    extra_config = dict(extra_config) if isinstance(extra_config, dict) else extra_config
    plugins = config.get("remote_storage_plugins")
    if remote is None and plugins == ["fs"] and isinstance(extra_config, dict) \
            and "remote_storage_plugin.fs.base_path" in extra_config:
        # The plugin form of an fs tier (what stackctl writes): the same as the legacy fs:// URL.
        config.pop("remote_storage_plugins")
        remote = "fs://" + str(extra_config.pop("remote_storage_plugin.fs.base_path"))
    tier = None
    if isinstance(remote, str) and remote.startswith("s3://") and isinstance(extra_config, (dict, type(None))):
        extra_config = extra_config or {}
        tier = {"kind": "s3", "url": remote}
        notes = []
        region = extra_config.pop("s3_region", None)
        if region is None:
            region = "us-east-1"
            notes.append("TODO: LMCache's S3 connector requires s3_region and the old config had none; set the "
                         "bucket's region")
        tier["region"] = str(region)
        if _to_bool(extra_config.pop("disable_tls", False)):
            tier["disable_tls"] = True
        if key_env["AWS_ACCESS_KEY_ID"] and key_env["AWS_SECRET_ACCESS_KEY"]:
            tier["access_key_env"], tier["secret_key_env"] = "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"
            notes.append("credentials: the host's AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY at run time (values not "
                         "copied)")
            draft.values["serve"].get("secret_env", {}).pop("AWS_ACCESS_KEY_ID", None)
            draft.values["serve"].get("secret_env", {}).pop("AWS_SECRET_ACCESS_KEY", None)
            if not draft.values["serve"].get("secret_env", True):
                del draft.values["serve"]["secret_env"]
        if credentials_file:
            tier["credentials_file"] = credentials_file
        if not all(_fits(model.Tier, key, value) for key, value in tier.items()):
            tier = None
        else:
            draft.tiers.append((tier, notes))
    elif isinstance(remote, str) and remote.startswith("fs://"):
        from urllib.parse import urlparse

        path = urlparse(remote).path.rstrip("/") or "/"
        if path.startswith("/") and _fits(model.Tier, "path", path):
            host_path, mapped = _host_path(path, launch)
            tier = {"kind": "fs", "path": host_path}
            draft.tiers.append((tier, [f"host path of the container's {path}"] if mapped else []))
    if tier is not None:
        if config.get("remote_serde") == "naive":
            config.pop("remote_serde")  # stackctl writes it for every remote tier
    elif remote is not None:
        extra["remote_url"] = remote
    if extra_config:
        extra["extra_config"] = extra_config
    if credentials_file and (tier is None or tier["kind"] != "s3"):
        draft.notes.append("AWS_SHARED_CREDENTIALS_FILE is set but there is no S3 tier; not imported")


def _strip_secrets(extra: dict, prefix: str = "") -> list[str]:
    """Remove credential-looking keys (e.g. extra_config.aws_secret_access_key); return their names."""
    removed = []
    for key in list(extra):
        value = extra[key]
        if _SECRET_CONFIG_KEY.search(key) or key.lower().startswith("aws_") or \
                isinstance(value, str) and _URL_CREDENTIALS.search(value):
            del extra[key]
            removed.append(prefix + key)
        elif isinstance(value, dict):
            removed += _strip_secrets(value, f"{prefix}{key}.")
    return removed


# -- TOML output ----------------------------------------------------------------------------------------------
# A small emitter for the values a recipe holds (no dependency): strings, integers, floats, booleans, arrays and
# inline tables. Tests check that tomllib reads back the same values.

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {"\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r", '"': '\\"', "\\": "\\\\"}


def toml_key(key: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"TOML keys are strings, not {type(key).__name__}")
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_string(text: str) -> str:
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04x}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError("a lone surrogate cannot be written as TOML")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def toml_value(value) -> str:
    """One value in TOML syntax (maps as inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if not -2 ** 63 <= value < 2 ** 63:
            raise ValueError(f"{value} does not fit a TOML integer")
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")
