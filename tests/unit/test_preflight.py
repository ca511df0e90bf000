"""`up`'s checks before it changes anything, on this machine: a port held by a real listening socket is refused
naming the process that holds it; a tier path that cannot take a file is refused at its recipe line."""

from __future__ import annotations

import os
import socket

import pytest
from helpers import RECIPES

from stackctl.httpclient import client_host
from stackctl.lifecycle import preflight
from stackctl.errors import StackctlError
from stackctl.recipe import load_recipe


@pytest.mark.parametrize("bind, client", [("0.0.0.0", "127.0.0.1"), ("", "127.0.0.1"), ("::", "::1"),
                                          ("[::]", "::1"), ("10.1.2.3", "10.1.2.3")])
def test_a_wildcard_bind_is_reached_on_loopback(bind, client):
    assert client_host(bind) == client


def test_a_free_port_passes_and_a_held_one_names_its_holder():
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.listen()
        with pytest.raises(StackctlError) as error:
            preflight.ensure_port_free("127.0.0.1", port, "cpu-smoke")
        message = str(error.value)
        assert message.startswith(f"cpu-smoke: port {port} on 127.0.0.1 is already in use by pid {os.getpid()} (")
        assert message.endswith("(fix: stop that process, or set serve.port to a free port)")
        assert preflight.port_holder(port).startswith(f"pid {os.getpid()} (")
    assert preflight.ensure_port_free("127.0.0.1", port, "cpu-smoke") is None  # released: free again


def test_a_listener_this_process_cannot_see_is_said_so(tmp_path):
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp").write_text("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when "
                                          "retrnsmt   uid  timeout inode\n")
    assert preflight.port_holder(8000, tmp_path) == (
        "another process (not visible here: another network namespace or user)")


def nvme_recipe(path):
    recipe = load_recipe(RECIPES / "atom-lmcache-cpu-nvme.toml")
    recipe.tiers_of("disk")[0].path = str(path)
    return recipe


def test_tier_paths_are_created_and_probed(tmp_path):
    path = tmp_path / "kv" / "lmcache"
    assert preflight.ensure_tier_paths_writable(nvme_recipe(path)) is None
    assert path.is_dir() and list(path.iterdir()) == []  # the probe file is removed


def test_a_tier_path_under_a_file_is_refused_at_its_line(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    recipe = nvme_recipe(blocker / "lmcache")
    with pytest.raises(StackctlError) as error:
        preflight.ensure_tier_paths_writable(recipe)
    line = next(n for n, text in enumerate((RECIPES / "atom-lmcache-cpu-nvme.toml").read_text().splitlines(), 1)
                if text.startswith('path = "/mnt/nvme'))
    assert str(error.value).startswith(f"{recipe.source}:{line}:")
    assert f"cache.tiers[1].path: {blocker / 'lmcache'} is not writable (Not a directory)" in str(error.value)


def tiers_recipe(**s3_fields):
    recipe = load_recipe(RECIPES / "cpu-tiers.toml")
    for key, value in s3_fields.items():
        setattr(recipe.tiers_of("s3")[0], key, value)
    return recipe


def test_the_s3_tiers_ca_and_credentials_files_must_be_readable_files(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    assert preflight.ensure_tier_files_readable(tiers_recipe(ca_file=str(ca))) is None
    line = next(n for n, text in enumerate((RECIPES / "cpu-tiers.toml").read_text().splitlines(), 1)
                if text.startswith("ca_file"))
    for path, problem in [(tmp_path / "missing.pem", "does not exist"), (tmp_path, "is not a file")]:
        recipe = tiers_recipe(ca_file=str(path))
        with pytest.raises(StackctlError) as error:
            preflight.ensure_tier_files_readable(recipe)
        assert str(error.value) == (f"{recipe.source}:{line}:1: cache.tiers[3].ca_file: {path} {problem} (fix: "
                                    "point it at a readable file on this host)")
    recipe = tiers_recipe(credentials_file=str(tmp_path / "nothing"), ca_file=str(ca))
    with pytest.raises(StackctlError, match=r"cache\.tiers\[3\]\.credentials_file: .*nothing does not exist"):
        preflight.ensure_tier_files_readable(recipe)
