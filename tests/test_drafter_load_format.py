"""The drafter's weights are judged with the load format vLLM loads the drafter with. On 0.17 the V1
EagleProposer hands the speculative config's draft_load_config to its loader in place of the launch's
(eagle.py's _get_model: load_config=self.speculative_config.draft_load_config; a draft_load_config
without load_format is LoadConfig's default, auto); DraftModelProposer and the V2 runner's speculator
load with the launch's. preflight judged the drafter with the launch's --load-format: a drafter without
weights passed under --load-format dummy that vLLM loads for real, and failed where vLLM loads it dummy."""

from __future__ import annotations

import json

import pytest
from helpers import run_cli_in_process, run_cli_judged
from launch_fixtures import (
    DEEPSEEK_V3,
    DRAFTER,
    EAGLE,
    EAGLE_PATCHED,
    SPEC,
    WEIGHTS,
    serve,
    write_eagle3_setup,
    write_model,
)

# the 0.17 proposer's _get_model, as the tree holds it (abridged)
OWN_LOAD = "\n# get_model(model_config=..., load_config=self.speculative_config.draft_load_config)\n"


@pytest.fixture
def trees(tmp_path):
    """(tree whose EagleProposer loads the drafter with draft_load_config, tree whose does not, library)."""
    made = {}
    for name, patched in (("own", EAGLE_PATCHED + OWN_LOAD), ("launch", EAGLE_PATCHED)):
        tree, library = write_eagle3_setup(tmp_path / name, "0.17.0", patched={EAGLE: patched})
        assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
        made[name] = (tree, library)
    return made


def drafter_models_findings(tmp_path, setup, spec: dict, *options: str, env=()) -> list[dict]:
    """The models findings on a drafter directory that holds no weight file."""
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", DRAFTER)
    (drafter / WEIGHTS).unlink()
    command = serve(target, drafter, *options)
    given = json.loads(command[command.index("--speculative-config") + 1])
    command[command.index("--speculative-config") + 1] = json.dumps({**given, **spec})
    done = run_cli_in_process(
        "preflight", "--target", setup[0], "--patches", setup[1], "--format", "json", "--no-import", "--",
        "env", *env, *command,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    found = json.loads(done.stdout)["findings"]
    return [f for f in found if f["check"] == "models" and f"drafter '{drafter}'" in f["message"]]


@pytest.mark.parametrize("own", [{"load_format": "auto"}, {}, {"load_format": "safetensors"}])
def test_a_drafter_vllm_loads_for_real_under_a_dummy_launch_is_judged(tmp_path, trees, own):
    found = drafter_models_findings(tmp_path, trees["own"], {"draft_load_config": own}, "--load-format", "dummy")
    assert [f["result"] for f in found] == ["fail"], found
    assert "no weight file vLLM loads" in found[0]["message"], found


def test_a_drafter_vllm_loads_dummy_is_not_failed_for_its_files(tmp_path, trees):
    spec = {"draft_load_config": {"load_format": "dummy"}}
    assert drafter_models_findings(tmp_path, trees["own"], spec) == []


@pytest.mark.parametrize(
    ("tree", "spec", "env"),
    [
        ("launch", {"draft_load_config": {"load_format": "auto"}}, ()),  # a proposer that reads none
        ("own", {"draft_load_config": {"load_format": "auto"}}, ("VLLM_USE_V2_MODEL_RUNNER=1",)),  # V2's speculator
        ("own", {"draft_load_config": {"load_format": "auto"}, "method": "draft_model"}, ()),  # DraftModelProposer
        ("own", {}, ()),
    ],
)
def test_elsewhere_the_drafter_loads_with_the_launchs_format(tmp_path, trees, tree, spec, env):
    assert drafter_models_findings(tmp_path, trees[tree], spec, "--load-format", "dummy", env=env) == []
    fails = drafter_models_findings(tmp_path / "auto", trees[tree], spec, env=env)
    assert [f["result"] for f in fails] == ["fail"], fails


def test_the_drafters_own_loaders_formats_are_said_not_judged(tmp_path, trees):
    for own in ("sharded_state", "tensorizer"):
        spec = {"draft_load_config": {"load_format": own}}
        found = drafter_models_findings(tmp_path / own, trees["own"], spec, "--load-format", "dummy")
        assert [f["result"] for f in found] == ["cannot judge"], found
        assert f"what its load format {own} loads" in found[0]["message"], found


# SpeculativeConfig.hf_config_override as 0.17.0 gives DeepSeek-V3's (abridged): what makes vLLM infer mtp
OVERRIDE = """
class SpeculativeConfig:
    @staticmethod
    def hf_config_override(hf_config):
        if hf_config.model_type in ("deepseek_v3", "deepseek_v32"):
            hf_config.model_type = "deepseek_mtp"
        if hf_config.model_type == "deepseek_mtp":
            n_predict = getattr(hf_config, "num_nextn_predict_layers", None)
            hf_config.update({"n_predict": n_predict, "architectures": ["DeepSeekMTPModel"]})
        return hf_config
"""


def test_an_mtp_drafter_vllm_infers_loads_with_its_draft_load_config_as_one_named_so(tmp_path, trees):
    """A DeepSeek-V3-type checkpoint named as the drafter with no method is served as mtp by the
    EagleProposer, which loads it with draft_load_config: judged as with "method": "mtp" written."""
    tree, library = trees["own"]
    with (tree / SPEC).open("a") as spec:
        spec.write(OVERRIDE)
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "dm", {**DEEPSEEK_V3, "num_nextn_predict_layers": 1})
    (drafter / WEIGHTS).unlink()
    found = {}
    for method, own in (("mtp", "dummy"), (None, "dummy"), ("mtp", "auto")):
        given = {"method": method} if method else {}
        spec = {"model": str(drafter), "num_speculative_tokens": 1, "draft_load_config": {"load_format": own}}
        done = run_cli_in_process(
            "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--",
            "vllm", "serve", str(target), "--speculative-config", json.dumps({**spec, **given}),
        )  # fmt: skip
        assert done.returncode in (0, 1), done.stdout + done.stderr
        found[method, own] = [f for f in json.loads(done.stdout)["findings"] if f"'{drafter}'" in f["message"]]
    assert [f["result"] for f in found["mtp", "auto"]] == ["fail"], found  # loaded for real: no weight file
    assert found["mtp", "dummy"] == found[None, "dummy"] == [], found  # loaded dummy: no file asked of it
