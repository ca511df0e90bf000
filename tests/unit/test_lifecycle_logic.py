"""The lifecycle's pure parts: the container arguments `up` passes to the engine (ROCm devices and groups, secrets from
the host's variables, never printed), the early refusal on a host without the GPUs (captured sysfs hosts), and the
server address `status` reads back from the rendered serve.sh. `up`/`down`/`status` against the engine are in
tests/integration."""

from __future__ import annotations

import json

import pytest
from fake_engine import FakeEngine
from helpers import FIXTURES, RECIPES

from stackctl import layout
from stackctl.engine import container, health
from stackctl.lifecycle import build, plan
from stackctl.bundle import render, stackspec
from stackctl.errors import StackctlError
from stackctl.host import discover
from stackctl.recipe import load_recipe
from stackctl.bundle.stackspec import StackSpec

SYSFS = FIXTURES / "sysfs"
MI300X = discover(SYSFS / "mi300x-8gpu-2node")
CPU_ONLY = discover(SYSFS / "cpu-only-1node")
S3_KEYS = {"LMCACHE_S3_ACCESS_KEY_ID": "AKIAEXAMPLEEXAMPLE12", "LMCACHE_S3_SECRET_ACCESS_KEY": "s3cr3t/value+x"}


def s3_recipe():
    return load_recipe(RECIPES / "vllm-lmcache-s3.toml")  # rocm; S3 keys read from two host variables


def test_rocm_container_gets_the_gpu_devices_and_the_hosts_group_ids(tmp_path):
    recipe = s3_recipe()
    kwargs = container.container_kwargs(StackSpec(recipe), render.render_files(StackSpec(recipe)), tmp_path / "bundle", None,
                                     host_groups={"video": 44, "render": 110})
    assert kwargs["devices"] == ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
    assert kwargs["group_add"] == ["44", "110"]  # numeric: the image has no render group of the host's id
    assert kwargs["security_opt"] == ["seccomp=unconfined"] and kwargs["cap_add"] == ["SYS_PTRACE"]
    assert kwargs["volumes"][str(tmp_path / "bundle")] == {"bind": layout.RUN_DIR, "mode": "ro"}
    assert kwargs["network_mode"] == "host" and kwargs["name"] == stackspec.container_name(recipe)
    without_ids = container.container_kwargs(StackSpec(recipe), render.render_files(StackSpec(recipe)), tmp_path / "bundle", None)
    assert without_ids["group_add"] == ["video", "render"]


def test_cpu_container_has_no_gpu_devices(tmp_path):
    recipe = load_recipe(RECIPES / "cpu-smoke.toml")
    kwargs = container.container_kwargs(StackSpec(recipe), render.render_files(StackSpec(recipe)), tmp_path / "bundle", None)
    assert not {"devices", "group_add", "cap_add", "security_opt"} & set(kwargs)
    assert kwargs["environment"]["PYTHONHASHSEED"] == str(recipe.cache.hash_seed)


def test_secrets_reach_the_container_but_never_the_printed_arguments(monkeypatch):
    for name, value in S3_KEYS.items():
        monkeypatch.setenv(name, value)
    spec = StackSpec(s3_recipe())
    assert container.read_secrets(spec) == {"AWS_ACCESS_KEY_ID": S3_KEYS["LMCACHE_S3_ACCESS_KEY_ID"],
                                            "AWS_SECRET_ACCESS_KEY": S3_KEYS["LMCACHE_S3_SECRET_ACCESS_KEY"]}
    planned = plan.plan_up(spec, facts=MI300X)
    assert planned.container["environment"]["AWS_SECRET_ACCESS_KEY"] == "s3cr3t/value+x"
    assert planned.container_args({})["environment"]["AWS_SECRET_ACCESS_KEY"] == "s3cr3t/value+x"
    shown = json.loads(planned.printable({}))
    assert shown["environment"]["AWS_ACCESS_KEY_ID"] == "<secret: read at run time>"
    assert shown["environment"]["AWS_SECRET_ACCESS_KEY"] == "<secret: read at run time>"
    assert not any(value in planned.printable({}) for value in S3_KEYS.values())
    assert planned.container["environment"]["AWS_SECRET_ACCESS_KEY"] == "s3cr3t/value+x"  # the plan is unchanged


def test_a_missing_secret_variable_is_named(monkeypatch):
    monkeypatch.setenv("LMCACHE_S3_ACCESS_KEY_ID", "AKIAEXAMPLEEXAMPLE12")
    monkeypatch.delenv("LMCACHE_S3_SECRET_ACCESS_KEY", raising=False)
    with pytest.raises(StackctlError) as error:
        container.read_secrets(StackSpec(s3_recipe()))
    assert str(error.value).startswith(f"{RECIPES / 'vllm-lmcache-s3.toml'}: secret variable(s) not set: "
                                       "LMCACHE_S3_SECRET_ACCESS_KEY (fix: export them")
    assert "AKIAEXAMPLE" not in str(error.value)


def test_up_refuses_a_rocm_stack_before_building_on_a_host_without_the_gpus():
    recipe = s3_recipe()
    with pytest.raises(StackctlError, match=r"platform rocm but /dev/kfd is missing on this host \(fix: load"):
        plan._refuse_without_gpus(recipe, CPU_ONLY)
    recipe.model.tensor_parallel = 16
    with pytest.raises(StackctlError, match=r"model.tensor_parallel = 16 but this host has 8 AMD GPU\(s\)"):
        plan._refuse_without_gpus(recipe, MI300X)
    recipe.model.tensor_parallel = 8
    assert plan._refuse_without_gpus(recipe, MI300X) is None
    assert plan._refuse_without_gpus(load_recipe(RECIPES / "cpu-smoke.toml"), CPU_ONLY) is None


def test_status_reads_the_address_from_the_rendered_serve_script(tmp_path, monkeypatch):
    engine = FakeEngine().install(monkeypatch)
    recipe = load_recipe(RECIPES / "cpu-smoke.toml")
    recipe.serve.port = 8123
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "serve.sh").write_bytes(render.render_files(StackSpec(recipe))["serve.sh"])
    engine.add_container("mounted", mounts={"/models": "/srv/models", layout.RUN_DIR: str(bundle)})
    engine.add_container("unmounted", mounts={"/models": "/srv/models"})
    mounted, unmounted = (engine.find_container(engine.client(), name) for name in ("mounted", "unmounted"))
    assert health.served_address(mounted) == (recipe.serve.host, "8123")
    assert health.served_address(unmounted) == ("127.0.0.1", None)
    (bundle / "serve.sh").unlink()
    assert health.served_address(mounted) == ("127.0.0.1", None)


def bundle_dir(tmp_path):
    bundle = tmp_path / "bundle"
    (bundle / "wheelhouse").mkdir(parents=True)
    (bundle / "ca").mkdir()
    return bundle


def test_the_sites_wheels_and_ca_bundle_go_into_the_build_context(tmp_path, monkeypatch):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "lmcache-0.5.6-cp311-linux_x86_64.whl").write_bytes(b"PK")
    (wheels / "README").write_text("not a wheel")
    ca = tmp_path / "site-ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("STACKCTL_WHEELHOUSE", str(wheels))  # the variable is enough; the recipe names none
    monkeypatch.delenv("STACKCTL_CA_BUNDLE", raising=False)
    bundle, said = bundle_dir(tmp_path), []
    build._add_site_inputs(bundle, load_recipe(RECIPES / "cpu-smoke.toml"), None, str(ca), said.append)
    assert [p.name for p in (bundle / "wheelhouse").iterdir()] == ["lmcache-0.5.6-cp311-linux_x86_64.whl"]
    assert (bundle / "ca" / "ca.crt").read_text() == "-----BEGIN CERTIFICATE-----\n"
    assert said == [f"wheelhouse {wheels}: 1 wheel(s)", f"CA bundle {ca}"]


def test_a_missing_wheelhouse_or_ca_bundle_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("STACKCTL_WHEELHOUSE", raising=False)
    recipe = load_recipe(RECIPES / "cpu-smoke.toml")
    with pytest.raises(StackctlError, match=r"^wheelhouse /no/wheels: no such directory \(fix: build.wheelhouse"):
        build._add_site_inputs(bundle_dir(tmp_path), recipe, "/no/wheels", None, print)
    with pytest.raises(StackctlError, match=r"^CA bundle /no/ca.pem: no such file \(fix: build.ca_bundle"):
        build._add_site_inputs(tmp_path / "bundle", recipe, None, "/no/ca.pem", print)
