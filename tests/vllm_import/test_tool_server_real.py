"""Opt-in (`make test-vllm`): the --tool-server entries patchkit refuses are exactly those whose URL
vLLM's MCP client cannot connect with: httpx (the venv's) refuses the URL vLLM builds, or its port
is one no connection uses (0, over 65535)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from packaging.version import Version
from vllm_overlay import TINY_LLAMA, ask_vllm

from patchkit.launch.command import parse
from patchkit.launch.late_files import tool_server_findings

pytestmark = pytest.mark.skipif(
    not os.environ.get("VLLM_PYTHON"), reason="needs a venv with vLLM: run `make test-vllm`"
)

ENTRIES = [
    "localhost:8000", "x:abc", "::1:8000", "127.0.0.1:99999", "h:0", "h:", "[::1]:8000", "u:p@h:1",
    "h:8000/mcp", "h:+80", "[::1]x", "h:65535", "h:65536", "[::1]", "host", "h:-1", "h:1:2", "[::1]:0",
]  # fmt: skip

ASK = textwrap.dedent("""\
    import json, sys
    import httpx

    def usable(entry):
        try:
            url = httpx.URL(f"http://{entry}/sse")
        except Exception:
            return False
        return url.port is None or 1 <= url.port <= 65535

    print(json.dumps([usable(e) for e in json.loads(sys.argv[1])]))
""")


def test_refused_entries_are_those_httpx_cannot_connect_with():
    usable = ask_vllm(ASK, json.dumps(ENTRIES))
    assert isinstance(usable, list)
    disagreements = []
    for entry, fine in zip(ENTRIES, usable, strict=True):
        command = parse(["vllm", "serve", "m", "--tool-server", entry], "0.16.0")
        found, _notes = tool_server_findings(command, "command", Version("0.16.0"))
        disagreements += [(entry, fine)] if bool(found) == fine else []
    assert disagreements == []


ASK_RUNNER = textwrap.dedent("""\
    import inspect, json, os, sys
    from patchkit._target.engine_config import _force_cpu_platform_when_none
    _force_cpu_platform_when_none()
    from vllm.config.model import ModelConfig
    from vllm.entrypoints.openai import api_server

    def runner(directory, option):  # the runner vLLM's ModelConfig resolves, or what it raises
        try:
            return ModelConfig(model=directory, runner=option, skip_tokenizer_init=True).runner_type
        except Exception as exc:
            return type(exc).__name__

    source = inspect.getsource(api_server.init_app_state)
    gated = 'if "generate" in supported_tasks:\\n        from vllm.entrypoints.openai.generate.api_router import init_generate_state'
    print(json.dumps([gated in source, [runner(d, o) for d, o in json.loads(sys.argv[1])]]))
""")


def test_a_launch_judged_pooling_is_one_vllm_runs_pooling(tmp_path):
    """The tool server is built only under `generate` (init_app_state -> init_generate_state), and a
    launch patchkit takes for a pooling model is one vLLM's ModelConfig resolves to its pooling runner."""
    cases = [
        ("LlamaForSequenceClassification", "auto"), ("LlamaForCausalLM", "pooling"), ("Qwen2ForRewardModel", "auto"),
        ("BertForSequenceClassification", "auto"), ("LlamaForCausalLM", "auto"),
        ("LlamaForSequenceClassification", "generate"),
    ]  # fmt: skip
    asked = []
    for architecture, runner in cases:
        model = tmp_path / architecture
        model.mkdir(exist_ok=True)
        (model / "config.json").write_text(json.dumps({**TINY_LLAMA, "architectures": [architecture]}))
        asked.append((str(model), runner))
    said = ask_vllm(ASK_RUNNER, json.dumps(asked))
    assert isinstance(said, list)
    gated, runners = said
    assert gated is True
    ours = []
    for architecture, runner in cases:
        command = parse(["vllm", "serve", "m", "--tool-server", "http://x:1", "--runner", runner], "0.16.0")
        found, _ = tool_server_findings(command, "command", Version("0.16.0"), (architecture,))
        ours.append("pooling" if not found else "generate")
    assert ours == runners and runners.count("pooling") == 4


def test_a_modules_json_patchkit_takes_for_pooling_is_one_vllm_runs_pooling(tmp_path):
    """A *ForCausalLM model with a sentence-transformers modules.json: vLLM's runner `auto` asks
    get_pooling_config first; patchkit's verdict on the tool server follows the runner vLLM resolves."""
    pooling = {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
    transformer = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
    layouts = {"both": [transformer, pooling], "pooling": [pooling], "transformer": [transformer], "empty": []}
    asked = []
    for name, modules in layouts.items():
        model = tmp_path / name
        model.mkdir()
        (model / "config.json").write_text(json.dumps(TINY_LLAMA))
        (model / "modules.json").write_text(json.dumps(modules))
        (model / "1_Pooling").mkdir()  # as sentence-transformers saves it (vLLM 0.16.0 fails without it)
        (model / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
        asked.append((str(model), "auto"))
    said = ask_vllm(ASK_RUNNER, json.dumps(asked))
    assert isinstance(said, list)
    ours = []
    for directory, _ in asked:
        command = parse(["vllm", "serve", directory, "--tool-server", "http://x:1"], "0.16.0")
        found, _ = tool_server_findings(command, "command", Version("0.16.0"), ("LlamaForCausalLM",), directory)
        ours.append("pooling" if not found else "generate")
    assert ours == said[1] == ["pooling", "pooling", "generate", "generate"]
