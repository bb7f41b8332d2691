"""The options every command shares (kept import-light: `patchkit --help` loads this)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Options:
    target_dir: str | None = None
    python: str | None = None
    vllm_version: str | None = None
    library: str | None = None
    adhoc: tuple[str, ...] = ()
    set_name: str | None = None
