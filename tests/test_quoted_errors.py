"""What patchkit quotes of another program's error text is its head, where the problem is named,
and its end, the middle left out: vLLM's pydantic refusals run to thousands of characters (the
architecture list), and their tail alone names nothing."""

from __future__ import annotations

import json
import os
import sys

import pytest
from helpers import run_cli_judged
from importable_vllm import REFUSING_OPTIONS, engine_args, write_engine_args
from launch_fixtures import DEEPSEEK_V3, DRAFTER, serve, write_eagle3_setup, write_model

from patchkit.tree.target import WorkerFailed, ask_python, run_worker

# a stand-in vLLM engine argument class whose config is a pydantic dataclass refusing the drafter's
# architecture as 0.16.0's SpeculativeConfig does: its message names the architecture, then lists
# every supported one (about 20,000 characters)
PYDANTIC_REFUSAL = engine_args(
    '"--model"',
    '"--speculative-config", type=json.loads, default=None',
    head="""
        import json

        from pydantic import model_validator
        from pydantic.dataclasses import dataclass

        SUPPORTED = [f"SupportedArchitecture{i}ForCausalLM" for i in range(700)]


        @dataclass
        class SpeculativeConfig:
            method: str

            @model_validator(mode="after")
            def _verify(self):
                raise ValueError(
                    "Model architectures ['Eagle3NoSuchDrafterForCausalLM'] are not supported for now. "
                    f"Supported architectures: dict_keys({SUPPORTED})"
                )
    """,
    config='SpeculativeConfig(method=self.values["speculative_config"]["method"])',
)


def validation_finding(tmp_path, tree, library, fake) -> dict:
    """The vllm-validation finding of a full preflight of an EAGLE-3 launch, vLLM served by the stand-in `fake`."""
    launch = serve(write_model(tmp_path / "target", DEEPSEEK_V3), write_model(tmp_path / "drafter", DRAFTER))
    done = run_cli_judged(
        "preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json",
        "--", *launch, env={"PYTHONPATH": str(fake)},
    )  # fmt: skip
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "vllm-validation"]
    return found


def test_a_long_pydantic_refusal_is_quoted_by_its_head_not_its_tail(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    fake = write_engine_args(tree, PYDANTIC_REFUSAL)
    found = validation_finding(tmp_path, tree, library, fake)
    said = found["message"]
    assert not found["ok"] and "['Eagle3NoSuchDrafterForCausalLM'] are not supported for now" in said, said
    assert "SupportedArchitecture699ForCausalLM" in said and "characters left out" in said, said  # its end too
    assert len(said) < 800 and "For further information" not in said, said


def interpreter(tmp_path, body: str):
    """A stand-in interpreter: a shell script doing `body` whatever it is asked to run."""
    script = tmp_path / "python3"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return str(script)


def test_a_childs_long_error_output_is_quoted_by_its_head_and_its_end(tmp_path):
    noise = " ".join(f"detail{i}" for i in range(400))
    python = interpreter(tmp_path, f'echo "FATAL: libcuda.so.1 cannot be opened {noise} (the end)" >&2; exit 3')
    with pytest.raises(WorkerFailed) as failed:
        run_worker(python, "compile_sources", {"sources": {}}, timeout=60, in_process=False)
    said = failed.value.message
    assert "FATAL: libcuda.so.1 cannot be opened" in said and "(the end)" in said, said
    assert "characters left out" in said and len(said) < 600, said


def test_a_child_the_kernel_killed_is_said_killed_with_free_memory_as_the_fix(tmp_path):
    python = interpreter(tmp_path, "kill -9 $$")
    with pytest.raises(WorkerFailed) as failed:
        run_worker(python, "compile_sources", {"sources": {}}, timeout=60, in_process=False, doing=" (a check)")
    assert (
        failed.value.message
        == f"{python} (a check) was killed (SIGKILL: the kernel's out-of-memory killer, or another process)"
    )
    assert failed.value.hint == "free memory, then run it again"
    with pytest.raises(WorkerFailed) as asked:
        ask_python(python, [], "print(1)", env=dict(os.environ), cwd=str(tmp_path))
    assert "was killed (SIGKILL" in asked.value.message and asked.value.hint == "free memory, then run it again"


def test_a_vllm_validation_killed_by_sigkill_says_so_and_skipping_it_is_no_fix(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    killed = engine_args(*REFUSING_OPTIONS, head="import json\nimport os", config="os.kill(os.getpid(), 9)")
    fake = write_engine_args(tree, killed)  # as the out-of-memory killer does
    found = validation_finding(tmp_path, tree, library, fake)
    assert not found["ok"] and "was killed (SIGKILL: the kernel's out-of-memory killer" in found["message"], found
    assert found["fix"] == "free memory, then run it again", found
