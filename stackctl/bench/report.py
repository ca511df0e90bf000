"""bench's reports: the Markdown table, the PNG and the JSON of a workload run."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from stackctl.bench.workload import RunResult
from stackctl.errors import StackctlError


def require_plotting() -> None:
    """bench.png needs matplotlib: say so before any arm is brought up, not after the measurements."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise StackctlError("bench needs matplotlib to draw bench.png (fix: pip install matplotlib, or "
                            "pip install 'stackctl[test]')") from None


def markdown_table(summaries: list[dict]) -> str:
    columns = [("arm", "arm", "{}"), ("completed", "requests", "{}"), ("errors", "errors", "{}"),
               ("ttft_p50_s", "TTFT p50 (s)", "{:.3f}"), ("ttft_p95_s", "TTFT p95 (s)", "{:.3f}"),
               ("ttft_max_s", "TTFT max (s)", "{:.3f}"), ("e2e_p50_s", "E2E p50 (s)", "{:.3f}"),
               ("e2e_p95_s", "E2E p95 (s)", "{:.3f}"), ("input_tokens_per_s", "in tok/s", "{:.0f}"),
               ("output_tokens_per_s", "out tok/s", "{:.1f}"), ("hit_rate", "hit rate (server)", "{:.1%}"),
               ("probe_cold_ttft_s", "probe cold TTFT (s)", "{:.3f}"),
               ("probe_warm_ttft_s", "probe warm TTFT (s)", "{:.3f}")]
    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |",
             "|" + "---|" * len(columns)]
    for summary in summaries:
        cells = [fmt.format(summary[key]) if summary.get(key) is not None else "-" for key, _, fmt in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(results: list[RunResult], path: Path) -> Path:
    """TTFT over time per arm, and the cold vs warm probe bars, side by side (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (timeline, bars) = plt.subplots(1, 2, figsize=(12, 4.5), dpi=100,
                                            gridspec_kw={"width_ratios": [2, 1]})
    for result in results:
        points = sorted((r["start_s"], r["ttft_s"]) for r in result.requests)
        if points:
            timeline.scatter([p[0] for p in points], [p[1] for p in points], s=14, label=result.arm)
    timeline.set_xlabel("request start (s)")
    timeline.set_ylabel("TTFT (s)")
    timeline.set_title("TTFT over time")
    timeline.legend()
    timeline.grid(alpha=0.3)
    names = [r.arm for r in results]
    cold = [(r.probe or {}).get("cold_ttft_s") or 0 for r in results]
    warm = [(r.probe or {}).get("warm_ttft_s") or 0 for r in results]
    positions = range(len(names))
    bars.bar([p - 0.2 for p in positions], cold, width=0.4, label="cold")
    bars.bar([p + 0.2 for p in positions], warm, width=0.4, label="warm (repeat)")
    bars.set_xticks(list(positions), names)
    bars.set_ylabel("TTFT (s)")
    bars.set_title("single prompt: cold vs warm")
    bars.legend()
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path


def write_reports(results: list[RunResult], out_dir: Path) -> dict:
    from stackctl.state.store import write_atomically

    out_dir.mkdir(parents=True, exist_ok=True)
    summaries = [r.summary() for r in results]
    payload = {"summaries": summaries, "runs": [asdict(r) for r in results],
               "partial": any(r.server_lost for r in results)}
    write_atomically(out_dir / "bench.json", json.dumps(payload, indent=2))
    write_atomically(out_dir / "bench.md", markdown_table(summaries))
    plot(results, out_dir / "bench.png")
    return {"json": out_dir / "bench.json", "markdown": out_dir / "bench.md", "png": out_dir / "bench.png"}
