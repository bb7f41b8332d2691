"""What a vLLM dist-info holds: a wheel's RECORD, a patched wheel's provenance, and a vLLM installed from one."""

from __future__ import annotations

from types import ModuleType


def installed_wheel_reader() -> ModuleType:
    """distinfo.installed_wheel, for a tree with a provenance file (record.has_provenance): it loads
    the planner, which a stock tree's dry run and `run`'s fast path never need."""
    # lazy: only a vLLM installed from a patched wheel needs it
    import patchkit.distinfo.installed_wheel

    return patchkit.distinfo.installed_wheel
