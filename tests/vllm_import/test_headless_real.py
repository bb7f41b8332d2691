"""Opt-in (`make test-vllm`): what patchkit reads as a headless launch (LaunchCommand.headless) is
what the real `vllm serve` runs headless: its own parser, then ServeSubcommand.cmd with run_headless,
run_multi_api_server and the single server replaced by recorders; and --headless with a count vLLM
refuses is refused by both. vLLM's validation, asked of a headless launch, builds the engine config
as run_headless does and leaves the API server's --middleware alone."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from launch_fixtures import DATA_PARALLEL_CASES
from vllm_overlay import TINY_LLAMA, ask_vllm, preflight_findings

from patchkit.base.errors import BadInput
from patchkit.launch.command import parse

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")
VLLM_VERSION = os.environ.get("VLLM_VERSION", "0.16.0")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

ASK_SERVE = textwrap.dedent("""\
    import json, sys
    import vllm
    from patchkit._target.engine_config import _force_cpu_platform_when_none, _parsed
    _force_cpu_platform_when_none()
    import vllm.entrypoints.cli.serve as serve
    from vllm.engine.arg_utils import AsyncEngineArgs

    def ran(arguments):  # which of serve's ways `vllm serve` takes, or what it raises first
        said = []
        serve.run_headless = lambda args: said.append("headless")
        serve.run_multi_api_server = lambda args: said.append("multi")
        serve.run_server = lambda args, **kw: None
        serve.uvloop.run = lambda coroutine: said.append("server")
        try:
            args = _parsed(AsyncEngineArgs, {"arguments": arguments, "serve": True})
            [command] = [c for c in serve.cmd_init() if c.name == "serve"]
            command.cmd(args)
        except Exception as exc:
            return f"{type(exc).__name__}: {exc}"
        return said[0] if said else None

    print(json.dumps([ran(arguments) for arguments in json.loads(sys.argv[1])]))
""")


def test_a_headless_launch_is_what_vllm_serve_runs_headless(tmp_path):
    (tmp_path / "headless.yaml").write_text("headless: true\n")
    (tmp_path / "count.yaml").write_text("api-server-count: 0\n")
    cases = [
        ["--headless"], ["--api-server-count", "0"], ["-asc", "0"], ["--api-server-count=0"], ["-asc", "-1"],
        ["--headless", "-asc", "0"], ["--headless", "-asc", "1"], ["--headless", "--api-server-count=2"], [],
        ["-asc", "1"], ["-asc", "2"], ["--config", str(tmp_path / "headless.yaml")],
        ["--config", str(tmp_path / "count.yaml")], ["--config", str(tmp_path / "headless.yaml"), "-asc", "3"],
        *(words for words, _ in DATA_PARALLEL_CASES),
    ]  # fmt: skip
    vllm_said = ask_vllm(ASK_SERVE, json.dumps([["m", *case] for case in cases]))
    assert isinstance(vllm_said, list)
    disagreements = []
    for case, said in zip(cases, vllm_said, strict=True):
        try:
            ours = "headless" if parse(["vllm", "serve", "m", *case], VLLM_VERSION).headless else "serves"
        except BadInput:
            ours = "refused"
        theirs = "refused" if str(said).startswith("ValueError") else "headless" if said == "headless" else "serves"
        disagreements += [(case, said)] if ours != theirs else []
    assert disagreements == []
    assert vllm_said.count("headless") >= 12 and sum(str(s).startswith("ValueError") for s in vllm_said) >= 3


def validation(tmp_path: Path, *options: str) -> dict:
    """The vllm-validation finding of a preflight, vLLM asked, of a small Llama launch with `options`."""
    model = tmp_path / "llama"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(TINY_LLAMA))
    (model / "model.safetensors").write_bytes(b"")
    vllm = str(Path(str(VLLM_PYTHON)).with_name("vllm"))
    launch = [vllm, "serve", str(model), "--skip-tokenizer-init", *options]
    [found] = [f for f in preflight_findings(*launch, static=False) if f["check"] == "vllm-validation"]
    return found


def test_vllms_validation_of_a_headless_node_imports_no_middleware(tmp_path):
    served = validation(tmp_path, "--middleware", "corp_gone.mw.Good")
    assert served["result"] == "fail" and "corp_gone.mw does not import" in served["message"], served
    headless = validation(tmp_path, "--headless", "--middleware", "corp_gone.mw.Good")
    assert headless["result"] != "fail", headless
