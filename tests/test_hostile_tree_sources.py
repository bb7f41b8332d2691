"""A tree file the launch rules parse (the model registry, the speculative config, the V1 runner's
micro-batch wrapper, the attention selector) written so no Python parses it (nested past the parser's
depth: RecursionError or MemoryError, not a SyntaxError) is a file the rules cannot read, never exit 70."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_in_process
from launch_fixtures import DEEPSEEK_V3, DRAFTER, applied, serve, write_eagle3_setup, write_model

NESTED = {
    "unary": "x = " + "-" * 100_000 + "1\n",  # MemoryError in the parser
    "attributes": "x = a" + ".b" * 100_000 + "\n",  # RecursionError building the tree
}
FILES = [
    "vllm/model_executor/models/registry.py",
    "vllm/config/speculative.py",
    "vllm/v1/worker/gpu_ubatch_wrapper.py",
    "vllm/v1/attention/selector.py",
]
DBO = ("-dp", "8", "--enable-expert-parallel", "--all2all-backend", "deepep_low_latency", "--enable-dbo")


@pytest.mark.parametrize("nested", NESTED, ids=list(NESTED))
@pytest.mark.parametrize("path", FILES)
def test_a_tree_file_no_python_parses_is_not_read_and_no_crash(tmp_path, path, nested):
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library)
    (tree / path).parent.mkdir(parents=True, exist_ok=True)
    (tree / path).write_text(NESTED[nested])
    target = write_model(tmp_path / "tgt", {**DEEPSEEK_V3, "kv_lora_rank": 512, "n_routed_experts": 256})
    command = [*serve(target, write_model(tmp_path / "dr", DRAFTER)), *DBO, "--attention-backend", "TRITON_MLA"]
    done = run_cli_in_process(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *command
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert json.loads(done.stdout)["findings"], done.stdout
