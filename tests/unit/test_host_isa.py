"""The CPU's dtype features (host/isa.py), the dtype decision (host/dtype.py), the matmul probe's output
(host/matmul.py) and a prefill's FLOPs (knowledge/model_flops.py): pure logic on captured /proc/cpuinfo text."""

from __future__ import annotations

import json

import pytest
from fake_engine import FakeEngine

from stackctl.host.dtype import DTYPE_ENV, decide_dtype, host_decides, stack_isa
from stackctl.host.isa import CpuIsa, canonical_dtype, parse_cpuinfo
from stackctl.host.matmul import MatmulPeak, parse_probe
from stackctl.host.prefill import served_dtype
from stackctl.knowledge.model_flops import prefill_cost, prefill_rate, rate_text
from stackctl.recipe.loader import load_recipe_text

# First lines of /proc/cpuinfo's first processor block on three kinds of host (flags shortened to what matters
# and a few neighbours).
EPYC_AVX2 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi2 sha_ni

processor\t: 1
flags\t\t: fpu avx512f avx512_bf16 amx_bf16
"""
XEON_AMX = """processor\t: 0
model name\t: Intel(R) Xeon(R) Processor
flags\t\t: fpu avx avx2 avx512f avx512dq avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8
"""
ARM_BF16 = """processor\t: 0
BogoMIPS\t: 2000.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp bf16 i8mm sve
"""


def recipe(dtype: str = "auto", platform: str = "cpu", env: str = ""):
    text = (f'[stack]\nname = "t"\nplatform = "{platform}"\nengine = "vllm"\n[model]\npath = "/m"\n'
            f'dtype = "{dtype}"\n[serve]\nenv = {{ {env} }}\n')
    return load_recipe_text(text)


def test_cpuinfo_of_an_avx2_epyc_has_no_native_bf16_and_reads_only_the_first_processor():
    isa = parse_cpuinfo(EPYC_AVX2)
    assert (isa.arch, isa.features, isa.model_name) == ("x86_64", ("avx2",), "AMD EPYC 7B13")
    assert isa.native("bfloat16") is False and isa.native("float16") is False and isa.native("float32") is True
    assert isa.native_text() == "avx2, no avx512_bf16/amx_bf16"


def test_cpuinfo_of_an_amx_xeon_and_an_arm_host_with_bf16():
    amx = parse_cpuinfo(XEON_AMX)
    assert amx.features == ("avx2", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16")
    assert amx.native("bf16") is True and amx.native("half") is True
    arm = parse_cpuinfo(ARM_BF16)
    assert arm.arch == "aarch64" and arm.native("bfloat16") is True and "no avx512" not in arm.native_text()


def test_unreadable_cpuinfo_is_unknown_not_emulated():
    isa = parse_cpuinfo("")
    assert not isa.known and isa.native("bfloat16") is None


@pytest.mark.parametrize("environment, bf16", [
    ({}, True),
    ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, False),
    ({"ONEDNN_MAX_CPU_ISA": "avx512_core"}, False),
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16"}, True),
    ({"ATEN_CPU_CAPABILITY": "avx2"}, True),  # measured: ATen's cap alone leaves oneDNN's bf16 matmuls native
    ({"ONEDNN_MAX_CPU_ISA": "nonsense"}, True),
])
def test_the_stacks_environment_caps_what_onednn_may_use(environment, bf16):
    isa = parse_cpuinfo(XEON_AMX).for_environment(environment)
    assert isa.native("bfloat16") is bf16
    if "ONEDNN_MAX_CPU_ISA" in environment and not bf16:
        assert isa.capped_by == (f"ONEDNN_MAX_CPU_ISA={environment['ONEDNN_MAX_CPU_ISA'].upper()}",)


def test_the_servers_cpu_is_capped_by_the_recipes_serve_env_exactly_as_by_the_whole_server_environment():
    """stack_isa reads the caps from serve.env alone: the variables the bundle adds (hash seed, LMCache config, the
    connector switch, S3) never cap the CPU, so the server's whole environment caps it the same way."""
    from stackctl.bundle.stackspec import environment
    from stackctl.recipe.isa_cap import with_cpu_isa_cap

    text = ('[stack]\nname = "t"\nplatform = "cpu"\nengine = "vllm"\n[model]\npath = "/m"\n'
            '[cache]\nenabled = true\nhash_seed = 7\n')
    capped = with_cpu_isa_cap(load_recipe_text(text), "avx2")
    for current in (recipe(), recipe(env='ONEDNN_MAX_CPU_ISA = "AVX512_CORE"'), capped):
        isa = parse_cpuinfo(XEON_AMX)
        assert stack_isa(current, isa) == isa.for_environment(environment(current))
    assert stack_isa(capped, parse_cpuinfo(XEON_AMX)).native("bfloat16") is False


def test_round_trip_through_json():
    isa = parse_cpuinfo(XEON_AMX).for_environment({"ONEDNN_MAX_CPU_ISA": "AVX2"})
    assert CpuIsa.from_dict(json.loads(json.dumps(isa.to_dict()))) == isa


@pytest.mark.parametrize("text, name", [("bf16", "bfloat16"), ("torch.bfloat16", "bfloat16"), ("half", "float16"),
                                        ("float", "float32"), ("auto", None), ("int8", None)])
def test_canonical_dtype(text, name):
    assert canonical_dtype(text) == name


# -- the decision ------------------------------------------------------------------------------------------------

EMULATED = MatmulPeak({"float32": 124.0, "bfloat16": 0.4})
NATIVE = MatmulPeak({"float32": 54.0, "bfloat16": 106.0})


def test_auto_on_a_cpu_without_native_bf16_serves_float32_and_says_the_measured_factor():
    decision = decide_dtype(recipe(), parse_cpuinfo(EPYC_AVX2), EMULATED)
    assert (decision.dtype, decision.served, decision.emulated) == ("float32", "float32", False)
    assert decision.environment() == {DTYPE_ENV: "float32"}
    assert decision.reason == ("float32 (this CPU has no native bf16: bfloat16 matmul 0.4 GFLOP/s vs float32 124, "
                               "310x slower than float32)")


def test_auto_on_an_amx_cpu_serves_bf16_from_the_flags_alone():
    decision = decide_dtype(recipe(), parse_cpuinfo(XEON_AMX))
    assert decision.dtype == "bfloat16" and decision.emulated is False and "flags avx2" in decision.reason


def test_the_measurement_decides_over_the_flags():
    """Flags say native (an AMX host) but the stack's oneDNN is capped in a way the flags cannot show: the figures
    win."""
    decision = decide_dtype(recipe(), parse_cpuinfo(XEON_AMX), EMULATED)
    assert decision.dtype == "float32"
    assert decide_dtype(recipe(), parse_cpuinfo(EPYC_AVX2), NATIVE).dtype == "bfloat16"


@pytest.mark.parametrize("bf16", [165.0, 82.0, 40.0, 27.0])
def test_figures_between_clear_native_and_clear_emulated_leave_the_decision_to_the_flags(bf16):
    """This host's bf16 runs at 62% of float32 (AVX512-BF16 without AMX); a burst of load while one dtype is timed
    halves that figure or more. The decision stays bf16 on these flags, and stays float32 on a CPU whose flags have no
    bf16, until the figures are clear either way."""
    measured = MatmulPeak({"float32": 269.0, "bfloat16": bf16})
    native = decide_dtype(recipe(), parse_cpuinfo(XEON_AMX), measured)
    assert (native.dtype, native.emulated) == ("bfloat16", False), native.reason
    no_bf16 = decide_dtype(recipe(), parse_cpuinfo(EPYC_AVX2), measured)
    assert no_bf16.dtype == ("bfloat16" if bf16 / 269.0 >= 0.5 else "float32"), no_bf16.reason
    if bf16 / 269.0 < 0.5:
        assert "too close to call, so the flags decide" in native.reason and "no avx512_bf16" in no_bf16.reason
    emulated = decide_dtype(recipe("bfloat16"), parse_cpuinfo(XEON_AMX), MatmulPeak({"float32": 269.0, "bfloat16": 26.0}))
    assert emulated.emulated is True  # under a tenth of float32: emulated whatever the flags say


def test_figures_in_the_band_on_an_unknown_cpu_are_judged_by_the_figures_alone():
    assert decide_dtype(recipe("bfloat16"), parse_cpuinfo(""), MatmulPeak({"float32": 269.0, "bfloat16": 82.0})) \
        .emulated is True
    assert decide_dtype(recipe("bfloat16"), parse_cpuinfo(""), MatmulPeak({"float32": 269.0, "bfloat16": 165.0})) \
        .emulated is False


def test_an_explicit_dtype_stands_and_is_judged():
    forced = decide_dtype(recipe("bfloat16"), parse_cpuinfo(EPYC_AVX2), EMULATED)
    assert (forced.dtype, forced.served, forced.emulated) == (None, "bfloat16", True)
    assert forced.environment() == {} and "310x slower" in forced.reason
    assert decide_dtype(recipe("float32"), parse_cpuinfo(EPYC_AVX2)).emulated is False


def test_unknown_cpu_with_auto_serves_float32_and_rocm_is_left_to_vllm():
    assert decide_dtype(recipe(), parse_cpuinfo("")).dtype == "float32"
    rocm = recipe(platform="rocm")
    assert not host_decides(rocm) and decide_dtype(rocm, parse_cpuinfo(XEON_AMX)).dtype is None


# -- the probe's output -------------------------------------------------------------------------------------------

def test_probe_output_is_read_from_its_json_line_and_a_failure_is_an_error():
    line = json.dumps({"schema": 1, "threads": 2, "capability": "AVX2", "torch": "2.13.0+cpu", "error": None,
                       "dtypes": {"float32": {"gflops": 124.0, "error": None},
                                  "bfloat16": {"gflops": None, "error": "RuntimeError: no"}}})
    peak = parse_probe("torch chatter\n" + line + "\n")
    assert peak.gflops == {"float32": 124.0, "bfloat16": None} and peak.errors == {"bfloat16": "RuntimeError: no"}
    assert peak.share("bfloat16") is None and peak.factor_text("bfloat16") == "no ratio"
    with pytest.raises(ValueError, match="torch does not import"):
        parse_probe(json.dumps({"error": "torch does not import: x", "dtypes": {}}))
    with pytest.raises(ValueError, match="no result"):
        parse_probe("Traceback ...")


def test_the_kept_figures_are_the_best_each_dtype_reached_and_a_fresh_run_returns_the_best_too(tmp_path, monkeypatch):
    """A peak is the best this host does: a probe that shared the CPUs with other work measures less, and "% of this
    host's peak" against that figure flatters the server (bench once printed a prefill at 120% of a peak measured
    beside the stack's own server). A fresh run is kept and returned as the best of it and what was kept."""
    from stackctl.measure import matmul

    outputs = iter([({"float32": 108.0, "bfloat16": 1017.0}, 3.1), ({"float32": 281.0, "bfloat16": 2607.0}, 5.2),
                    ({"float32": 250.0, "bfloat16": None}, 4.0)])

    def probe_output(image, command, environment):
        figures, memcpy = next(outputs)
        return json.dumps({"schema": 1, "threads": 2, "error": None, "memcpy": {"gb_s": memcpy, "threads": 1},
                           "dtypes": {d: {"gflops": g, "error": None if g else "busy"} for d, g in figures.items()}})

    monkeypatch.setenv("STACKCTL_STATE_DIR", str(tmp_path))
    engine = FakeEngine().install(monkeypatch)
    engine.on_run = probe_output
    args = dict(environment={}, cpuset={}, isa={"avx2": True}, stack="s")
    first = matmul.measure(engine.client(), "sha256:abc", **args)
    assert [image for image, _, _ in engine.runs] == ["sha256:abc"]  # the probe ran in the stack's image
    assert first.gflops == {"float32": 108.0, "bfloat16": 1017.0} and first.memcpy_gb_s == 3.1
    kept = matmul.measure(engine.client(), "sha256:abc", **args)
    assert kept.gflops["bfloat16"] == 1017.0  # kept: not measured again
    assert matmul.measure(engine.client(), "sha256:abc", **args, fresh=True).gflops["bfloat16"] == 2607.0
    # measured 250 / none / 4.0 beside other work
    busy = matmul.measure(engine.client(), "sha256:abc", **args, fresh=True)
    assert busy.gflops == {"float32": 281.0, "bfloat16": 2607.0} and busy.errors == {} and busy.memcpy_gb_s == 5.2
    assert matmul.measure(engine.client(), "sha256:abc", **args).to_dict() == busy.to_dict()
    (next(tmp_path.glob("s/matmul/*.json"))).write_text("{damaged")
    with pytest.raises(StopIteration):  # a damaged file is measured again (the probe is asked: no figures left)
        matmul.measure(engine.client(), "sha256:abc", **args)


def test_factor_texts():
    assert NATIVE.factor_text("bfloat16") == "2.0x faster than float32"
    assert MatmulPeak({"float32": 100.0, "bfloat16": 40.0}).factor_text("bfloat16") == "2.5x slower than float32"


def test_served_dtype_is_the_last_engine_start_in_the_log():
    log = ("INFO Initializing a V1 LLM engine (v0.32.0) with config: model='/m', trust_remote_code=False, "
           "dtype=torch.bfloat16, max_seq_len=4096\n...\n"
           "INFO Initializing a V1 LLM engine (v0.32.0) with config: model='/m', dtype=torch.float32, x=1\n")
    assert served_dtype(log) == "float32"
    assert served_dtype("no engine here") is None


# -- a prefill's cost -----------------------------------------------------------------------------------------------

BENCH_MODEL = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 12, "num_attention_heads": 16,
               "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 4096, "torch_dtype": "bfloat16"}


@pytest.mark.parametrize("files, log, missing, dtype, has_cost", [
    ({"/m/config.json": json.dumps(BENCH_MODEL).encode()}, "dtype=torch.float32", "", "float32", True),
    ({}, "dtype=torch.bfloat16", "no config.json under /m/ in the container", "bfloat16", False),
    ({"/m/config.json": b'{"hidden_size": 8}'}, "no engine line", "config.json: num_attention_heads missing", None,
     False),
])
def test_a_running_models_floor_says_each_part_it_could_not_read(monkeypatch, files, log, missing, dtype, has_cost):
    """measure/prefill.model_floor reads the model's config.json in the container and the served dtype from the
    server's log (here at the adapter's edge: the two reads it makes); what it cannot read is said, never guessed."""
    from stackctl.measure.prefill import model_floor

    engine = FakeEngine().install(monkeypatch)
    engine.add_container("server", files=files, log=f"Initializing a V1 LLM engine {log}")
    server = engine.find_container(engine.client(), "server")
    floor = model_floor(server, "/m/")
    assert floor.dtype == dtype and (floor.cost is not None) == has_cost
    assert missing in floor.missing and (dtype is not None or "the server's log names no dtype" in floor.missing)
    assert model_floor(server, "/m", log="dtype=torch.float16 but not an engine line").dtype is None


def test_the_bench_models_flops_per_token_are_twice_its_layer_weights():
    cost = prefill_cost(BENCH_MODEL)
    # per layer: q 1024x1024, k and v 1024x512 each, o 1024x1024, MLP 3 x 1024x4096 = 15,728,640 weights
    assert cost.weight_flops_per_token == 2 * 12 * 15_728_640
    whole = cost.flops(0, 2000)
    attention = 4 * 12 * 16 * 64 * (2000 * 2001 / 2)
    assert whole == 2000 * cost.weight_flops_per_token + attention + 2 * 1024 * 4096
    # a cached prefix is not recomputed, but the tokens after it attend to it
    assert cost.flops(1792, 2000) == pytest.approx(
        208 * cost.weight_flops_per_token + 4 * 12 * 16 * 64 * (1793 + 2000) * 208 / 2 + 2 * 1024 * 4096)


def test_prefill_rate_and_its_text():
    cost = prefill_cost(BENCH_MODEL)
    rate = prefill_rate(cost, 2000, 0, 2.0, peak_gflops=1000.0)
    assert rate["tokens_recomputed"] == 2000 and rate["tokens_per_s"] == 1000
    assert rate["share_of_peak"] == pytest.approx(cost.flops(0, 2000) / 2.0 / 1e9 / 1000)
    assert rate_text(rate, "bfloat16").startswith("2,000 tokens recomputed at 1,000 tok/s, ")
    assert rate_text(rate, "bfloat16").endswith("% of this host's bfloat16 matmul peak")
    assert prefill_rate(cost, 2000, 0, 2.0, None)["share_of_peak"] is None
    assert rate["error"] is None


def test_a_rate_above_the_peak_is_a_failed_measurement_never_a_percentage():
    """478.7 GFLOP/s against a 400.1 peak measured while the stack's server shared the CPUs: bench printed "120% of
    this host's bfloat16 matmul peak". No prefill beats the matmul it is made of."""
    cost = prefill_cost(BENCH_MODEL)
    seconds = cost.flops(0, 2000) / 478.7e9
    rate = prefill_rate(cost, 2000, 0, seconds, peak_gflops=400.1)
    assert rate["share_of_peak"] is None and rate["gflops"] == pytest.approx(478.7)
    assert "478.7 GFLOP/s is above this host's matmul peak of 400.1 GFLOP/s" in rate["error"]
    text = rate_text(rate, "bfloat16")
    assert "measurement failed" in text and "%" not in text
    at_the_peak = prefill_rate(cost, 2000, 0, cost.flops(0, 2000) / 400.1e9, peak_gflops=400.1)
    assert at_the_peak["error"] is None and at_the_peak["share_of_peak"] == pytest.approx(1.0)


def test_a_config_without_a_needed_field_is_a_named_error():
    with pytest.raises(ValueError, match="intermediate_size"):
        prefill_cost({k: v for k, v in BENCH_MODEL.items() if k != "intermediate_size"})
