"""How many bytes a model's weights take, read from a local model directory without loading any tensor.

Order: model.safetensors.index.json metadata.total_size (what transformers writes next to sharded weights), then the
sum of tensor sizes in each *.safetensors header. A safetensors file starts with an 8-byte little-endian header
length, then a JSON header mapping tensor names to {"dtype", "shape", "data_offsets": [begin, end]}.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path

from stackctl.errors import StackctlError

INDEX_FILE = "model.safetensors.index.json"
# A real header is kilobytes to a few MB (large MoE models); anything bigger means the file is not safetensors.
MAX_HEADER_BYTES = 100 * 2**20

SOURCE_INDEX = "index total_size"
SOURCE_HEADERS = "safetensors headers"


@dataclass(frozen=True)
class WeightsSize:
    """Weights size in bytes and how it was found."""

    bytes: int
    source: str  # SOURCE_INDEX or SOURCE_HEADERS
    path: str  # the index file or the model directory


def safetensors_header(path: Path) -> dict:
    """The JSON header of a .safetensors file (tensor name -> dtype, shape, data_offsets)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            prefix = handle.read(8)
            if len(prefix) != 8:
                raise StackctlError(f"{path}: too short to be a safetensors file")
            (length,) = struct.unpack("<Q", prefix)
            if length > MAX_HEADER_BYTES:
                raise StackctlError(f"{path}: header length {length} is implausible; not a safetensors file")
            raw = handle.read(length)
    except OSError as exc:
        raise StackctlError(f"{path}: cannot read: {exc}") from exc
    if len(raw) != length:
        raise StackctlError(f"{path}: header truncated ({len(raw)} of {length} bytes)")
    try:
        header = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise StackctlError(f"{path}: header is not valid JSON: {exc}") from exc
    if not isinstance(header, dict):
        raise StackctlError(f"{path}: header is not a JSON object")
    return header


def safetensors_data_bytes(path: Path) -> int:
    """Sum of the tensor byte ranges one .safetensors file holds (the same measure as index total_size)."""
    total = 0
    for name, info in safetensors_header(path).items():
        if name == "__metadata__":
            continue
        try:
            begin, end = info["data_offsets"]
        except (KeyError, TypeError, ValueError) as exc:
            raise StackctlError(f"{path}: tensor {name!r} has no valid data_offsets") from exc
        total += int(end) - int(begin)
    return total


def _index_total(index_path: Path) -> int | None:
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StackctlError(f"{index_path}: cannot read: {exc}") from exc
    total = (index.get("metadata") or {}).get("total_size") if isinstance(index, dict) else None
    if total is None:
        return None
    try:
        return int(total)
    except (TypeError, ValueError):
        return None


def weights_size(model_dir: Path) -> WeightsSize | None:
    """Weights size of a local model directory; None when it holds no safetensors weights."""
    model_dir = Path(model_dir)
    index_path = model_dir / INDEX_FILE
    if index_path.is_file():
        total = _index_total(index_path)
        if total is not None:
            return WeightsSize(bytes=total, source=SOURCE_INDEX, path=str(index_path))
    # Top level only: some repos keep a second copy in a subfolder (gpt-oss original/).
    shards = sorted(model_dir.glob("*.safetensors"))
    if not shards:
        return None
    return WeightsSize(
        bytes=sum(safetensors_data_bytes(shard) for shard in shards), source=SOURCE_HEADERS, path=str(model_dir)
    )
