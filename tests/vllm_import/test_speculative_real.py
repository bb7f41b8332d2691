"""Opt-in (`make test-vllm`): the speculative-config finding (patchkit/launch/speculative.py, read
statically from the installed vllm/config/speculative.py) fails exactly the --speculative-config
objects the real vLLM's EngineArgs.create_engine_config() refuses, on a small Llama target."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from vllm_overlay import REFUSED, TINY_LLAMA, ask_vllm, site_packages

from patchkit.launch.command import parse
from patchkit.launch.engine import LaunchContext
from patchkit.launch.models import resolve_model
from patchkit.launch.speculative import speculative_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

TARGET = TINY_LLAMA
DRAFTER = {**TARGET, "architectures": ["LlamaForCausalLMEagle3"], "num_hidden_layers": 1, "draft_vocab_size": 1000}
SPECS = {
    "good": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3},
    "named": {"model": "NAMED", "num_speculative_tokens": 3},
    "tokens-as-text": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": "3"},
    "no-model": {"method": "eagle3", "num_speculative_tokens": 3},
    "no-model-no-tokens": {"method": "eagle3"},
    "empty-model": {"method": "eagle3", "model": "", "num_speculative_tokens": 3},
    "case": {"method": "Eagle3", "model": "DRAFTER", "num_speculative_tokens": 3},
    "unsupported": {"method": "eagle4", "model": "DRAFTER", "num_speculative_tokens": 3},
    "bracketed-ngram": {"method": "[ngram]", "num_speculative_tokens": 3},
    "no-method": {"model": "DRAFTER", "num_speculative_tokens": 3},
    "null-method": {"method": None, "model": "DRAFTER", "num_speculative_tokens": 3},
    "no-tokens": {"method": "eagle3", "model": "DRAFTER"},
    "zero-tokens": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 0},
    "negative-tokens-as-text": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": "-1"},
    "fractional-tokens": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 2.5},
    "whole-float-tokens": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3.0},
    "method-list": {"method": ["eagle3"], "model": "DRAFTER", "num_speculative_tokens": 3},
    "draft-tp": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1},
    "model-not-text": {"method": "eagle3", "model": 5, "num_speculative_tokens": 3},
    "unknown-key": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "bogus": 1},
    "tp": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "tensor_parallel_size": 1},
    # review 5 L4: the target's tp is 1 here
    "draft-tp-2": {
        "method": "eagle3",
        "model": "DRAFTER",
        "num_speculative_tokens": 3,
        "draft_tensor_parallel_size": 2,
    },
    "disable-at-1": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "disable_by_batch_size": 1},
    "disable-at-2": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "disable_by_batch_size": 2},
    "draft-len-0": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "max_model_len": 0},
    "lookup-0": {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 0},
    # fields declared `str | None`: pydantic turns no other value into a string
    "revision-number": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "revision": 5},
    "revision-true": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "revision": True},
    "revision-text": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "revision": "main"},
    "revision-null": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "revision": None},
    "code-revision-float": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "code_revision": 1.5},
    "tree-list": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "speculative_token_tree": [1]},
    "eager-spaced": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "enforce_eager": " true "},
    "eager-maybe": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "enforce_eager": "maybe"},
    "eager-2": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "enforce_eager": 2},
    "eager-yes": {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "enforce_eager": "yes"},
    # a method but eagle/eagle3 given with a model is replaced by the one the drafter names (none: refused)
    "mtp-with-head": {"method": "mtp", "model": "DRAFTER", "num_speculative_tokens": 3},
    "mtp-with-named-head": {"method": "mtp", "model": "NAMED", "num_speculative_tokens": 3},
    "medusa-with-head": {"method": "medusa", "model": "DRAFTER", "num_speculative_tokens": 3},
    "draft-model-head": {"method": "draft_model", "model": "DRAFTER", "num_speculative_tokens": 3},
    # without "model": mtp makes the target (a Llama: no MTP type) its drafter; no count is refused (diff34 D4, D5)
    "mtp-own-llama": {"method": "mtp", "num_speculative_tokens": 1},
    "mtp-no-tokens": {"method": "mtp"},
    "ngram-no-tokens": {"method": "ngram", "prompt_lookup_max": 3},
    "ngram-model-no-tokens": {"model": "ngram"},
}


def test_the_speculative_config_finding_fails_what_vllm_refuses_and_only_that(tmp_path: Path):
    paths = {}
    for name, config in (("target", TARGET), ("drafter", DRAFTER), ("x-eagle3", DRAFTER)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
        paths[name] = str(tmp_path / name)
    names = {"DRAFTER": paths["drafter"], "NAMED": paths["x-eagle3"]}
    specs = {n: {k: names.get(v, v) if isinstance(v, str) else v for k, v in s.items()} for n, s in SPECS.items()}
    site = site_packages(VLLM_PYTHON)
    vllm_refused = ask_vllm(REFUSED, json.dumps({name: [paths["target"], spec] for name, spec in specs.items()}))
    for name, spec in specs.items():
        command = parse(["vllm", "serve", paths["target"], "--speculative-config", json.dumps(spec)])
        model = spec.get("model")
        named = isinstance(model, str) and model not in ("", "ngram")  # "ngram" names no drafter: the method
        drafter = resolve_model(model, {}, role="drafter") if named else None
        context = LaunchContext(command, resolve_model(paths["target"], {}), drafter, site, None, None)
        ours = speculative_findings(context)
        assert bool(ours) == (vllm_refused[name] is not None), (name, vllm_refused[name], ours)
