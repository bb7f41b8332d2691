"""review37 L-j: a VLLM_PP_LAYER_PARTITION vLLM refuses never passes drafter-aux-layers.

vLLM's get_pp_indices reads the variable whenever it is set, as it builds the target's layers (-pp 1
too): a part int() does not read, a count of parts other than -pp, or a sum other than the layers
raise ValueError there. drafter-aux-layers said "pass" (the no-pipeline verdict) for each. It now
fails with vLLM's own words where the tree's vllm/distributed/utils.py shows the rule, and cannot
judge where it does not. The real get_pp_indices's words: tests/vllm_import/test_preflight_real.py.
"""

from __future__ import annotations

import json
import textwrap

import pytest
from helpers import run_cli_in_process
from launch_fixtures import DEEPSEEK_V3, DRAFTER, applied, serve, write_eagle3_setup, write_model

PP_INDICES = "vllm/distributed/utils.py"
# the part of 0.16.0's get_pp_indices that reads the variable (the rule is the code patchkit mirrors)
UTILS_PY = textwrap.dedent("""\
    def get_pp_indices(num_hidden_layers, pp_rank, pp_size):
        partition_list_str = envs.VLLM_PP_LAYER_PARTITION
        if partition_list_str is not None:
            partitions = [int(layer) for layer in partition_list_str.split(",")]
    """)


@pytest.fixture
def launch(tmp_path):
    """(tree, library, target, drafter): the set applied, a 61-layer target, a drafter of 3 of its layers."""
    tree, library = write_eagle3_setup(tmp_path)
    applied(tree, library)
    (tree / PP_INDICES).parent.mkdir(parents=True, exist_ok=True)
    (tree / PP_INDICES).write_text(UTILS_PY)
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "eagle_aux_hidden_state_layer_ids": [40, 50, 60]})
    return tree, library, target, drafter


def aux_layers(launch, partition: str, *options: str) -> dict:
    tree, library, target, drafter = launch
    command = ["env", f"VLLM_PP_LAYER_PARTITION={partition}", *serve(target, drafter, *options)]
    done = run_cli_in_process(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json", "--", *command
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return next(f for f in json.loads(done.stdout)["findings"] if f["check"] == "drafter-aux-layers")


@pytest.mark.parametrize(
    ("partition", "stages", "why"),
    [
        ("abc", "2", "Invalid partition string: abc"),
        ("", "2", "Invalid partition string: "),
        ("30,30", "2", "sum(partitions)=60 does not match num_hidden_layers=61."),
        ("61", "2", "len(partitions)=1 does not match pp_size=2."),
        ("30,31", "1", "len(partitions)=2 does not match pp_size=1."),  # read without -pp too
    ],
)
def test_a_partition_vllm_refuses_fails_with_its_words(launch, partition, stages, why):
    found = aux_layers(launch, partition, "-pp", stages)
    assert found["result"] == "fail", found
    assert found["message"] == (
        f"VLLM_PP_LAYER_PARTITION={partition!r}: vLLM's get_pp_indices refuses it as it builds the target ({why})"
    )
    assert found["fix"] == (
        f"give VLLM_PP_LAYER_PARTITION {stages} whole layer count(s), one a pipeline stage, summing to 61, or unset it"
    )


def test_a_partition_vllm_takes_is_judged_as_before(launch):
    assert aux_layers(launch, " 1, 6_0", "-pp", "2")["result"] == "pass"  # int() reads both: the last stage is 1-60
    assert aux_layers(launch, "51,10", "-pp", "2")["result"] == "fail"  # 51-60 holds two of 40, 50, 60


def test_a_tree_that_does_not_show_the_rule_cannot_judge(launch):
    (launch[0] / PP_INDICES).write_text("def get_pp_indices(num_hidden_layers, pp_rank, pp_size):\n    return 0, 1\n")
    found = aux_layers(launch, "30,30", "-pp", "2")
    assert found["result"] == "cannot judge", found
    assert "the tree's vllm/distributed/utils.py does not show how vLLM reads it" in found["message"]
