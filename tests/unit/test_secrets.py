"""Secrets never reach a recipe, a bundle, stdout or a message: one detector (stackctl.secrets) for import,
validate and render, tried with realistic canary values in every place a value can hide, through the real CLI."""

from __future__ import annotations

import json
import os

import pytest
from helpers import run_cli

from stackctl import secrets

AWS_KEY_ID = "AKIAQ3EXAMPLECANARY1"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYCANARYKEY1"
HF = "hf_CanaryHuggingFaceToken0123456789abcd"
GITHUB = "ghp_Canary0123456789abcdefghijklmnopqrstu"
OPENAI = "sk-proj-Canary0123456789abcdefghijKLMN"
SLACK = "xoxb-1234567890-Canary0123456789"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJjYW5hcnkifQ.Canary0123456789abcdefSig"
PEM = "-----BEGIN RSA PRIVATE KEY-----MIICanary0123456789-----END RSA PRIVATE KEY-----"
URL_PASSWORD = "Canary-Pw-271828"
PLAIN = "Canary-Plain-Secret-42"  # no shape: found by its key name only
CANARIES = [AWS_KEY_ID, AWS_SECRET, HF, GITHUB, OPENAI, SLACK, JWT, "MIICanary0123456789", URL_PASSWORD, PLAIN]

BASE = """[stack]
name = "leak"
platform = "cpu"

[model]
path = "{model}"

[serve]
{serve}

[cache]
{cache}

[build]
{build}
"""


def recipe_text(model="/models/m", serve="", cache="", build="", tiers=""):
    return BASE.format(model=model, serve=serve, cache=cache, build=build) + tiers


# Every place a value can hide in a recipe, with a canary in it.
PLACES = {
    "cache.extra nested key name": dict(cache=f'extra = {{ extra_config = {{ deep = {{ s3_secret_key = "{PLAIN}" }} }} }}'),
    "cache.extra key name any case": dict(cache=f'extra = {{ Remote_Auth_Token = "{PLAIN}" }}'),
    "cache.extra value shape": dict(cache=f'extra = {{ note = "{HF}" }}'),
    "cache.extra list": dict(cache=f'extra = {{ headers = ["x", "{JWT}"] }}'),
    "serve.env value shape": dict(serve=f'env = {{ MY_SETTING = "{GITHUB}" }}'),
    "serve.env aws pair": dict(serve=f'env = {{ KEY_ONE = "{AWS_KEY_ID}", KEY_TWO = "{AWS_SECRET}" }}'),
    "serve.extra_args --api-key VALUE": dict(serve=f'extra_args = ["--api-key", "{PLAIN}"]'),
    "serve.extra_args --api-key=VALUE": dict(serve=f'extra_args = ["--api-key={PLAIN}"]'),
    "serve.extra_args shape": dict(serve=f'extra_args = ["--some-header", "{SLACK}"]'),
    "serve.compilation_config": dict(serve=f'compilation_config = {{ inductor = {{ api_token = "{PLAIN}" }} }}'),
    "serve.compilation_config shape": dict(serve=f'compilation_config = {{ note = "{OPENAI}" }}'),
    "model.path URL with password": dict(model=f"https://bob:{URL_PASSWORD}@models.example/m"),
    "model.path PEM": dict(model=PEM),
    "tier url with keys": dict(cache="enabled = false",
                               tiers=f'\n[[cache.tiers]]\nkind = "s3"\nurl = "s3://{AWS_KEY_ID}:{URL_PASSWORD}@rgw:7480"\n'
                                     'region = "us-east-1"\n'),
    "build.pip_index": dict(build=f'pip_index = "https://ci:{URL_PASSWORD}@pypi.example/simple"'),
    "serve.secret_env value (a key pasted as a name)": dict(serve=f'secret_env = {{ AWS_ACCESS_KEY_ID = "{AWS_KEY_ID}" }}'),
    "tier access_key_env": dict(cache="enabled = false",
                                tiers=f'\n[[cache.tiers]]\nkind = "s3"\nurl = "s3://rgw:7480"\nregion = "us-east-1"\n'
                                      f'access_key_env = "{AWS_KEY_ID}"\nsecret_key_env = "S3_SECRET"\n'),
    "tier url that the loader refuses": dict(cache="enabled = false",
                                             tiers=f'\n[[cache.tiers]]\nkind = "s3"\nurl = "s3://{AWS_KEY_ID}:'
                                                   f'{URL_PASSWORD}@rgw:7480/bucket"\nregion = "us-east-1"\n'),
    "model.served_name": dict(model=f'/models/m"\nserved_name = "{OPENAI}'),
}


def assert_no_canary(*texts):
    for text in texts:
        for canary in CANARIES:
            assert canary not in text, canary


@pytest.mark.parametrize("place", sorted(PLACES))
def test_validate_and_render_refuse_and_never_echo(place, tmp_path):
    path = tmp_path / "leak.toml"
    path.write_text(recipe_text(**PLACES[place]))
    result = run_cli("validate", str(path))
    assert result.returncode == 1, result.stdout + result.stderr
    assert_no_canary(result.stdout, result.stderr)
    as_json = run_cli("validate", "--format", "json", str(path))
    assert_no_canary(as_json.stdout, as_json.stderr)
    findings = json.loads(as_json.stdout)[0]["findings"]
    if "loader refuses" not in place:  # there the value is refused for its form, and its message is masked
        assert "secret" in (result.stdout + result.stderr)
        assert any(f["rule_id"] == "secret-in-recipe" or "secret" in f["message"] for f in findings)
    # render refuses even when the rule is skipped (and even with --ignore-errors where it exists)
    out = tmp_path / "bundle"
    skipped = tmp_path / "skipped.toml"
    skipped.write_text(path.read_text() + '\n[checks]\nskip = ["secret-in-recipe"]\n')
    for recipe in (path, skipped):
        rendered = run_cli("render", str(recipe), "-o", str(out))
        assert rendered.returncode == 1, rendered.stdout + rendered.stderr
        assert_no_canary(rendered.stdout, rendered.stderr)
        assert not out.exists()


def test_detector_names_and_shapes():
    for name in ("secret", "secret_key", "s3_secret_key", "S3_SECRET_KEY", "access_key", "Password", "token",
                 "api_key", "apiKey", "HF_TOKEN", "aws_secret_access_key", "private_key"):
        assert secrets.is_secret_name(name), name
    for name in ("max_tokens", "min_retrieve_tokens", "secret_key_env", "credentials_file", "tokenizer",
                 "chunk_size", "hit_test_tokens", "access_key_env"):
        assert not secrets.is_secret_name(name), name
    for value in (AWS_KEY_ID, HF, GITHUB, OPENAI, SLACK, JWT, PEM, f"https://u:{URL_PASSWORD}@h/x"):
        assert secrets.secret_shape(value), value
    assert secrets.secret_shape(AWS_SECRET, context=AWS_KEY_ID)
    # a git commit id and ordinary values are not secrets
    for value in ("0123456789abcdef0123456789abcdef01234567", "/models/m", "s3://kv.example:7480", "FULL"):
        assert secrets.secret_shape(value, context=AWS_KEY_ID) is None, value
    assert secrets.mask(AWS_KEY_ID) == "AKIA*** (20 characters)"
    assert_no_canary(secrets.redact(f"a {AWS_KEY_ID} b {AWS_SECRET} c {PLAIN}", known=[PLAIN]))


# -- import: every secret becomes a reference, the value goes nowhere ----------------------------------------

LAUNCH = f"""#!/bin/bash
export HF_TOKEN={HF}
export MY_GH={GITHUB}
export AWS_ACCESS_KEY_ID={AWS_KEY_ID}
export AWS_SECRET_ACCESS_KEY={AWS_SECRET}
export PYTHONHASHSEED=0
vllm serve /models/m --api-key {PLAIN} --hf-token={HF} --some-header {SLACK} \\
  --compilation-config '{{"cudagraph_mode": "FULL_AND_PIECEWISE", "note": "{OPENAI}"}}' \\
  --kv-transfer-config '{{"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}}'
"""
LMCACHE_YAML = f"""chunk_size: 256
local_cpu: true
max_local_cpu_size: 5
remote_url: "s3://kv.rgw.example:7480"
remote_serde: naive
extra_config:
  s3_region: us-east-1
  aws_access_key_id: {AWS_KEY_ID}
  aws_secret_access_key: {AWS_SECRET}
  nested:
    auth_token: {PLAIN}
  header: "{JWT}"
"""


def test_import_turns_every_secret_into_a_reference(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text(LAUNCH)
    config = tmp_path / "lmcache.yaml"
    config.write_text(LMCACHE_YAML)
    out = tmp_path / "imported.toml"
    result = run_cli("init", "--from-command", str(script), "--lmcache-config", str(config), "--name", "imp",
                     "-o", str(out))
    assert result.returncode == 0, result.stderr
    text = out.read_text()
    assert_no_canary(text, result.stdout, result.stderr)
    # references, with notes naming what to export
    assert 'HF_TOKEN = "HF_TOKEN"' in text and 'MY_GH = "MY_GH"' in text and "VLLM_API_KEY" in text
    assert 'access_key_env = "AWS_ACCESS_KEY_ID"' in text and 'secret_key_env = "AWS_SECRET_ACCESS_KEY"' in text
    assert "export" in text
    # the imported recipe validates without a secret finding, and its bundle holds none
    validated = run_cli("validate", "--format", "json", str(out))
    assert_no_canary(validated.stdout, validated.stderr)
    assert "secret-in-recipe" not in validated.stdout
    bundle = tmp_path / "bundle"
    rendered = run_cli("render", str(out), "-o", str(bundle), "--ignore-errors")
    assert rendered.returncode == 0, rendered.stderr
    assert_no_canary(rendered.stdout, rendered.stderr,
                     *(p.read_text(errors="replace") for p in bundle.rglob("*") if p.is_file()))
    # to stdout too
    printed = run_cli("init", "--from-command", str(script), "--lmcache-config", str(config))
    assert printed.returncode == 0 and "[model]" in printed.stdout
    assert_no_canary(printed.stdout, printed.stderr)


@pytest.mark.parametrize("line", [
    f"vllm serve https://bob:{URL_PASSWORD}@models.example/m",
    f"LMCACHE_REMOTE_URL=s3://{AWS_KEY_ID}:{URL_PASSWORD}@rgw.example:7480 vllm serve /m --kv-transfer-config "
    """'{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'""",
    f"MY_SETTING={JWT} vllm serve /m",
    f"vllm serve /m --api-key={PLAIN}",
    f"vllm serve /m --port {OPENAI}",
])
def test_import_single_places(line, tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text(line + "\n")
    result = run_cli("init", "--from-command", str(script), "--name", "one")
    assert result.returncode == 0, result.stderr
    assert_no_canary(result.stdout, result.stderr)
    recipe = tmp_path / "r.toml"
    recipe.write_text(result.stdout)
    validated = run_cli("validate", str(recipe))
    assert "secret-in-recipe" not in validated.stdout + validated.stderr
    assert_no_canary(validated.stdout, validated.stderr)


def test_import_error_messages_are_masked(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text(f"aws_secret_access_key: [{AWS_SECRET}\n")  # a YAML error quoting the line
    script = tmp_path / "launch.sh"
    script.write_text(f"export X={AWS_KEY_ID}\nvllm serve /m\n")
    result = run_cli("init", "--from-command", str(script), "--lmcache-config", str(config))
    assert result.returncode == 1
    assert_no_canary(result.stdout, result.stderr)


def test_import_notes_say_how_each_lmcache_secret_can_reach_lmcache(tmp_path):
    script = tmp_path / "launch.sh"
    script.write_text("vllm serve /m --kv-transfer-config '{\"kv_connector\":\"LMCacheConnectorV1\","
                      "\"kv_role\":\"kv_both\"}'\n")
    config = tmp_path / "lmcache.yaml"
    config.write_text(f"chunk_size: 256\nremote_url: s3://kv.example:7480\nauth_token: {PLAIN}\nextra_config:\n"
                      f"  s3_region: us-east-1\n  aws_secret_access_key: {AWS_SECRET}\n  nested:\n"
                      f"    password: {PLAIN}\n")
    result = run_cli("init", "--from-command", str(script), "--lmcache-config", str(config))
    assert result.returncode == 0, result.stderr
    assert_no_canary(result.stdout, result.stderr)
    text = " ".join(line.lstrip("#- ").strip() for line in result.stdout.splitlines())
    assert "the S3 tier reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY from the host" in text
    assert "LMCache reads them from LMCACHE_AUTH_TOKEN (serve.secret_env)" in text
    assert 'LMCACHE_AUTH_TOKEN = "LMCACHE_AUTH_TOKEN"' in result.stdout
    assert "extra_config.nested.password were NOT copied, and LMCache reads extra_config keys from its config" in text


def test_a_rollout_killed_outright_leaves_its_registry_login_for_the_next_rollout_to_remove(tmp_path, monkeypatch):
    """The hosts' registry login (the password) lives in a private folder while a rollout runs; a rollout killed
    with SIGKILL cannot remove it, so the next one removes every such folder whose process is gone, and none whose
    process still runs."""
    import subprocess
    import sys
    import tempfile

    from stackctl.fleet import images

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    folders = {name: tmp_path / f"stackctl-registry-{name}" for name in
               (f"{gone.stdout.strip()}-a1b2c3", f"{os.getppid()}-d4e5f6", "gksq2ydh")}  # dead, alive, older format
    for folder in folders.values():
        folder.mkdir()
        (folder / "login.json").write_text('{"password": "canary"}')
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    login = images.hand_credentials_to_hosts({"username": "fleet", "password": "canary"})
    try:
        assert login is not None and login.parent.name.startswith(f"stackctl-registry-{os.getpid()}-")
        left = {path.name for path in tmp_path.glob("stackctl-registry-*")}
        assert left == {login.parent.name, folders[f"{os.getppid()}-d4e5f6"].name}, left
    finally:
        images.forget_credentials(login)
    assert [path.name for path in tmp_path.glob("stackctl-registry-*")] == [f"stackctl-registry-{os.getppid()}-d4e5f6"]
