"""EAGLE-3 probe: vLLM's own supports_eagle3() on the target model classes.

`patchkit apply` (after writing) and `patchkit verify` (on an applied tree) run this inside the
interpreter that runs vLLM, once the patched modules imported: patchkit calls probe(version) and
reports each (subject, ok, message). By hand, in that environment:

    python patches/eagle3/probe.py [VERSION]      # exit 0 when every class supports EAGLE-3
"""

from __future__ import annotations

import importlib
import re
import sys

# (module, class, first vLLM release that has the class)
TARGETS = [
    ("vllm.model_executor.models.deepseek_v2", "DeepseekV2ForCausalLM", None),
    ("vllm.model_executor.models.deepseek_v2", "DeepseekV3ForCausalLM", None),  # also Kimi-K2
    ("vllm.model_executor.models.kimi_k25", "KimiK25ForConditionalGeneration", "0.15.0"),
]


def probe(version: str | None) -> list[tuple[str, bool, str]]:
    from vllm.model_executor.models.interfaces import supports_eagle3

    release = _release(version or _installed_version())
    results = []
    for module, name, since in TARGETS:
        if since and release < _release(since):
            continue
        supported = bool(supports_eagle3(getattr(importlib.import_module(module), name)))
        results.append((name, supported, f"supports_eagle3() is {supported}"))
    return results


def _installed_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("vllm")


def _release(version: str) -> tuple[int, ...]:
    """'0.15.0rc1' -> (0, 15, 0): the release part, enough to compare with a first release."""
    found = re.match(r"\d+(\.\d+)*", version)
    if not found:
        raise ValueError(f"not a vLLM version: {version!r}")
    return tuple(int(part) for part in found.group(0).split("."))


if __name__ == "__main__":
    outcome = probe(sys.argv[1] if len(sys.argv) > 1 else None)
    for subject, ok, message in outcome:
        print(f"{'ok  ' if ok else 'FAIL'} {subject}: {message}")
    sys.exit(0 if all(ok for _, ok, _ in outcome) else 1)
