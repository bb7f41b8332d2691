"""Opt-in (`make test-vllm`): vLLM 0.16.0's own EngineArgs.create_engine_config() on CPU refuses a
draft_model drafter whose vocab_size is not the target's and takes one of the same vocabulary; static
preflight's speculative-config finding (patchkit/launch/speculative.py) fails exactly the refused one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from launch_fixtures import write_model
from vllm_overlay import TINY_LLAMA, ask_vllm

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

ASK = textwrap.dedent("""\
    import json, sys
    from patchkit._target.engine_config import _force_cpu_platform_when_none
    import vllm
    _force_cpu_platform_when_none()
    from vllm.engine.arg_utils import EngineArgs
    said = {}
    for drafter in sys.argv[2:]:
        spec = {"method": "draft_model", "model": drafter, "num_speculative_tokens": 2}
        try:
            EngineArgs(model=sys.argv[1], skip_tokenizer_init=True, speculative_config=spec).create_engine_config()
            said[drafter] = None
        except Exception as exc:
            said[drafter] = f"{type(exc).__name__}: {exc}"[:400]
    print(json.dumps(said))
    """)


def spec_findings(target: Path, drafter: Path) -> list[dict]:
    spec = json.dumps({"method": "draft_model", "model": str(drafter), "num_speculative_tokens": 2})
    done = subprocess.run(
        [sys.executable, "-m", "patchkit", "preflight", "--python", str(VLLM_PYTHON), "--no-import", "--format", "json",
         "--", "vllm", "serve", str(target), "--speculative-config", spec],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    return [f for f in json.loads(done.stdout)["findings"] if f["check"] == "speculative-config"]


def test_a_draft_model_of_another_vocabulary_is_refused_exactly_where_vllm_refuses_it(tmp_path: Path):
    target = write_model(tmp_path / "target", TINY_LLAMA)
    drafters = {
        vocab: write_model(tmp_path / f"dm{vocab}", {**TINY_LLAMA, "vocab_size": vocab}) for vocab in (500, 1000)
    }
    said = ask_vllm(ASK, str(target), *map(str, drafters.values()))
    assert "should have the same vocabulary size" in (said[str(drafters[500])] or ""), said
    assert said[str(drafters[1000])] is None, said
    [found] = spec_findings(target, drafters[500])
    assert "the drafter's vocab_size 500 is not the target's 1000" in found["message"], found
    assert spec_findings(target, drafters[1000]) == []
