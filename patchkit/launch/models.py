"""Finding a model's config.json offline: a local directory, or a hub id in the Hugging Face cache.

Nothing is ever downloaded. The cache is HF_HUB_CACHE, else HF_HOME/hub, else
~/.cache/huggingface/hub (the launch's `env` prefix wins over patchkit's own environment); a hub id
`org/name` is `models--org--name/snapshots/<revision>/config.json`, the revision refs/main names
preferred. A model found nowhere is TargetError (exit 4) naming every place looked at; a config.json
that is not a JSON object is BadInput (exit 2).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import BadInput, TargetError
from patchkit.fsutil import unsafe_reason
from patchkit.launch.values import REF_LIMIT, load_json, read_named_file

CONFIG = "config.json"
MAX_CONFIG_BYTES = 16 << 20


@dataclass
class ModelConfig:
    name: str  # as the command names it
    path: Path  # its config.json
    config: dict

    def get(self, key: str, default=None):
        return self.config.get(key, default)

    @property
    def text_config(self) -> dict:
        """The language model's config: text_config when present (Kimi-K2.5), else the config."""
        inner = self.config.get("text_config")
        return inner if isinstance(inner, dict) else self.config

    @property
    def architecture(self) -> str | None:
        archs = self.config.get("architectures")
        return archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None


def hub_cache(env: dict[str, str]) -> Path:
    merged = {**os.environ, **env}
    if merged.get("HF_HUB_CACHE"):
        return Path(merged["HF_HUB_CACHE"]).expanduser()
    if merged.get("HF_HOME"):
        return Path(merged["HF_HOME"]).expanduser() / "hub"
    return Path.home() / ".cache" / "huggingface" / "hub"


def resolve_model(name: str, env: dict[str, str], *, overrides: dict | None = None, role: str = "model") -> ModelConfig:
    looked: list[str] = []
    local = Path(name).expanduser()
    looked.append(str(local / CONFIG))
    raw = _config_bytes(local / CONFIG)
    if raw is not None:
        return _load(name, local / CONFIG, raw, overrides)
    candidate = _in_hub_cache(name, hub_cache(env), looked)
    if candidate is not None:
        return _load(name, *candidate, overrides)
    raise TargetError(
        f"{role} '{name}': no config.json found (looked at: {'; '.join(looked)})",
        hint="patchkit never downloads: point at a local directory, or fetch the model into the Hugging Face cache first",
    )


def _config_bytes(path: Path) -> bytes | None:
    """A config.json's bytes (bounded, never blocking: a fifo or a device is refused); None when absent."""
    try:
        return read_named_file(path, MAX_CONFIG_BYTES, "model config")
    except (FileNotFoundError, NotADirectoryError):
        return None


def _in_hub_cache(name: str, cache: Path, looked: list[str]) -> tuple[Path, bytes] | None:
    parts = name.split("/")
    if len(parts) != 2 or any(unsafe_reason(p) or not p or "/" in p for p in parts):
        return None
    repo = cache / f"models--{parts[0]}--{parts[1]}"
    snapshots = repo / "snapshots"
    looked.append(str(snapshots / "*" / CONFIG))
    ref = _read_ref(repo / "refs" / "main")
    preferred = _config_bytes(snapshots / ref / CONFIG) if ref else None
    if ref and preferred is not None:
        return snapshots / ref / CONFIG, preferred
    try:
        revisions = sorted(p for p in snapshots.iterdir() if (p / CONFIG).is_file())
    except OSError:
        return None
    for revision in reversed(revisions):
        raw = _config_bytes(revision / CONFIG)
        if raw is not None:
            return revision / CONFIG, raw
    return None


def _read_ref(path: Path) -> str | None:
    """refs/main's commit: a short regular file (a fifo, a device or a large file names none)."""
    try:
        text = read_named_file(path, REF_LIMIT, "hub cache ref").decode("ascii").strip()
    except (OSError, UnicodeDecodeError, BadInput):
        return None
    return text if text and not unsafe_reason(text) and "/" not in text else None


def _load(name: str, path: Path, raw: bytes, overrides: dict | None) -> ModelConfig:
    config = load_json(raw, str(path))
    if not isinstance(config, dict):
        raise BadInput(f"{path} is not a JSON object")
    return ModelConfig(name, path, _merged(config, overrides or {}))


def _merged(config: dict, overrides: dict) -> dict:
    """--hf-overrides, applied as vLLM applies them: nested objects merged key by key."""
    merged = dict(config)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merged(merged[key], value)
        else:
            merged[key] = value
    return merged
