"""The class vLLM builds for the target, as the installed registry (read statically) maps config.json's
architectures to (module, class): what the rules that read the target's model file start from."""

from __future__ import annotations

from patchkit.launch.engine import LaunchContext

SPECULATIVE_TABLE = "_SPECULATIVE_DECODING_MODELS"  # the drafters' table: no target is built from it


def model_class(tables: dict[str, dict[str, tuple[str, str]]], arch: str) -> tuple[str, str] | None:
    """(module, class) a registry table other than the drafters' maps `arch` to; None: none does."""
    for name, table in tables.items():
        if name != SPECULATIVE_TABLE and arch in table:
            return table[arch]
    return None


def target_architecture(launch: LaunchContext) -> str | None:
    """The target's architecture vLLM builds: of config.json's, in order, the first the installed
    registry holds (ModelRegistry.resolve_model_cls); none registered, the first (for the message)."""
    archs = launch.target.architectures
    tables = launch.registry()
    registered = [arch for arch in archs if model_class(tables, arch) is not None]
    named = registered or archs
    return named[0] if named else None
