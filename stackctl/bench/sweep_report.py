"""The sweep's reports: a Markdown table (one row per load point and arm, then the crossover and plan's
prediction), a PNG (p50 TTFT against users, one line per arm, the interval of its median shaded, p95 dashed, the
crossovers with their intervals and plan's prediction marked) and the JSON."""

from __future__ import annotations

import json
from pathlib import Path


def markdown(result: dict) -> str:
    titles = {arm["name"]: arm["title"] for arm in result["arms"]}
    trace = result.get("trace")
    workload = (f"each user a replay of kv-cache-tester {trace['name']} ({'; '.join(trace['replay'])})" if trace else
                f"{result['turns']} turns per user, think time {result['think_s']:g} s, {result['output_tokens']} "
                "generated tokens per turn")
    lines = [f"Sweep of {result['stack']} ({result['model']}): {workload}; every arm's KV cache "
             f"{result['kv_cache_bytes']:,} bytes (~{result['kv_tokens']:,} tokens planned).", ""]
    for arm in result["arms"]:
        held = arm["server_kv"]
        binding = f"; {arm['omp_binding']}" if arm.get("omp_binding") else ""
        lines.append(f"- {arm['title']}: the server allocated " + (
            f"{held['tokens']:,} tokens of KV ({held['num_gpu_blocks']} blocks x {held['block_size']})"
            if held else "an amount of KV it did not report") + binding)
    lines += ["", "| users | context | working set (tokens) | arm | requests | errors | TTFT p50 (s) | "
              "TTFT p25-p75 (s) | TTFT p95 (s) | tokens/s | HBM hit rate | offload hit rate | offload hit tokens | plan's regime |",
              "|" + "---|" * 14]
    regimes = {(p["users"], p["context_tokens"]): p["regime"] for p in result.get("plan", [])}
    for point in result["points"]:
        lines.append("| " + " | ".join([
            str(point["users"]), f"{point['context_tokens']:,}", f"{point['working_set_tokens']:,}",
            titles.get(point["arm"], point["arm"]).split(" (")[0], str(point["completed"]), str(point["errors"]),
            _fixed(point["ttft_p50_s"], 3), _spread(point), _fixed(point["ttft_p95_s"], 3),
            f"{point['tokens_per_s']:.0f}",
            _share(point["hbm_hit_rate"]), _share(point["offload_hit_rate"]), f"{point['offload_hit_tokens']:,.0f}",
            regimes.get((point["users"], point["context_tokens"]), "-")]) + " |")
    lines.append("")
    for found in result.get("crossovers", []):
        lines.append(f"Crossover ({titles[found['arm']].split(' (')[0]} vs HBM only, {found['context_tokens']:,}-token "
                     f"contexts): {found['explanation']}")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5), dpi=100)
    titles = {arm["name"]: arm["title"] for arm in result["arms"]}
    for context in result["contexts"]:
        suffix = f", {context:,}-token contexts" if len(result["contexts"]) > 1 else ""
        for name, title in titles.items():
            points = sorted((p["users"], p["ttft_p50_s"], p["ttft_p95_s"], *(p.get("ttft_p50_ci_s") or (None, None)))
                            for p in result["points"]
                            if p["arm"] == name and p["context_tokens"] == context and p["ttft_p50_s"] is not None)
            if not points:
                continue
            loads = [p[0] for p in points]
            line, = axes.plot(loads, [p[1] for p in points], marker="o", label=f"{title}{suffix}")
            axes.plot(loads, [p[2] for p in points], linestyle="--", alpha=0.5, color=line.get_color())
            if all(p[3] is not None and p[4] is not None for p in points):
                axes.fill_between(loads, [p[3] for p in points], [p[4] for p in points], alpha=0.15,
                                  color=line.get_color())
    for found in result.get("crossovers", []):
        if found["load"] is not None:
            axes.axvline(found["load"], color="black", alpha=0.6, label=f"measured crossover {found['load']:.1f}")
        interval = found.get("interval")
        if interval and interval["kind"] == "interval":
            low = result["users"][0] if interval["low"] is None else interval["low"]
            high = result["users"][-1] if interval["high"] is None else interval["high"]
            axes.axvspan(low, high, color="black", alpha=0.07, label="crossover interval (median TTFT intervals)")
        if found.get("predicted_users"):
            axes.axvline(found["predicted_users"], color="grey", linestyle=":",
                         label=f"plan: HBM full at {found['predicted_users']:.1f}")
    axes.set_xlabel("concurrent users")
    axes.set_ylabel("TTFT (s): p50 solid (its 90% interval shaded), p95 dashed")
    axes.set_title(f"{result['stack']}: TTFT against load (KV cache ~{result['kv_tokens']:,} tokens)")
    axes.set_xticks(result["users"])
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def write(result: dict, out_dir: Path) -> dict:
    from stackctl.state.store import write_atomically

    out_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(out_dir / "sweep.json", json.dumps(result, indent=2))
    write_atomically(out_dir / "sweep.md", markdown(result))
    plot(result, out_dir / "sweep.png")
    return {"json": out_dir / "sweep.json", "markdown": out_dir / "sweep.md", "png": out_dir / "sweep.png"}


def _fixed(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _spread(point: dict) -> str:
    low, high = point.get("ttft_p25_s"), point.get("ttft_p75_s")
    return "-" if low is None or high is None else f"{low:.3f}-{high:.3f}"


def _share(value) -> str:
    return "-" if value is None else f"{value:.1%}"
