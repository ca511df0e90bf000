"""Host paths in a recipe (model, tiers, wheelhouse, CA bundle, credentials file) are absolute, plain and never a
system directory: one line at the key's file:line, through the real CLI."""

from __future__ import annotations

import pytest
from helpers import run_cli

from stackctl.recipe.safety import host_path_problem

RECIPE = """[stack]
name = "paths"
platform = "cpu"

[model]
path = "{model}"

[cache]
enabled = false

[[cache.tiers]]
kind = "{kind}"
path = "{tier}"
{size}
[build]
wheelhouse = "{wheelhouse}"
ca_bundle = "{ca}"
"""
GOOD = dict(model="/data/models/m", kind="disk", tier="/nvme/kv", size="size_gb = 10", wheelhouse="/srv/wheels",
            ca="/etc/ssl/certs/ca-certificates.crt")


@pytest.mark.parametrize("key,value,line,problem", [
    ("model", "./models/m", 6, "not an absolute path"),
    ("model", "~/models/m", 6, "not an absolute path"),
    ("model", "/data/../etc/m", 6, "climbs with `..`"),
    ("model", "/data/m:rw", 6, "holds a `:`"),
    ("model", "/", 6, "root directory"),
    ("model", "/etc", 6, "is a system directory"),
    ("model", "/proc/1/root", 6, "inside /proc"),
    ("tier", "/", 13, "root directory"),
    ("tier", "/var/lib/docker/kv", 13, "inside /var/lib/docker"),
    ("tier", "/usr/local/kv", 13, "inside /usr"),
    ("tier", "/boot", 13, "is a system directory"),
    ("tier", "relative/kv", 13, "not an absolute path"),
    ("wheelhouse", "/dev/shm/wheels", 16, "inside /dev"),
    ("wheelhouse", "wheels", 16, "not an absolute path"),
    ("ca", "/sys/ca.crt", 17, "inside /sys"),
    ("ca", "../ca.crt", 17, "not an absolute path"),
])
def test_unsafe_host_path_is_one_line_at_its_key(key, value, line, problem, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(**dict(GOOD, **{key: value})))
    result = run_cli("validate", str(recipe))
    assert result.returncode == 1
    hits = [x for x in result.stdout.splitlines() if "host-path-unsafe" in x]
    assert len(hits) == 1 and hits[0].startswith(f"{recipe}:{line}:") and problem in hits[0], result.stdout


def test_fs_tier_and_good_paths(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(**dict(GOOD, kind="fs", tier="/etc/kv", size="")))
    assert "inside /etc" in run_cli("validate", str(recipe)).stdout
    recipe.write_text(RECIPE.format(**GOOD))
    assert "host-path-unsafe" not in run_cli("validate", str(recipe)).stdout
    # a Hugging Face id is no host path
    recipe.write_text(RECIPE.format(**dict(GOOD, model="Qwen/Qwen3-0.6B")))
    assert "host-path-unsafe" not in run_cli("validate", str(recipe)).stdout


def test_read_only_inputs_may_live_under_etc_but_tiers_may_not():
    assert host_path_problem("/etc/ssl/certs/ca.crt", writable=False) is None
    assert "inside /etc" in host_path_problem("/etc/ssl/kv", writable=True)
    assert host_path_problem("/usr/share/models/m", writable=False) is None


def test_render_never_mounts_a_system_directory_even_when_told_to_ignore_errors(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(**dict(GOOD, tier="/usr/local/kv")))
    result = run_cli("render", str(recipe), "-o", str(tmp_path / "bundle"), "--ignore-errors")
    assert result.returncode == 1 and "it is never mounted" in result.stderr and "inside /usr" in result.stderr
    assert not (tmp_path / "bundle").exists()
