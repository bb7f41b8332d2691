"""EAGLE-3 probe: vLLM's own supports_eagle3() on the target model classes.

`patchkit apply` (after writing) and `patchkit verify` (on an applied tree) run this inside the
interpreter that runs vLLM, once the patched modules imported: patchkit calls probe(release), with
the release patchkit judged the target as ("0.15.0" for 0.15.0rc1, 0.15.0.dev3 or 0.15.0+cu129:
patchkit's version.release_version), and reports each (subject, ok, message). By hand, in that
environment:

    python patches/eagle3/probe.py RELEASE      # e.g. 0.15.0; exit 0 when every class supports EAGLE-3
"""

from __future__ import annotations

import importlib
import sys

# (module, class, first vLLM release that has the class)
TARGETS = [
    ("vllm.model_executor.models.deepseek_v2", "DeepseekV2ForCausalLM", None),
    ("vllm.model_executor.models.deepseek_v2", "DeepseekV3ForCausalLM", None),  # also Kimi-K2
    ("vllm.model_executor.models.kimi_k25", "KimiK25ForConditionalGeneration", "0.15.0"),
]


def probe(release: str) -> list[tuple[str, bool, str]]:
    from vllm.model_executor.models.interfaces import supports_eagle3

    results = []
    for module, name, since in TARGETS:
        if since and _numbers(release) < _numbers(since):
            continue
        supported = bool(supports_eagle3(getattr(importlib.import_module(module), name)))
        results.append((name, supported, f"supports_eagle3() is {supported}"))
    return results


def _numbers(release: str) -> tuple[int, ...]:
    """'0.15.0' -> (0, 15, 0). A release as patchkit passes it: numbers only, already normalised."""
    try:
        return tuple(int(part) for part in release.split("."))
    except ValueError:
        raise ValueError(f"not a vLLM release (X.Y.Z, as patchkit passes it): {release!r}") from None


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    outcome = probe(sys.argv[1])
    for subject, ok, message in outcome:
        print(f"{'ok  ' if ok else 'FAIL'} {subject}: {message}")
    sys.exit(0 if all(ok for _, ok, _ in outcome) else 1)
