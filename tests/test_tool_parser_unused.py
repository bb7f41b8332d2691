"""A --tool-call-parser without --enable-auto-tool-choice: vLLM builds no tool parser then (0.16.0's
ParserManager.get_tool_parser returns None unless enable_auto_tools; every release 0.11.0-0.34.0
builds it only so), so the tool-call set that patches that parser is not needed by the launch:
preflight and run say the parser is unused in a note and neither fails nor refuses for the set.
With --enable-auto-tool-choice the set is needed, as before. On vLLM 0.16.0's stock files (fetched)."""

from __future__ import annotations

import json
import os

import pytest
from helpers import lay_out_release, run_cli, run_cli_read_only
from launch_fixtures import REGISTRY, write_model

from patchkit.releases.files import files_for

pytestmark = pytest.mark.release

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "vocab_size": 32000}
TOOL_PARSERS = "vllm/tool_parsers/__init__.py"


@pytest.mark.parametrize(
    ("parser", "set_name"), [("kimi_k2", "kimi-k2-tool-calls"), ("deepseek_v3", "deepseek-tool-calls")]
)
def test_a_tool_call_parser_without_auto_tool_choice_needs_no_set(tmp_path, parser, set_name):
    site = tmp_path / "site"
    lay_out_release("0.16.0", sorted({*files_for("0.16.0"), REGISTRY, TOOL_PARSERS}), site)
    model = write_model(tmp_path / "llama", LLAMA)
    launch = ["vllm", "serve", str(model), "--tool-call-parser", parser]

    done = run_cli_read_only("preflight", "--target", site, "--no-import", "--", *launch)
    assert done.returncode == 0, done.stdout + done.stderr
    said = " ".join(done.stderr.split())
    assert f"--tool-call-parser {parser} is unused: without --enable-auto-tool-choice" in said, said
    assert "not used by this launch: " in said and set_name in said, said

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "vllm").write_text(f"#!/bin/sh\ntouch {tmp_path / 'launched'}\n")
    (bin_dir / "vllm").chmod(0o755)
    env = {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = run_cli("run", "--target", site, "--", *launch, env=env)
    assert done.returncode == 0 and (tmp_path / "launched").exists(), done.stdout + done.stderr

    # with auto tool choice vLLM builds the parser: the set is needed, not applied on the stock files
    done = run_cli_read_only(
        "preflight",
        "--target",
        site,
        "--no-import",
        "--format",
        "json",
        "--",
        *launch[:3],
        "--enable-auto-tool-choice",
        *launch[3:],
    )
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [f for f in json.loads(done.stdout)["findings"] if not f["ok"]]
    assert [f["check"] for f in failed] == ["tree-state"] and set_name in failed[0]["message"], failed
