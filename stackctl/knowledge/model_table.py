"""The built-in table of well-known models (models.toml), and finding a model's shape from a recipe's model path."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from stackctl import toml_parser
from stackctl.errors import StackctlError
from stackctl.knowledge.kv_math import ModelShape, shape_from_config


_MODELS_FILE = Path(__file__).with_name("models.toml")


@dataclass(frozen=True)
class ModelEntry:
    """One row of models.toml."""

    ids: tuple[str, ...]
    config: dict
    weights_bytes: int | None
    weights_source: str

    @property
    def name(self) -> str:
        return self.ids[0]

    def shape(self, name: str | None = None) -> ModelShape:
        return shape_from_config(self.config, name or self.name)


@functools.lru_cache(maxsize=None)
def entries() -> tuple[ModelEntry, ...]:
    """Every built-in model, in file order."""
    data = toml_parser.loads(_MODELS_FILE.read_text(encoding="utf-8"))
    return tuple(
        ModelEntry(
            ids=tuple(row["ids"]),
            config=dict(row["config"]),
            weights_bytes=row.get("weights_bytes"),
            weights_source=row.get("weights_source", "unknown"),
        )
        for row in data["model"]
    )


def _candidate_names(model_ref: str) -> tuple[str, ...]:
    """Lower-cased names a model reference may be known by: the full id, the HF cache id, the last component."""
    ref = model_ref.strip().rstrip("/").lower()
    parts = PurePosixPath(ref).parts
    names = [ref]
    # Hugging Face cache layout: .../models--Org--Name/snapshots/<hash>
    for part in parts:
        if part.startswith("models--"):
            names.append(part[len("models--") :].replace("--", "/"))
    if parts:
        names.append(parts[-1])
    return tuple(names)


def lookup(model_ref: str) -> ModelEntry | None:
    """The built-in entry for an HF id or a path ending in the model's name (case-insensitive); None if unknown."""
    if not model_ref or not model_ref.strip():
        return None
    wanted = _candidate_names(model_ref)
    for full_only in (True, False):
        for entry in entries():
            for model_id in entry.ids:
                key = model_id.lower() if full_only else model_id.lower().rsplit("/", 1)[-1]
                if key in wanted:
                    return entry
    return None


def load_config_json(model_dir: Path) -> dict | None:
    """The parsed config.json of a local model directory, or None when the directory has none."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StackctlError(f"{path}: cannot read config.json: {exc}") from exc


def resolve_shape(model_ref: str, model_dir: Path | None = None) -> tuple[ModelShape, str] | None:
    """The model's shape and where it came from: the local config.json first, then the built-in table."""
    if model_dir is not None:
        config = load_config_json(model_dir)
        if config is not None:
            return shape_from_config(config, model_ref), f"{Path(model_dir) / 'config.json'}"
    entry = lookup(model_ref)
    if entry is not None:
        return entry.shape(), f"built-in table ({entry.name})"
    return None


def recipe_shape(recipe) -> tuple[ModelShape, str] | None:
    """resolve_shape for a recipe's model: its directory's config.json when the path is a directory here."""
    model_dir = Path(recipe.model.path)
    return resolve_shape(recipe.model.path, model_dir if model_dir.is_dir() else None)
