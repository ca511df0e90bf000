"""Read Prometheus text exposition (vLLM's /metrics): sums of a metric over label sets."""

from __future__ import annotations

import re

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> list[tuple[str, dict, float]]:
    samples = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        try:
            value = float(match.group(4))
        except ValueError:
            continue
        samples.append((match.group(1), dict(_LABEL.findall(match.group(3) or "")), value))
    return samples


def total(text: str, name: str, **labels: str) -> float | None:
    """Sum of `name` over samples whose labels include `labels`; None when the metric is absent."""
    values = [value for metric, found, value in parse(text)
              if metric == name and all(found.get(k) == v for k, v in labels.items())]
    return sum(values) if values else None
