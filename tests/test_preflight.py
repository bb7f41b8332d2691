"""`patchkit preflight`: a vLLM launch command held against the installed vLLM, every fault in one run
(issue 11). Small vLLM-shaped trees and config directories the tests write (tests/launch_fixtures.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from cli_server import SESSION_ENV, start_up_environment
from helpers import (
    assert_clean_failure,
    on_a_terminal,
    run_cli,
    run_cli_in_process,
    run_cli_judged,
    run_cli_read_only,
    run_cli_writing,
    stale_pyc_under_prefix,
    terminal_screen,
    warm_pycache_prefix,
)
from importable_vllm import engine_args, make_importable, venv_importing, write_engine_args, write_refusing_engine_args
from launch_fixtures import (
    DEEPSEEK,
    DEEPSEEK_PATCHED,
    DEEPSEEK_V3,
    DRAFTER,
    EMPTY_SAFETENSORS,
    KIMI_DRAFTER,
    KIMI_K25,
    REGISTRY,
    REGISTRY_PY,
    applied,
    apply_fix,
    eagle3_tensors,
    findings,
    serve,
    weighted_model,
    write_eagle3_setup,
    write_model,
    write_weights,
)

from patchkit._target.engine_config import DATA_BOUND
from patchkit.base.errors import BadInput
from patchkit.launch import validation
from patchkit.launch.command import parse
from patchkit.launch.models import ModelConfig

STOCK_FAULTS_KIMI = {"tree-state", "whitelist", "supports-eagle3", "image-token"}
STOCK_FAULTS_DEEPSEEK = {"tree-state", "whitelist", "supports-eagle3"}
DRAFTER_CHECKS = {"drafter-architecture", "drafter-hidden-size", "drafter-aux-layers", "drafter-vocabulary"}

EAGLE3 = "vllm/model_executor/models/llama_eagle3.py"
LLAMA = "vllm/model_executor/models/llama.py"


@pytest.fixture
def setup(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    models = {
        "kimi": write_model(tmp_path / "models" / "kimi-k25", KIMI_K25),
        "deepseek": write_model(tmp_path / "models" / "deepseek-v3", DEEPSEEK_V3),
        "drafter": write_model(tmp_path / "models" / "eagle3-drafter", DRAFTER),
        "kimi-drafter": write_model(tmp_path / "models" / "kimi-eagle3", KIMI_DRAFTER),
    }
    return tree, library, models


def preflight(tree: Path, library: Path, *command: str, fmt: str = "json", extra=(), env=None):
    """preflight --no-import (read-only; its findings, output and exit code are what these tests judge) in this
    process (CONTRIBUTING), but for an environment whose start-up differs from the session's: a process then."""
    own = start_up_environment({**os.environ, **(env or {})}) != start_up_environment(SESSION_ENV)
    done = (run_cli if own else run_cli_in_process)(
        "preflight",
        "--target",
        tree,
        "--patches",
        library,
        "--format",
        fmt,
        *extra,
        "--no-import",
        "--",
        *command,
        env=env,
    )
    return done


def failed(done) -> set[str]:
    return {name for name, f in findings(done).items() if not f["ok"]}


def drafter_verdict(done, *, fails: bool) -> dict | None:
    """A drafter test's verdict: None when the launch passes every check (`fails` false), else its
    drafter-architecture finding, the one check failed (exit 1, said cleanly)."""
    if not fails:
        assert done.returncode == 0 and failed(done) == set(), done.stdout
        return None
    assert_clean_failure(done, 1)
    assert failed(done) == {"drafter-architecture"}, done.stdout
    return findings(done)["drafter-architecture"]


@pytest.mark.parametrize("version", ["0.16.0", "0.17.0"])
@pytest.mark.parametrize(("model", "faults"), [("kimi", STOCK_FAULTS_KIMI), ("deepseek", STOCK_FAULTS_DEEPSEEK)])
def test_stock_tree_every_fault_in_one_run_then_passes_after_apply(tmp_path, version, model, faults):
    tree, library = write_eagle3_setup(tmp_path, version)
    target = write_model(tmp_path / "target", KIMI_K25 if model == "kimi" else DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", KIMI_DRAFTER if model == "kimi" else DRAFTER)

    done = preflight(tree, library, *serve(target, drafter))
    assert_clean_failure(done, 1)
    assert failed(done) == faults
    assert all(findings(done)[name]["fix"] == apply_fix(tree, library) for name in faults)
    assert json.loads(done.stdout)["ok"] is False
    assert set(findings(done)) >= DRAFTER_CHECKS

    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    done = preflight(tree, library, *serve(target, drafter))
    assert done.returncode == 0, done.stdout + done.stderr
    assert failed(done) == set()
    assert json.loads(done.stdout)["ok"] is True


@pytest.mark.parametrize(
    ("change", "check"),
    [
        ({"architectures": ["MixtralForCausalLM"]}, "drafter-architecture"),
        ({"target_hidden_size": 5120}, "drafter-hidden-size"),
        ({"eagle_aux_hidden_state_layer_ids": [2, 30, 61]}, "drafter-aux-layers"),
        ({"draft_vocab_size": 200000}, "drafter-vocabulary"),
    ],
)
def test_each_drafter_mismatch_is_named(setup, tmp_path, change, check):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(tmp_path / "bad-drafter", {**DRAFTER, **change})
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    assert_clean_failure(done, 1)
    assert failed(done) == {check}
    assert findings(done)[check]["fix"]


@pytest.mark.parametrize(("hidden", "target_hidden", "fails"), [(4096, 7168, True), (7168, 4096, False)])
def test_a_drafter_without_aux_hidden_states_is_held_to_its_own_hidden_size(
    setup, tmp_path, hidden, target_hidden, fails
):
    """review42a R9: with eagle_config's use_aux_hidden_state off llama_eagle3.py builds no fc and takes the
    target's hidden states as they are: its own hidden_size must be the target's, not target_hidden_size."""
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    config = {"hidden_size": hidden, "target_hidden_size": target_hidden, "eagle_config": {"use_aux_hidden_state": 0}}
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, **config})
    found = findings(preflight(tree, library, *serve(models["deepseek"], drafter)))["drafter-hidden-size"]
    assert found["ok"] is not fails and found["message"].startswith(f"drafter expects hidden size {hidden} "), found
    assert "use_aux_hidden_state is off" in found["message"], found


# the patched forward as 0.26+'s deepseek_v2.py has it: after its loop, the last layer's output for the id
# num_hidden_layers (`self.end_layer`)
FINAL_OUTPUT_FORWARD = DEEPSEEK_PATCHED.replace(
    "        return [x for _ in self.aux_hidden_state_layers]",
    "        aux = [x for idx in range(self.end_layer) if idx in self.aux_hidden_state_layers]\n"
    "        if self.end_layer in self.aux_hidden_state_layers:\n"
    "            aux.append(x)\n"
    "        return aux",
)


@pytest.mark.parametrize(
    ("forward", "layers", "says"),
    [
        (FINAL_OUTPUT_FORWARD, [1, 29, 61], "are within the target's 61 layers (61: the last layer's output, as"),
        (FINAL_OUTPUT_FORWARD, [1, 29, 62], "[62] above the target's 61 layers (61: the last layer's output"),
        (FINAL_OUTPUT_FORWARD, [1, 29, 60], "are below the target's 61 layers"),
        (DEEPSEEK_PATCHED, [1, 29, 61], "[61] not below the target's 61 layers"),
    ],
)
def test_an_aux_layer_id_of_the_last_layers_output_is_judged_by_the_trees_forward(tmp_path, forward, layers, says):
    """0.26+'s deepseek_v2.py forward hands the drafter the last layer's output for the id num_hidden_layers;
    a forward without that branch hands none for it (the drafter's fc then lacks a state)."""
    tree, library = write_eagle3_setup(tmp_path, patched={DEEPSEEK: forward})
    applied(tree, library)
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "eagle_aux_hidden_state_layer_ids": layers})
    done = preflight(tree, library, *serve(target, drafter))
    found = findings(done)["drafter-aux-layers"]
    assert says in found["message"], found
    assert found["ok"] is ("above" not in says and "not below" not in says), found
    assert done.returncode == (0 if found["ok"] else 1), done.stdout


# 0.22-0.30's V1 model runner: it reads eagle_config's layer ids where the top-level list is empty
V1_RUNNER_READING_NESTED = """
def _get_eagle3_aux_layers_from_config(self):
    layer_ids = getattr(hf_config, "eagle_aux_hidden_state_layer_ids", None)
    if not layer_ids:
        eagle_config = getattr(hf_config, "eagle_config", None)
        if eagle_config and isinstance(eagle_config, dict):
            layer_ids = eagle_config.get("eagle_aux_hidden_state_layer_ids")
"""


@pytest.mark.parametrize("runner", [V1_RUNNER_READING_NESTED, None])
def test_nested_aux_layer_ids_cannot_be_judged_where_one_of_the_trees_runners_reads_them(setup, tmp_path, runner):
    """0.22-0.30: the V1 runner reads eagle_config's ids, the V2 runner does not, and vLLM picks the runner by
    the model and its features: not "vLLM never reads" there (a false fail). Where none reads them vLLM
    serves the launch on the target's default layers (review41a F8): a pass, said as a note with the fix."""
    tree, library, models = setup
    applied(tree, library, {"vllm/v1/worker/gpu_model_runner.py": runner})
    nested = {
        "eagle_aux_hidden_state_layer_ids": None,
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]},
    }
    drafter = write_model(tmp_path / "drafter", _changed(DRAFTER, nested))
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    found = findings(done)["drafter-aux-layers"]
    if runner is None:
        assert done.returncode == 0 and found["result"] == "pass", found
        assert found["message"] == (
            "vLLM ignores the drafter's eagle_config.eagle_aux_hidden_state_layer_ids [1, 29, 57] and uses the "
            "target's layers (2, 30, 58); to have it use the drafter's, put that list at the top level of its "
            "config.json as eagle_aux_hidden_state_layer_ids"
        )
        assert found["message"] in json.loads(done.stdout)["notes"], done.stdout
        text = preflight(tree, library, *serve(models["deepseek"], drafter), fmt="text")
        said = " ".join((text.stdout + text.stderr).split())
        assert text.returncode == 0 and f"note: {found['message']}" in said, said
        return
    assert (
        found["fix"]
        == "give the layers the drafter was trained on as a top-level eagle_aux_hidden_state_layer_ids list"
    )
    assert done.returncode == 0 and found["result"] == "cannot judge", found
    assert found["message"].startswith("cannot judge: this vLLM's V1 model runner reads the drafter's eagle_config."), (
        found
    )


def _changed(config: dict, change: dict) -> dict:
    return {k: v for k, v in {**config, **change}.items() if v is not None}  # None: the key dropped


@pytest.mark.parametrize(
    ("drafter_change", "target_change", "check"),
    [
        ({"hidden_size": None, "target_hidden_size": None}, {"hidden_size": None}, "drafter-hidden-size"),
        ({"target_hidden_size": True}, {"hidden_size": True}, "drafter-hidden-size"),  # True == True
        ({"target_hidden_size": "7168"}, {"hidden_size": "7168"}, "drafter-hidden-size"),
        ({"vocab_size": None, "draft_vocab_size": None}, {"vocab_size": None}, "drafter-vocabulary"),
        (
            {"eagle_aux_hidden_state_layer_ids": [True]},
            {"num_hidden_layers": True},
            "drafter-aux-layers",
        ),
    ],
)
def test_a_drafter_check_that_cannot_judge_says_so_and_does_not_pass(
    setup, tmp_path, drafter_change, target_change, check
):
    tree, library, _ = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(tmp_path / "odd-drafter", _changed(DRAFTER, drafter_change))
    target = write_model(tmp_path / "odd-target", _changed(DEEPSEEK_V3, target_change))
    done = preflight(tree, library, *serve(target, drafter))
    assert_clean_failure(done, 1)
    assert check in failed(done)
    assert "cannot judge" in findings(done)[check]["message"]
    assert findings(done)[check]["fix"] and "trained for this target" not in findings(done)[check]["fix"]


def test_text_output_names_each_fault_and_its_fix(setup):
    tree, library, models = setup
    done = preflight(tree, library, *serve(models["kimi"], models["kimi-drafter"]), fmt="text")
    assert_clean_failure(done, 1)
    for name in STOCK_FAULTS_KIMI:
        assert name in done.stdout
    assert apply_fix(tree, library) in " ".join(done.stdout.split())


def test_junit_has_a_testcase_per_finding(setup):
    import xml.etree.ElementTree as ET

    tree, library, models = setup
    done = preflight(tree, library, *serve(models["kimi"], models["kimi-drafter"]), fmt="junit")
    assert done.returncode == 1
    cases = ET.fromstring(done.stdout).findall(".//testcase")
    assert {c.get("name") for c in cases} == STOCK_FAULTS_KIMI | DRAFTER_CHECKS | {"models"}  # weights judged
    assert {c.get("name") for c in cases if c.find("failure") is not None} == STOCK_FAULTS_KIMI


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (["vllm", "serve", "m", "--speculative-config", '{"method": "eagle3", "model": "d",}'], "not valid JSON"),
        (["vllm", "serve", "m", "--speculative-config", '["eagle3"]'], "must be a JSON object"),
        (["vllm", "serve", "m", "-sc", "{}"], "unrecognized arguments: -sc"),  # 0.16.0 has no -sc
        (["vllm", "bench", "latency"], "not a vLLM launch"),
        (["python3", "-c", "print(1)"], "not a vLLM launch"),
        (["torchrun", "serve.py"], "not a vLLM launch"),
        (["vllm", "serve", "--port", "8001"], "names no model"),
        (["env", "HF_HOME=/nowhere"], "names no program"),
    ],
)
def test_a_command_that_cannot_be_read_is_exit_2(setup, command, says):
    tree, library, _ = setup
    done = preflight(tree, library, *command)
    assert_clean_failure(done, 2)
    assert says in done.stderr


def test_a_missing_model_is_exit_4_naming_where_it_looked(setup, tmp_path):
    tree, library, models = setup
    cache = tmp_path / "hf-home"
    done = preflight(tree, library, "env", f"HF_HOME={cache}", *serve("acme/absent-model", models["drafter"]))
    assert_clean_failure(done, 4)
    assert "acme/absent-model" in done.stderr
    assert f"the Hugging Face cache {cache / 'hub'}/" in done.stderr  # HF_HOME honoured, the path whole


def test_a_missing_drafter_is_exit_4(setup, tmp_path):
    tree, library, models = setup
    done = preflight(tree, library, *serve(models["kimi"], tmp_path / "no-such-drafter"))
    assert_clean_failure(done, 4)
    assert "drafter" in done.stderr and "no-such-drafter" in done.stderr


def write_hub_snapshot(cache: Path, repo: str, revision: str, config: dict) -> None:
    org, name = repo.split("/")
    write_model(cache / f"models--{org}--{name}" / "snapshots" / revision, config)


def test_hub_ids_resolve_offline_from_the_hf_cache_refs_main_first(setup, tmp_path):
    tree, library, _ = setup
    cache = tmp_path / "hub-cache"
    write_hub_snapshot(
        cache,
        "moonlab/kimi-like",
        "aaaa1111",
        {**KIMI_K25, "text_config": {**KIMI_K25["text_config"], "model_type": "llama"}},
    )
    write_hub_snapshot(cache, "moonlab/kimi-like", "ffff9999", KIMI_K25)
    (cache / "models--moonlab--kimi-like" / "refs").mkdir()
    (cache / "models--moonlab--kimi-like" / "refs" / "main").write_text(
        "aaaa1111"
    )  # as huggingface_hub writes it: no newline
    write_hub_snapshot(cache, "drafts/eagle3-small", "0123abcd", KIMI_DRAFTER)
    (cache / "models--drafts--eagle3-small" / "refs").mkdir()
    (cache / "models--drafts--eagle3-small" / "refs" / "main").write_text("0123abcd")
    done = preflight(
        tree, library, *serve("moonlab/kimi-like", "drafts/eagle3-small"), env={"HF_HUB_CACHE": str(cache)}
    )
    assert_clean_failure(done, 1)
    # refs/main names the snapshot whose text model is a llama: the whitelist accepts it
    assert failed(done) == {"tree-state", "supports-eagle3", "image-token"}


def test_dotted_speculative_config_and_yaml_config_are_read(setup, tmp_path):
    tree, library, models = setup
    dotted = ["vllm", "serve", str(models["deepseek"]), "--speculative-config.method", "eagle3"]
    dotted += ["--speculative_config.model", str(models["drafter"]), "--speculative-config.num_speculative_tokens", "2"]
    assert failed(preflight(tree, library, *dotted)) == STOCK_FAULTS_DEEPSEEK

    config = tmp_path / "serve.yaml"
    spec = json.dumps({"method": "eagle3", "model": str(models["kimi-drafter"]), "num_speculative_tokens": 2})
    config.write_text(f"model: {models['kimi']}\ntensor_parallel_size: 2\nspeculative-config: '{spec}'\n")
    command = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--config", str(config)]
    # the PATH's python3 has no vLLM: the launch would not run the tree checked (launch-target)
    assert failed(preflight(tree, library, *command)) == STOCK_FAULTS_KIMI | {"launch-target"}


def test_hf_overrides_apply_to_the_target_config(setup):
    tree, library, models = setup
    overrides = json.dumps({"text_config": {"hidden_size": 4096}})
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    done = preflight(tree, library, *serve(models["kimi"], models["kimi-drafter"], "--hf-overrides", overrides))
    assert failed(done) == {"drafter-hidden-size"}


def test_a_launch_without_eagle3_has_only_the_tree_state(setup):
    tree, library, models = setup
    done = preflight(tree, library, "vllm", "serve", str(models["deepseek"]), "--max-model-len", "4096")
    assert set(findings(done)) == {"tree-state", "models"}  # models: its weights, judged loadable


def test_parse_reads_env_prefix_aliases_and_ignores_unknown_options():
    command = parse(
        ["env", "HF_HOME=/srv/hf", "vllm", "serve", "org/m", "--port", "9000", "-tp=8", "--trust_remote_code"]
    )
    assert command.env == {"HF_HOME": "/srv/hf"}
    assert command.model == "org/m"
    assert command.tensor_parallel_size == 8
    assert command.trust_remote_code
    assert command.engine_args() == ["--model", "org/m", "--port", "9000", "-tp=8", "--trust_remote_code"]
    with pytest.raises(BadInput):
        parse(["vllm", "serve", "m", "-tp", "eight"])


# --- vLLM's own validation, through a stand-in vllm package ---------------------------------------


def test_vllm_validation_not_run_for_a_missing_model_says_why_and_what_to_do(setup, tmp_path):
    # review 6 L5: "cannot judge: not run: … found nowhere", fix "the models' local directories": no sentence
    tree, library, models = setup
    fake = write_refusing_engine_args(tree)  # --python imports the tree checked: vLLM is asked about it (item 2)
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json", "--"]
    done = run_cli(
        *base, *serve("lab/gone-model", models["drafter"]), env={"PYTHONPATH": str(fake), "HF_HUB_OFFLINE": "1"}
    )
    assert_clean_failure(done, 4)
    check = findings(done)["vllm-validation"]
    assert "is not on this machine" in check["message"], check
    assert check["fix"].startswith("put it where the models finding looked"), check


def test_a_target_tree_says_python_is_what_vllm_validation_needs_and_the_missing_model_leads(setup):
    # issue 22 (trial 11, item 2): on a --target tree the missing model was shown as what keeps vLLM's
    # validation from running; --python (which a --target tree never has) surfaced only a run later
    tree, library, models = setup
    base = ["preflight", "--target", tree, "--patches", library]
    command = serve("lab/gone-model", models["drafter"])
    done = run_cli_read_only(*base, "--format", "json", "--", *command, env={"HF_HUB_OFFLINE": "1"})
    assert_clean_failure(done, 4)  # the worst finding's code: a model found nowhere
    order = [(f["check"], f["result"]) for f in json.loads(done.stdout)["findings"]]
    assert order == [("models", "fail"), ("tree-state", "fail"), ("vllm-validation", "cannot judge")], order
    validation = findings(done)["vllm-validation"]
    assert "no interpreter known" in validation["message"], validation
    assert validation["fix"].startswith("give --python PATH"), validation

    text = run_cli_read_only(*base, "--", *command, env={"HF_HUB_OFFLINE": "1"})
    assert_clean_failure(text, 4)
    said = text.stdout + text.stderr
    assert "error:" not in said, said  # the model is said once, as a finding: not again as an error line
    assert said.index("models:") < said.index("tree-state:") < said.index("vllm-validation warning:"), said


def test_vllm_validation_reports_vllms_own_error(setup, tmp_path):
    tree, library, models = setup
    fake = write_refusing_engine_args(tree)  # --python imports the tree checked: vLLM is asked about it (item 2)
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json", "--"]
    done = run_cli_read_only(*base, *serve(models["deepseek"], models["drafter"]), env={"PYTHONPATH": str(fake)})
    assert_clean_failure(done, 1)
    check = findings(done)["vllm-validation"]
    assert not check["ok"] and "Eagle3 is only supported for ['llama', 'qwen'] models" in check["message"]

    plain = ["vllm", "serve", str(models["deepseek"])]
    done = run_cli_read_only(*base, *plain, env={"PYTHONPATH": str(fake)})
    assert findings(done)["vllm-validation"]["ok"]

    # the fake's parser types it int: it refuses what the static reading (0.16.0's human_readable_int) takes
    done = run_cli_read_only(*base, *plain, "--max-model-len", "32k", env={"PYTHONPATH": str(fake)})
    assert_clean_failure(done, 1)
    assert "argument parser refused" in findings(done)["vllm-validation"]["message"]


# transformers' words when a model's directory lacks the remote code its config.json's auto_map names
MISSING_REMOTE_CODE = (
    "OSError: /hf/hub/models--deepseek-ai--DeepSeek-V3/snapshots/abc123 does not appear to have a file named "
    "configuration_deepseek.py. Checkout 'https://huggingface.co/deepseek-ai/DeepSeek-V3/tree/main' for available files."
)


def test_a_model_file_vllm_lacks_gets_its_own_fix_never_the_sets_apply(setup, tmp_path):
    """New-user trial 23, N1: with only config.json cached and --trust-remote-code, vLLM refuses for want
    of the file auto_map names; the fix said was apply's ("fix (all 4 above)"), which never gives it."""
    tree, library, models = setup
    fake = write_refusing_engine_args(tree)  # --python imports the tree checked
    arg_utils = fake / "vllm" / "engine" / "arg_utils.py"
    refusing = f"raise OSError({str(models['deepseek']) + ' ' + MISSING_REMOTE_CODE.split(' ', 2)[2]!r})"
    arg_utils.write_text(arg_utils.read_text().replace('raise ValueError("Eagle3', f"{refusing}  #"))
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json", "--"]
    done = run_cli(
        *base, *serve(models["deepseek"], models["drafter"]), "--trust-remote-code", env={"PYTHONPATH": str(fake)}
    )
    assert_clean_failure(done, 1)
    check = findings(done)["vllm-validation"]
    assert "configuration_deepseek.py" in check["message"], check
    assert "apply" not in check["fix"], check
    assert f"put configuration_deepseek.py into the model's directory {models['deepseek']}" in check["fix"], check
    assert "auto_map" in check["fix"], check

    # a hub id: the file fetched beside config.json, at the launch's --revision
    command = parse(["vllm", "serve", "deepseek-ai/DeepSeek-V3", "--trust-remote-code", "--revision", "r1"])
    refused = validation.refusal(command, MISSING_REMOTE_CODE, "run `patchkit apply`")
    assert "`hf download deepseek-ai/DeepSeek-V3 config.json configuration_deepseek.py --revision r1`" in refused.fix
    assert "apply" not in refused.fix.replace("huggingface_hub", ""), refused
    # another refusal keeps the fix it was given
    other = validation.refusal(
        command, "ValueError: Eagle3 is only supported for ['llama'] models", "run `patchkit apply`"
    )
    assert other.fix == "run `patchkit apply`"


def test_a_python_whose_vllm_is_not_the_target_tree_is_said_and_combining_is_never_promised(setup, tmp_path):
    """New-user trial 14, item 2: the fix said `--target and --python combine` (README: "DIR's files,
    PATH runs it"), but vLLM is asked through PATH about PATH's own vLLM: a stock venv's answer
    was blamed on a patched DIR. Said when PATH's vLLM is not DIR; never promised."""
    tree, library, models = setup
    fake = write_refusing_engine_args(tmp_path / "fake")
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--"]
    done = run_cli_read_only(*base, "vllm", "serve", str(models["deepseek"]), env={"PYTHONPATH": str(fake)})
    said = " ".join(done.stderr.split())
    assert f"note: --python {sys.executable} imports vLLM from {fake / 'vllm'}, not {tree / 'vllm'}" in said, said
    alone = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--", "vllm", "serve", str(models["deepseek"])
    )
    assert "combine" not in alone.stdout + alone.stderr and "--python PATH" in alone.stdout, alone.stdout
    assert "imports vLLM from" not in alone.stderr


def test_vllm_is_not_asked_about_a_target_tree_its_python_does_not_import(setup, tmp_path):
    """New-user trial 14, item 2 (rest): what vLLM answers through --python is about the vLLM that
    interpreter imports; when that is not --target's tree, its validation and supports_eagle3() are
    "cannot judge", saying why, never a verdict on the tree."""
    tree, library, models = setup
    fake = write_refusing_engine_args(tmp_path / "fake")
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json"]
    launch = serve(models["deepseek"], models["drafter"])
    done = run_cli_read_only(*base, "--", *launch, env={"PYTHONPATH": str(fake)})
    found = findings(done)
    why = f"--python {sys.executable} imports vLLM from {fake / 'vllm'}, not from the --target tree {tree / 'vllm'}"
    validation = found["vllm-validation"]
    assert validation["result"] == "cannot judge" and validation["message"] == f"cannot judge: not run: {why}", (
        validation
    )
    there = f"`patchkit apply --python {sys.executable} --patches {library}`"
    assert validation["fix"] == (
        f"the launch runs --python's vLLM: apply to it ({there}), or leave out --python to judge {tree / 'vllm'} alone"
    ), validation
    assert why in found["supports-eagle3"]["message"], found["supports-eagle3"]


def test_a_launch_python_without_vllm_is_told_to_launch_vllms_interpreter(setup):
    """New-user trial 14, item 20: the launch's own `python` had no vLLM, and the fix told a user who
    gave --target to "point patchkit at it with --python ... or --target ...": what fails is the
    launch's interpreter, not patchkit's."""
    tree, library, models = setup
    launch = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(models["deepseek"])]
    done = run_cli_read_only("preflight", "--target", tree, "--patches", library, "--format", "json", "--", *launch)
    check = findings(done)["launch-target"]
    assert not check["ok"] and "vLLM is not installed for" in check["message"], check
    assert check["fix"].startswith("launch with the interpreter of the venv whose vLLM this is"), check
    assert "point patchkit" not in check["fix"], check
    # review30 L2: the placeholder named the program by its base name, never with its path glued on
    assert f"(`-- /path/to/venv/bin/{os.path.basename(sys.executable)} ...`)" in check["fix"], check


def test_preflight_v_says_cannot_judge_once_in_a_row(setup):
    """New-user trial 14, item 23a: `vllm-validation  cannot judge  cannot judge: not run: ...`."""
    tree, library, models = setup
    done = run_cli_read_only(
        "preflight", "-v", "--target", tree, "--patches", library, "--", "vllm", "serve", str(models["deepseek"])
    )
    row = next(line for line in done.stdout.splitlines() if line.startswith("vllm-validation "))
    assert row.split()[1:4] == ["cannot", "judge", "not"] and row.count("cannot judge") == 1, row
    # newuser15 11e: each finding once, in the table, not again below it
    said = [line for line in done.stdout.splitlines() if "vllm-validation" in line]
    assert said == [row], done.stdout


def test_vllm_validation_reads_relative_paths_from_the_launchs_directory(setup, tmp_path):
    tree, library, models = setup
    fake = write_refusing_engine_args(tree)  # --python imports the tree checked: vLLM is asked about it (item 2)
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json", "--"]
    relative = models["deepseek"].relative_to(tmp_path)
    done = run_cli_read_only(*base, "vllm", "serve", relative, env={"PYTHONPATH": str(fake)}, cwd=tmp_path)
    assert findings(done)["vllm-validation"]["message"] == "vLLM's create_engine_config() accepts the command"


ENVIRONMENT_ARG_UTILS = engine_args(
    '"--model"',
    head="import json\nimport os",
    config="""
        seen = {k: os.environ.get(k) for k in ("LEAKED", "SET_BY_LAUNCH", "HF_HUB_OFFLINE")}
        raise ValueError("saw " + json.dumps(seen))
    """,
)


@pytest.mark.parametrize(
    ("prefix", "seen"),
    [
        (["env", "-i", "SET_BY_LAUNCH=1"], {"LEAKED": None, "SET_BY_LAUNCH": "1", "HF_HUB_OFFLINE": "1"}),
        (
            ["env", "SET_BY_LAUNCH=1", "HF_HUB_OFFLINE=0"],
            {"LEAKED": "yes", "SET_BY_LAUNCH": "1", "HF_HUB_OFFLINE": "0"},
        ),
    ],
)
def test_vllms_validation_runs_in_the_launchs_own_environment(setup, tmp_path, prefix, seen):
    tree, library, models = setup
    fake = write_engine_args(tmp_path / "fake", ENVIRONMENT_ARG_UTILS)
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json", "--"]
    command = [*prefix, f"PYTHONPATH={fake}", "vllm", "serve", str(models["deepseek"])]
    done = run_cli_read_only(*base, *command, env={"LEAKED": "yes"})
    message = findings(done)["vllm-validation"]["message"]
    assert f"saw {json.dumps(seen)}" in message, message


def test_vllm_validation_cannot_judge_when_vllm_does_not_import(setup):
    tree, library, models = setup
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json", "--"]
    done = run_cli_read_only(*base, "vllm", "serve", str(models["deepseek"]))
    check = findings(done)["vllm-validation"]
    assert check["ok"] and check["result"] == "cannot judge"  # not a failure, and no pass
    assert check["message"].startswith("cannot judge: not run: vLLM does not import")


# vllm/__init__.py of a stand-in vLLM whose import configures its logger as 0.16.0's vllm/logger.py does:
# a level logging does not know raises (VLLM_LOGGING_LEVEL=verbose), and so does every import when `always`
IMPORT_READS_LEVEL = """
import logging.config
import os

always = {always}
level = os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper()
logging.config.dictConfig({{"version": 1, "handlers": {{"vllm": {{"class": "logging.NullHandler", "level": level}}}}}})
if always:
    raise RuntimeError("no torch here")
"""


@pytest.mark.parametrize("always", [False, True])
def test_vllm_that_does_not_import_under_the_launchs_own_setting_fails_naming_it(setup, tmp_path, always):
    tree, library, models = setup
    fake = write_engine_args(tmp_path / "fake", ENVIRONMENT_ARG_UTILS)
    (fake / "vllm" / "__init__.py").write_text(IMPORT_READS_LEVEL.format(always=always))
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json", "--"]
    settings = ["VLLM_LOGGING_LEVEL=verbose", "VLLM_OTHER=1"]
    done = run_cli_read_only(*base, "env", *settings, f"PYTHONPATH={fake}", "vllm", "serve", str(models["deepseek"]))
    check = findings(done)["vllm-validation"]
    if always:  # it imports in no environment: as a vLLM that does not import here
        assert check["ok"] and check["result"] == "cannot judge", check
        assert "VLLM_LOGGING_LEVEL" not in check["message"], check
        return
    assert done.returncode == 1 and not check["ok"], check
    assert "VLLM_LOGGING_LEVEL (it imports without)" in check["message"], check
    assert "Unable to configure handler 'vllm'" in check["message"], check
    assert check["fix"] == "correct or unset VLLM_LOGGING_LEVEL", check


# vllm/__init__.py of a stand-in vLLM whose import reads TORCH_LOGS as torch's does (torch/_logging):
# a name it does not know raises, so the launch dies at import whatever its interpreter
IMPORT_READS_TORCH_LOGS = """
import os

for name in filter(None, os.environ.get("TORCH_LOGS", "").split(",")):
    if name.strip("+-") not in ("dynamo", "inductor", "graph"):
        raise ValueError(f"Invalid log settings: {name}")
"""


@pytest.mark.parametrize("inherited", [False, True])
def test_a_non_vllm_setting_vllms_import_raises_with_fails_naming_it(setup, tmp_path, inherited):
    """Not a VLLM_* one: a fresh import without the launch's settings tells the launch's fault from the
    interpreter's (the fix is the setting, not another --python)."""
    tree, library, models = setup
    fake = write_engine_args(tmp_path / "fake", ENVIRONMENT_ARG_UTILS)
    (fake / "vllm" / "__init__.py").write_text(IMPORT_READS_TORCH_LOGS)
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json", "--"]
    settings = ["VLLM_OTHER=1", "NCCL_DEBUG=INFO", *([] if inherited else ["TORCH_LOGS=+dynamo,bogus"])]
    launch = ["env", *settings, f"PYTHONPATH={fake}", "vllm", "serve", str(models["deepseek"])]
    done = run_cli_read_only(*base, *launch, env={"TORCH_LOGS": "bogus"} if inherited else {})
    check = findings(done)["vllm-validation"]
    assert done.returncode == 1 and not check["ok"], check
    assert "for its TORCH_LOGS (it imports without): ValueError: Invalid log settings: bogus" in check["message"]
    said = " (TORCH_LOGS: the launch inherits it from the environment patchkit runs in)" if inherited else ""
    assert check["fix"] == f"correct or unset TORCH_LOGS{said}", check


def test_a_launch_whose_import_passes_the_memory_bound_cannot_be_judged(setup, tmp_path):
    """vLLM's import holding more than the worker's bound (a file read whole at import: a device, a huge
    config): no verdict, said as the bound, and the machine's memory is not filled (bytes(N): never touched)."""
    tree, library, models = setup
    fake = write_engine_args(tmp_path / "fake", ENVIRONMENT_ARG_UTILS)
    (fake / "vllm" / "__init__.py").write_text(f"held = bytes({DATA_BOUND + (1 << 30)})\ndel held\n")
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json", "--"]
    done = run_cli_read_only(*base, "env", f"PYTHONPATH={fake}", "vllm", "serve", str(models["deepseek"]))
    check = findings(done)["vllm-validation"]
    assert check["result"] == "cannot judge", check
    assert f"took more than {DATA_BOUND >> 30} GiB here" in check["message"], check


def test_drift_after_apply_fails_the_tree_state(setup):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    edited = tree / "vllm/model_executor/models/kimi_k25.py"
    edited.write_text(edited.read_text() + "\n# tuned by hand\n")
    done = preflight(tree, library, *serve(models["kimi"], models["kimi-drafter"]))
    assert_clean_failure(done, 1)
    assert failed(done) == {"tree-state"}
    assert "kimi_k25.py" in findings(done)["tree-state"]["message"]


def test_stale_unchecked_bytecode_fails_the_tree_state(setup, tmp_path):
    import importlib.util
    import py_compile

    from launch_fixtures import DEEPSEEK, DEEPSEEK_STOCK

    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    stale_source = tmp_path / "deepseek_v2.py"
    stale_source.write_text(DEEPSEEK_STOCK)
    pyc = importlib.util.cache_from_source(str(tree / DEEPSEEK))
    py_compile.compile(
        str(stale_source), cfile=pyc, doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    done = preflight(tree, library, *serve(models["deepseek"], models["drafter"]))
    assert_clean_failure(done, 1)
    assert failed(done) == {"tree-state"}
    assert "stale bytecode" in findings(done)["tree-state"]["message"]
    # review30 L2: the fix named `apply --force`; plain apply fixes it (nothing to patch, nothing forced)
    fix = findings(done)["tree-state"]["fix"]
    assert fix == f"{apply_fix(tree, library)} (it recompiles or removes the stale .pyc)", fix
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    assert preflight(tree, library, *serve(models["deepseek"], models["drafter"])).returncode == 0


def _checked_hash_of_other_bytes(setup, tmp_path, source: str, text: str) -> tuple[str, list[str], dict]:
    """`source`'s checked-hash .pyc in the tree compiled from `text`: the launch as written passes
    (Python compares the hash). (The .pyc, the launch run with --check-hash-based-pycs never, and
    that launch's tree-state finding.)"""
    import importlib.util
    import py_compile

    tree, library, models = setup
    older = tmp_path / os.path.basename(source)
    older.write_text(text)
    pyc = importlib.util.cache_from_source(str(tree / source))
    checked = py_compile.PycInvalidationMode.CHECKED_HASH
    py_compile.compile(str(older), cfile=pyc, doraise=True, invalidation_mode=checked)
    spec = serve(models["deepseek"], models["drafter"])[3:]
    api = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", str(models["deepseek"]), *spec]
    assert findings(preflight(tree, library, *api))["tree-state"]["ok"]  # Python compares the hash
    never = [api[0], "--check-hash-based-pycs", "never", *api[1:]]
    return pyc, never, findings(preflight(tree, library, *never))["tree-state"]


def test_stale_checked_hash_bytecode_fails_a_launch_that_never_checks_hashes(setup, tmp_path):
    """A checked-hash .pyc of the stock file is re-validated by default; a launch's Python run with
    --check-hash-based-pycs never loads it unchecked: the stock code runs, and the guard refuses it."""
    from launch_fixtures import DEEPSEEK_STOCK

    tree, library, _models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    pyc, never, tree_state = _checked_hash_of_other_bytes(setup, tmp_path, DEEPSEEK, DEEPSEEK_STOCK)
    assert not tree_state["ok"], tree_state
    assert (
        f"__pycache__/{os.path.basename(pyc)} is checked-hash bytecode compiled from other bytes"
        in (tree_state["message"])
    ), tree_state
    assert tree_state["fix"] == f"run `rm -f -- {pyc}` (Python compiles the source again)", tree_state
    os.unlink(pyc)
    assert findings(preflight(tree, library, *never))["tree-state"]["ok"]


def test_stale_bytecode_under_the_launchs_pycache_prefix_fails_naming_its_removal(setup, tmp_path):
    """Issue 20 (review 18 H1): the launch's PYTHONPYCACHEPREFIX makes Python read bytecode under it,
    never __pycache__; an unchecked-hash .pyc of other bytes there runs instead of the patched file.
    preflight judges the prefix the launch runs with (its env prefix, or patchkit's own environment
    unless the launch drops it), and its fix, run, makes it pass."""
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    prefix = warm_pycache_prefix(tmp_path / "pfx")
    pyc = stale_pyc_under_prefix(prefix, tree.resolve(), DEEPSEEK)
    command = serve(models["deepseek"], models["drafter"])
    assert preflight(tree, library, *command).returncode == 0  # no prefix: that .pyc is never read
    inherited = {**os.environ, "PYTHONPYCACHEPREFIX": str(prefix)}
    dropped = preflight(tree, library, "env", "-u", "PYTHONPYCACHEPREFIX", *command, env=inherited)
    assert dropped.returncode == 0, dropped.stdout
    for launch, env in ((["env", f"PYTHONPYCACHEPREFIX={prefix}", *command], None), (command, inherited)):
        done = preflight(tree, library, *launch, env=env)
        assert_clean_failure(done, 1)
        assert failed(done) == {"tree-state"}, done.stdout
        tree_state = findings(done)["tree-state"]
        # the guard installed on the tree refuses it in that launch: said as its refusal
        assert f"{pyc} (under the pycache prefix) is unchecked-hash bytecode" in tree_state["message"], tree_state
        assert tree_state["fix"] == f"run `rm -f -- {pyc}` (Python compiles the source again)"
    pyc.unlink()
    assert preflight(tree, library, "env", f"PYTHONPYCACHEPREFIX={prefix}", *command).returncode == 0


@pytest.mark.parametrize(
    ("launch", "env", "prefix"),
    [
        (["env", "PYTHONPYCACHEPREFIX=/p", "vllm"], {}, "/p"),
        (["vllm"], {"PYTHONPYCACHEPREFIX": "rel"}, "{cwd}/rel"),
        (["env", "-i", "vllm"], {"PYTHONPYCACHEPREFIX": "/p"}, None),
        (["env", "PYTHONPYCACHEPREFIX=", "vllm"], {"PYTHONPYCACHEPREFIX": "/p"}, None),
        (["python3", "-X", "pycache_prefix=/x", "-X", "pycache_prefix=/y", "-m"], {"PYTHONPYCACHEPREFIX": "/p"}, "/x"),
        (["python3", "-Xpycache_prefix=/x", "-E", "-m"], {}, "/x"),
        (["python3", "-X", "pycache_prefix", "-m"], {"PYTHONPYCACHEPREFIX": "/p"}, None),
        (["python3", "-X", "pycache_prefix=", "-m"], {"PYTHONPYCACHEPREFIX": "/p"}, None),
        (["python3", "-sE", "-m"], {"PYTHONPYCACHEPREFIX": "/p"}, None),
        (["python3", "-I", "-m"], {"PYTHONPYCACHEPREFIX": "/p"}, None),
        (["python3", "-X", "dev", "-m"], {"PYTHONPYCACHEPREFIX": "/p"}, "/p"),
    ],
)
def test_the_launchs_pycache_prefix_is_read_as_python_reads_it(launch, env, prefix, monkeypatch):
    """sys.pycache_prefix as CPython sets it: the first -X pycache_prefix (without a value: none, the
    variable ignored), else PYTHONPYCACHEPREFIX (empty: none) unless -E or -I; relative to the cwd."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    module = ["vllm.entrypoints.cli.main"] if launch[-1] == "-m" else []
    command = parse([*launch, *module, "serve", "MODEL"])
    assert command.pycache_prefix() == (prefix.format(cwd=os.getcwd()) if prefix else None)


# --- untrusted input ----------------------------------------------------------------------------------


def test_a_config_that_is_not_a_json_object_is_exit_2(setup, tmp_path):
    tree, library, models = setup
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "deepseek_v3",}')
    done = preflight(tree, library, *serve(broken, models["drafter"]))
    assert_clean_failure(done, 2)
    assert "not valid JSON" in done.stderr
    (broken / "config.json").write_text('["deepseek_v3"]')
    assert_clean_failure(preflight(tree, library, *serve(broken, models["drafter"])), 2)


def test_a_refs_main_that_leaves_the_cache_is_not_followed(setup, tmp_path):
    tree, library, models = setup
    cache = tmp_path / "hub-cache"
    write_hub_snapshot(cache, "deep/seek-like", "c0ffee", DEEPSEEK_V3)
    outside = write_model(tmp_path / "elsewhere" / "snapshot", {**DEEPSEEK_V3, "model_type": "llama"})
    (cache / "models--deep--seek-like" / "refs").mkdir()
    (cache / "models--deep--seek-like" / "refs" / "main").write_text(f"../../../elsewhere/{outside.name}\n")
    done = preflight(tree, library, *serve("deep/seek-like", models["drafter"]), env={"HF_HUB_CACHE": str(cache)})
    assert_clean_failure(done, 4)  # neither followed out of the cache nor replaced by another snapshot
    assert "not found" in done.stderr and "names no snapshot" in done.stderr


def test_a_registry_symlinked_out_of_the_tree_is_not_read(setup, tmp_path):

    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    outside = tmp_path / "outside-registry.py"
    outside.write_text(REGISTRY_PY)
    (tree / REGISTRY).unlink()
    (tree / REGISTRY).symlink_to(outside)
    done = preflight(tree, library, *serve(models["deepseek"], models["drafter"]))
    assert_clean_failure(done, 1)
    assert failed(done) == {"supports-eagle3", "drafter-architecture"}
    assert "does not register" in findings(done)["supports-eagle3"]["message"]


def test_a_tree_patched_by_hand_in_part_is_a_finding_not_a_crash(setup):
    from launch_fixtures import DEEPSEEK, DEEPSEEK_PATCHED

    tree, library, models = setup
    (tree / DEEPSEEK).write_text(DEEPSEEK_PATCHED)  # one file of the series' patch, none of the others
    done = preflight(tree, library, *serve(models["deepseek"], models["drafter"]))
    assert_clean_failure(done, 1)
    assert {"tree-state", "whitelist"} <= failed(done)
    assert "supports-eagle3" not in failed(done)
    assert findings(done)["tree-state"]["fix"]


# --- SupportsEagle3 asked of vLLM itself: its supports_eagle3() on its ModelRegistry's class -----------


def with_import(tree: Path, library: Path, *command: str, env=None):
    args = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json"]
    return run_cli_read_only(*args, "--", *command, env=env)


def test_supports_eagle3_is_asked_of_vllm_itself_on_stock_and_after_apply(setup):
    tree, library, models = setup
    env = make_importable(tree)
    done = with_import(tree, library, *serve(models["kimi"], models["kimi-drafter"]), env=env)
    assert_clean_failure(done, 1)
    supports = findings(done)["supports-eagle3"]
    assert not supports["ok"] and supports["fix"] == apply_fix(tree, library, sys.executable)
    kimi = "vllm.model_executor.models.kimi_k25.KimiK25ForConditionalGeneration"
    assert f"vLLM's supports_eagle3() is False for {kimi}" in supports["message"]

    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    done = with_import(tree, library, *serve(models["kimi"], models["kimi-drafter"]), env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"vLLM's supports_eagle3() is True for {kimi}" in findings(done)["supports-eagle3"]["message"]


def test_vllms_own_answer_wins_over_the_static_reading(setup, tmp_path):
    """A class that gets SupportsEagle3 from a mixin in another module: the static reading (one module)
    cannot see it; vLLM's supports_eagle3() can, and is the verdict."""

    tree, library, models = setup
    env = make_importable(tree)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    models_dir = tree / "vllm" / "model_executor" / "models"
    (models_dir / "eagle3_mixin.py").write_text(
        "from .interfaces import SupportsEagle3\n\n\nclass Eagle3Mixin(SupportsEagle3):\n    pass\n"
    )
    (models_dir / "mixed.py").write_text(
        "from .eagle3_mixin import Eagle3Mixin\n\n\nclass MixedForCausalLM(Eagle3Mixin):\n    pass\n"
    )
    (tree / REGISTRY).write_text(
        REGISTRY_PY.replace(
            '    "LlamaForCausalLM"', '    "MixedForCausalLM": ("mixed", "MixedForCausalLM"),\n    "LlamaForCausalLM"'
        )
    )
    target = write_model(tmp_path / "mixed", {**DEEPSEEK_V3, "architectures": ["MixedForCausalLM"]})

    static_only = preflight(tree, library, *serve(target, models["drafter"]), env=env)
    supports = findings(static_only)["supports-eagle3"]
    assert not supports["ok"] and "does not have base SupportsEagle3" in supports["message"]
    assert "vLLM's supports_eagle3() not asked: --no-import" in supports["message"]

    done = with_import(tree, library, *serve(target, models["drafter"]), env=env)
    supports = findings(done)["supports-eagle3"]
    assert supports["ok"], supports
    assert (
        "vLLM's supports_eagle3() is True for vllm.model_executor.models.mixed.MixedForCausalLM" in supports["message"]
    )

    (models_dir / "mixed.py").write_text("import a_module_nobody_installed\n")
    done = with_import(tree, library, *serve(target, models["drafter"]), env=env)
    supports = findings(done)["supports-eagle3"]
    assert not supports["ok"] and supports["fix"]
    assert "vLLM cannot load its class for MixedForCausalLM" in supports["message"]
    assert "a_module_nobody_installed" in supports["message"]


def test_supports_eagle3_keeps_the_static_verdict_with_a_note_when_vllm_does_not_import(setup):
    tree, library, models = setup
    done = with_import(tree, library, *serve(models["deepseek"], models["drafter"]))  # no vllm on sys.path
    assert_clean_failure(done, 1)
    supports = findings(done)["supports-eagle3"]
    assert not supports["ok"] and supports["fix"] == apply_fix(tree, library, sys.executable)
    assert "does not have base SupportsEagle3" in supports["message"]
    assert "vLLM's supports_eagle3() not asked: vLLM does not import in" in supports["message"]


# --- the command as vLLM 0.16.0's FlexibleArgumentParser reads it -----------------------------------------


def test_a_key_by_key_option_is_read_as_vllm_reads_it():
    command = parse(
        [
            *("vllm", "serve", "org/m", "--speculative_config.method", "eagle3"),
            *("--speculative-config.num_speculative_tokens", "4", "--speculative-config.model=/drafts/x.v2"),
            *("--hf-overrides.text_config.num_hidden_layers", "12", "--hf-overrides.ids+", "7,8"),
            *("--hf-overrides.ids+", "9", "--hf_overrides.text_config.rope", '{"factor": 2}'),
        ]
    )
    assert command.speculative_config == {"method": "eagle3", "num_speculative_tokens": 4, "model": "/drafts/x.v2"}
    assert command.hf_overrides == {
        "text_config": {"num_hidden_layers": 12, "rope": {"factor": 2}},
        "ids": ["7", "8", "9"],
    }
    assert command.notes == []


def test_a_key_keeps_its_spelling_and_takes_the_next_token_whatever_it_is():
    command = parse(["vllm", "serve", "m", "--speculative-config.num-speculative-tokens", "2"])
    assert command.speculative_config == {"num-speculative-tokens": 2}  # vLLM passes it on as written
    command = parse(["vllm", "serve", "m", "--speculative-config.model", "--trust-remote-code"])
    assert command.speculative_config == {"model": "--trust-remote-code"} and not command.trust_remote_code
    with pytest.raises(BadInput, match="needs a value"):
        parse(["vllm", "serve", "m", "--speculative-config.method"])


def test_json_and_key_by_key_together_keep_only_the_keys_and_fail_the_preflight(setup):
    tree, library, models = setup
    spec = json.dumps({"method": "eagle3", "model": str(models["drafter"])})
    for order in (
        ["--speculative-config", spec, "--speculative-config.num_speculative_tokens", "3"],
        ["--speculative-config.num_speculative_tokens", "3", "--speculative-config", spec],
    ):
        command = parse(["vllm", "serve", str(models["deepseek"]), *order])
        assert command.speculative_config == {"num_speculative_tokens": 3}
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    done = preflight(tree, library, "vllm", "serve", str(models["deepseek"]), *order)
    assert_clean_failure(done, 1)
    assert failed(done) == {"command", "speculative-config"}  # what is left has no drafter: vLLM refuses it
    assert "drops the JSON" in findings(done)["command"]["message"]


def test_a_config_file_is_spliced_in_where_vllm_puts_it(setup, tmp_path, monkeypatch):
    _, _, models = setup
    monkeypatch.chdir(tmp_path)
    (tmp_path / "launch.yml").write_text(
        f"model: {models['kimi']}\nenforce_eager: true\ntrust-remote-code: false\n"
        f"speculative-config:\n  method: eagle3\n  model: {models['drafter']}\n"
    )
    command = parse(["vllm", "serve", str(models["deepseek"]), "--config", "launch.yml", "-tp", "2"])
    assert command.model == str(models["deepseek"])  # serve's positional MODEL wins over the file's
    assert command.speculative_config == {"method": "eagle3", "model": str(models["drafter"])}
    assert command.options["enforce-eager"] is True and not command.trust_remote_code
    assert command.tensor_parallel_size == 2
    api = parse(["python3", "-m", "vllm.entrypoints.openai.api_server", "--config", "launch.yml"])
    assert api.model == str(models["kimi"])
    (tmp_path / "launch.json").write_text("{}")
    with pytest.raises(BadInput, match=r"only a \.yaml or \.yml"):
        parse(["vllm", "serve", "m", "--config", "launch.json"])


def test_a_short_option_the_installed_vllm_does_not_declare_is_a_finding(tmp_path):
    """A release with no recorded parser spec is read leniently: a short option is held against
    the installed arg_utils.py (a recorded release's parser refuses it: exit 2, above)."""
    from patchkit.launch.engine import LaunchContext
    from patchkit.launch.preflight import command_findings

    arg_utils = tmp_path / "vllm" / "engine" / "arg_utils.py"
    arg_utils.parent.mkdir(parents=True)
    arg_utils.write_text('parser.add_argument("--tensor-parallel-size", "-tp")\n')
    target = ModelConfig("org/m", tmp_path / "config.json", {})  # a model with an empty config
    command = parse(["vllm", "serve", "org/m", "-tp", "2", "-sc", "{}"], "0.16.1")
    found = command_findings(LaunchContext(command, target, None, tmp_path, None, None))
    [short] = [f for f in found if f.message.startswith("the installed vLLM has no option -sc")]
    assert not short.ok and short.fix == "write --speculative-config"
    command = parse(["vllm", "serve", "org/m", "-tp", "2"], "0.16.1")
    found = command_findings(LaunchContext(command, target, None, tmp_path, None, None))
    assert [f.ok for f in found] == [True] and "read with 0.16.0's" in found[0].message


def test_a_registry_of_another_shape_leaves_the_static_verdict_with_a_note(setup):
    tree, library, models = setup
    env = make_importable(tree)
    (tree / "vllm" / "model_executor" / "models" / "__init__.py").write_text("ModelRegistry = object()\n")
    done = with_import(tree, library, *serve(models["deepseek"], models["drafter"]), env=env)
    supports = findings(done)["supports-eagle3"]
    assert not supports["ok"] and supports["fix"] == apply_fix(tree, library, sys.executable)
    assert "vLLM's supports_eagle3() not asked: this vLLM's ModelRegistry has no table of models" in supports["message"]


@pytest.mark.parametrize(
    ("name", "method", "checked"),
    [
        ("Org_Qwen-EAGLE3-draft", None, True),  # vLLM infers eagle3 from the name
        ("my-eagle3-head", "draft_model", True),  # and replaces a method other than eagle/eagle3
        ("EAGLE-3-head", None, False),  # "eagle-" wins: vLLM reads it as EAGLE-1
        ("eagle3-head", "eagle", False),  # a method given as eagle is kept
        ("plain-head", "draft_model", False),
    ],
)
def test_the_method_vllm_infers_from_the_drafters_name_is_the_one_checked(setup, tmp_path, name, method, checked):
    # the whole name counts, as in vLLM: the test directory holds no "eagle"
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(tmp_path / name, {**DRAFTER, "target_hidden_size": 5120})
    spec = {"model": str(drafter), "num_speculative_tokens": 3, **({"method": method} if method else {})}
    done = preflight(tree, library, "vllm", "serve", str(models["deepseek"]), "--speculative-config", json.dumps(spec))
    assert ("drafter-hidden-size" in failed(done)) is checked, done.stdout
    assert done.returncode == (1 if checked else 0)


# --- the model config vLLM reads: revision, --hf-config-path, the launch's cache -----------------

NARROW = {**DEEPSEEK_V3, "hidden_size": 4096}  # the config vLLM reads: the drafter (7168) does not fit it
COMMIT_A, COMMIT_B = "a" * 40, "b" * 40


def write_cached_repo(cache: Path, repo: str, snapshots: dict[str, dict], refs: dict[str, str]) -> Path:
    org, name = repo.split("/")
    root = cache / f"models--{org}--{name}"
    for commit, config in snapshots.items():
        write_model(root / "snapshots" / commit, config)
    for ref, commit in refs.items():
        (root / "refs" / ref).parent.mkdir(parents=True, exist_ok=True)
        (root / "refs" / ref).write_text(commit)
    return root


def checked_hidden_size(tree, library, drafter, *command, env=None) -> int:
    done = preflight(
        tree,
        library,
        *command,
        "--speculative-config",
        json.dumps({"method": "eagle3", "model": str(drafter)}),
        env=env,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return 4096 if "drafter-hidden-size" in failed(done) else 7168


@pytest.mark.parametrize(
    ("arguments", "reads"),
    [
        ([], 7168),
        (["--revision", COMMIT_B], 4096),
        (["--revision", "v2"], 4096),  # a tag: refs/tags-like names are refs/<name>
        (["--revision", "refs/pr/1"], 4096),
    ],
)
def test_the_revision_vllm_reads_is_the_one_checked(setup, tmp_path, arguments, reads):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    cache = tmp_path / "hub"
    refs = {"main": COMMIT_A, "v2": COMMIT_B, "refs/pr/1": COMMIT_B}
    write_cached_repo(cache, "lab/ds", {COMMIT_A: DEEPSEEK_V3, COMMIT_B: NARROW}, refs)
    env = {"HF_HUB_CACHE": str(cache)}
    assert (
        checked_hidden_size(tree, library, models["drafter"], "vllm", "serve", "lab/ds", *arguments, env=env) == reads
    )


def test_hf_config_path_is_the_config_checked(setup, tmp_path):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    narrow = write_model(tmp_path / "narrow-config", NARROW)
    command = ["vllm", "serve", str(models["deepseek"]), "--hf-config-path", str(narrow)]
    assert checked_hidden_size(tree, library, models["drafter"], *command) == 4096


@pytest.mark.parametrize(
    "variables",
    [
        {"XDG_CACHE_HOME": "{tmp}/xdg"},  # HF_HOME unset: XDG_CACHE_HOME/huggingface/hub
        {"HUGGINGFACE_HUB_CACHE": "{tmp}/xdg/huggingface/hub"},  # the legacy name
        {"HOME": "{tmp}/home", "HF_HOME": "~/../xdg/huggingface"},  # ~ is the launch's HOME
        {"XDG_CACHE_HOME": "{tmp}/elsewhere", "HF_HUB_CACHE": "$CACHE/hub", "CACHE": "{tmp}/xdg/huggingface"},
        # transformers' own cache_dir default comes first, the first of its three names set
        {"TRANSFORMERS_CACHE": "{tmp}/xdg/huggingface/hub", "HF_HUB_CACHE": "{tmp}/decoy"},
        {"PYTORCH_TRANSFORMERS_CACHE": "{tmp}/xdg/huggingface/hub", "HF_HOME": "{tmp}/decoy"},
        {"PYTORCH_PRETRAINED_BERT_CACHE": "{tmp}/xdg/huggingface/hub", "HUGGINGFACE_HUB_CACHE": "{tmp}/decoy"},
        {"TRANSFORMERS_CACHE": "{tmp}/xdg/huggingface/hub", "PYTORCH_TRANSFORMERS_CACHE": "{tmp}/decoy"},
    ],
)
def test_the_hub_cache_is_found_as_huggingface_hub_finds_it_in_the_launchs_environment(setup, tmp_path, variables):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    write_cached_repo(tmp_path / "xdg" / "huggingface" / "hub", "lab/ds", {COMMIT_B: NARROW}, {"main": COMMIT_B})
    write_cached_repo(tmp_path / "decoy", "lab/ds", {COMMIT_A: DEEPSEEK_V3}, {"main": COMMIT_A})
    (tmp_path / "home").mkdir()
    assignments = [f"{k}={v.format(tmp=tmp_path)}" for k, v in variables.items()]
    # patchkit's own environment names the decoy: `env -i` leaves the launch none of it
    env = {"HF_HUB_CACHE": str(tmp_path / "decoy"), "HF_HOME": str(tmp_path / "decoy")}
    command = ["env", "-i", *assignments, "vllm", "serve", "lab/ds"]
    assert checked_hidden_size(tree, library, models["drafter"], *command, env=env) == 4096


@pytest.mark.parametrize(
    ("model", "variables"),
    [
        ("lab/" + "m" * 300, {}),  # a name no file can have
        ("lab/ds", {"HF_HUB_CACHE": "{tmp}/" + "c" * 300}),
        ("~nosuchuser-of-patchkit/ds", {}),  # an unknown ~user is no home: the name as it is
    ],
)
def test_a_model_no_file_or_cache_can_hold_is_not_found_not_a_crash(setup, tmp_path, model, variables):
    tree, library, models = setup
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), **{k: v.format(tmp=tmp_path) for k, v in variables.items()}}
    for role_model in ([model, models["drafter"]], [str(models["deepseek"]), model]):
        done = preflight(tree, library, *serve(*role_model), env=env)
        assert_clean_failure(done, 4)
        assert "no config.json found" in done.stderr


@pytest.mark.parametrize("ref", ["missing-snapshot", "fifo", "no-ref"])
def test_a_revision_the_cache_holds_no_snapshot_for_cannot_be_judged(setup, tmp_path, ref):
    tree, library, models = setup
    cache = tmp_path / "hub"
    root = write_cached_repo(cache, "lab/ds", {COMMIT_A: DEEPSEEK_V3}, {} if ref == "no-ref" else {"main": COMMIT_B})
    if ref == "fifo":
        (root / "refs" / "main").unlink()
        os.mkfifo(root / "refs" / "main")
    done = preflight(tree, library, *serve("lab/ds", models["drafter"]), env={"HF_HUB_CACHE": str(cache)})
    assert_clean_failure(done, 4)
    assert "model 'lab/ds' not found" in done.stderr and "cannot judge" not in done.stderr


def test_a_revision_not_cached_is_fetched_as_its_config_alone_at_that_revision(setup, tmp_path):
    """New-user trial 14, item 24: the fix for a revision the cache lacks was `huggingface-cli download
    ORG/MODEL --revision R`, every file of the repository (DeepSeek-V3: its weights, ~700 GB); for a
    drafter not cached at all the fix left out its --revision. Each is the one file preflight reads,
    at the revision the launch names."""
    tree, library, models = setup
    cache = tmp_path / "hub"
    write_cached_repo(cache, "lab/ds", {COMMIT_A: DEEPSEEK_V3}, {"main": COMMIT_A})
    env = {"HF_HUB_CACHE": str(cache)}
    done = preflight(tree, library, *serve("lab/ds", models["drafter"]), "--revision", "v2", fmt="text", env=env)
    assert_clean_failure(done, 4)
    said = " ".join((done.stdout + done.stderr).split())
    assert "`hf download lab/ds config.json --revision v2`" in said and "huggingface-cli" not in said, said
    # where `hf` comes from, as the missing model's hint says it (newuser17 5d)
    pipx = "`pipx run --spec huggingface_hub hf download lab/ds config.json --revision v2`"
    assert "`hf` comes with huggingface_hub" in said and pipx in said, said
    # newuser15 8: counted as failed, so never worded "cannot judge"
    assert "models: model 'lab/ds' not found at revision v2: the cache holds no config.json" in said, said
    assert "cannot judge" not in said and "checks failed" in said, said
    spec = json.dumps({"method": "eagle3", "model": "lab/drafter", "revision": "r1"})
    drafter = ["vllm", "serve", str(models["deepseek"]), "--speculative-config", spec]
    done = preflight(tree, library, *drafter, fmt="text", env=env)
    assert_clean_failure(done, 4)
    said = " ".join((done.stdout + done.stderr).split())
    assert "`hf download lab/drafter config.json --revision r1`" in said, said


def speculator_config(verifier: Path, **fields) -> dict:
    return {
        "architectures": ["Eagle3Speculator"],
        "speculators_model_type": "eagle3",
        "speculators_config": {
            "proposal_methods": [{"speculative_tokens": 3}],
            "verifier": {"name_or_path": str(verifier)},
        },
        "transformer_layer_config": {"model_type": "llama", "hidden_size": 7168, "vocab_size": 129280},
        "draft_vocab_size": 32000,
        "eagle_aux_hidden_state_layer_ids": [1, 29, 57],
        **fields,
    }


@pytest.mark.parametrize(("fields", "fails"), [({}, set()), ({"target_hidden_size": 5120}, {"drafter-hidden-size"})])
def test_a_speculators_format_model_is_checked_as_its_verifiers_drafter(setup, tmp_path, fields, fails):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    model = write_model(tmp_path / "spec-format", speculator_config(models["deepseek"], **fields))
    done = preflight(tree, library, "vllm", "serve", str(model))
    assert failed(done) == fails, done.stdout
    assert set(findings(done)) >= DRAFTER_CHECKS  # EAGLE-3 checked, against the verifier
    assert f"serves its verifier {models['deepseek']}" in findings(done)["command"]["message"]


@pytest.mark.parametrize(
    ("fields", "fails"),
    [
        ({"target_hidden_size": 7168}, set()),
        ({}, set()),  # no target_hidden_size: the layers' hidden_size
        ({"target_hidden_size": 5120}, {"drafter-hidden-size"}),
        ({"eagle_aux_hidden_state_layer_ids": [1, 29, 99]}, {"drafter-aux-layers"}),
        ({"draft_vocab_size": 200000}, {"drafter-vocabulary"}),
    ],
)
def test_a_speculators_format_drafter_is_read_as_vllm_builds_its_config(setup, tmp_path, fields, fails):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(tmp_path / "spec-drafter", speculator_config(models["deepseek"], **fields))
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    assert failed(done) == fails, done.stdout
    assert set(findings(done)) >= DRAFTER_CHECKS


@pytest.mark.parametrize(
    "fields",
    [{"speculators_model_type": "eagle"}, {"transformer_layer_config": [1]}, {"transformer_layer_config": None}],
)
def test_a_speculators_format_drafter_vllm_refuses_is_exit_2(setup, tmp_path, fields):
    tree, library, models = setup
    drafter = write_model(tmp_path / "spec-drafter", speculator_config(models["deepseek"], **fields))
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    assert_clean_failure(done, 2)
    assert "vLLM refuses it" in done.stderr


def test_a_speculators_config_vllm_refuses_is_exit_2(setup, tmp_path):
    tree, library, models = setup
    config = speculator_config(models["deepseek"])
    del config["speculators_config"]["verifier"]
    done = preflight(tree, library, "vllm", "serve", str(write_model(tmp_path / "broken", config)))
    assert_clean_failure(done, 2)
    assert "speculators config" in done.stderr


LOCK_PROBE = """
import fcntl, os, sys
os.makedirs(os.path.dirname({lock!r}), exist_ok=True)  # a stock tree's preflight makes no .patchkit/
fd = os.open({lock!r}, os.O_RDWR | os.O_CREAT)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    state = "free"
except OSError:
    state = "held"
with open({mark!r}, "a") as out:
    out.write(os.path.basename(sys.argv[0]) + " " + state + chr(10))
"""


def test_vllms_own_validation_runs_without_the_trees_lock(setup, tmp_path):
    tree, library, models = setup
    env = make_importable(tree)
    mark = tmp_path / "lock-states"
    (tree / "vllm" / "__init__.py").write_text(LOCK_PROBE.format(lock=str(tree / ".patchkit" / "lock"), mark=str(mark)))
    with_import(tree, library, *serve(models["deepseek"], models["drafter"]), env=env)
    states = mark.read_text().splitlines()
    assert "engine_config.py free" in states, states  # a concurrent `run` or `apply` need not wait for it


@pytest.mark.parametrize("value", ["", "None", "null"])
def test_a_speculative_config_vllm_reads_as_none_is_no_speculative_decoding(setup, value):
    tree, library, models = setup
    done = preflight(tree, library, "vllm", "serve", str(models["deepseek"]), f"--speculative-config={value}")
    assert done.returncode in (0, 1), done.stderr
    assert set(findings(done)) == {"tree-state", "models"}  # models: its weights, judged loadable


def test_a_local_directory_named_as_the_hub_id_is_what_vllm_reads(setup, tmp_path):
    tree, library, _ = setup
    cache = tmp_path / "hub"
    write_cached_repo(cache, "lab/ds", {COMMIT_A: DEEPSEEK_V3}, {"main": COMMIT_A})
    (tmp_path / "work" / "lab" / "ds").mkdir(parents=True)  # ./lab/ds: no config.json in it
    args = ["preflight", "--target", tree, "--patches", library, "--no-import", "--", "vllm", "serve", "lab/ds"]
    done = run_cli_read_only(*args, env={"HF_HUB_CACHE": str(cache)}, cwd=tmp_path / "work")
    assert_clean_failure(done, 4)
    assert "has no config.json" in done.stdout


def applied_preflight_of(setup, spec: dict, drafter_names: dict[str, Path]):
    """preflight of the applied tree's launch of DeepSeek-V3 with --speculative-config `spec`, whose
    values DRAFTER and those of `drafter_names` stand for those drafters' directories."""
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafters = {"DRAFTER": str(models["drafter"]), **{name: str(path) for name, path in drafter_names.items()}}
    spec = {k: drafters.get(v, v) if isinstance(v, str) else v for k, v in spec.items()}
    command = ["vllm", "serve", str(models["deepseek"]), "--speculative-config", json.dumps(spec)]
    return preflight(tree, library, *command)


@pytest.mark.parametrize(
    ("spec", "said", "fix"),
    [
        ({"method": "eagle3", "num_speculative_tokens": 3}, 'no "model"', '"model"'),
        ({"method": "eagle3"}, 'no "model"', '"model"'),
        ({"method": "eagle3", "model": "", "num_speculative_tokens": 3}, 'model ""', '"model"'),
        ({"method": "Eagle3", "model": "DRAFTER", "num_speculative_tokens": 3}, "'Eagle3'", '"method": "eagle3"'),
        ({"method": "eagle4", "model": "DRAFTER", "num_speculative_tokens": 3}, "'eagle4'", "one of"),
        ({"method": "[ngram]", "num_speculative_tokens": 3}, "'[ngram]'", 'write "method": "ngram"'),
        ({"model": "PLAIN", "num_speculative_tokens": 3}, "no method", '"method"'),  # its name tells none
        ({"method": "eagle3", "model": "DRAFTER"}, "n_predict", '"num_speculative_tokens"'),
        ({"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 0}, "no count above 0", "above 0"),
        ({"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": "-1"}, "no count above 0", "above 0"),
        ({"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 2.5}, "no count above 0", "above 0"),
        ({"method": ["eagle3"], "model": "DRAFTER", "num_speculative_tokens": 3}, "['eagle3']", "one of"),
        ({"method": "eagle3", "model": 5, "num_speculative_tokens": 3}, "not a string", '"model"'),
        ({"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "bogus": 1}, "no field bogus", "drop"),
        (
            {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "tensor_parallel_size": 2},
            "",
            "draft_",
        ),
    ],
)
def test_a_speculative_config_vllm_refuses_fails_naming_the_fix(setup, tmp_path, spec, said, fix):
    done = applied_preflight_of(setup, spec, {"PLAIN": write_model(tmp_path / "plain-drafter", DRAFTER)})
    assert done.returncode == 1, done.stdout + done.stderr
    refused = findings(done)["speculative-config"]
    assert not refused["ok"] and said in refused["message"] and fix in refused["fix"]


@pytest.mark.parametrize(
    "spec",
    [
        {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 1},
        {"model": "DRAFTER-eagle3", "num_speculative_tokens": 3},  # the method told by the drafter's name
        {"method": "deepseek_mtp", "num_speculative_tokens": 1},  # an MTP method: vLLM's model is the target
        {"method": "ngram", "num_speculative_tokens": 3},
        {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": "3"},  # pydantic's lax int
        {"method": "eagle3", "model": "DRAFTER", "num_speculative_tokens": 3.0},
    ],
)
def test_a_speculative_config_vllm_accepts_has_no_speculative_config_fault(setup, tmp_path, spec):
    done = applied_preflight_of(setup, spec, {"DRAFTER-eagle3": write_model(tmp_path / "x-eagle3", DRAFTER)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "speculative-config" not in findings(done)


@pytest.mark.parametrize(
    ("files", "arguments", "judged"),
    [
        (
            {"params.json": "{}", "consolidated.safetensors": EMPTY_SAFETENSORS.decode()},
            [],
            False,
        ),  # auto: vLLM reads params.json
        (
            {"params.json": "{}", "weights/consolidated-00001.safetensors": EMPTY_SAFETENSORS.decode()},
            [],
            False,
        ),  # found at any depth
        ({}, ["--config-format", "mistral"], False),
        ({}, ["--config-format", "my_plugin_format"], False),
        (
            {"params.json": "{}", "consolidated.safetensors": EMPTY_SAFETENSORS.decode()},
            ["--config-format", "hf"],
            True,
        ),
        ({"params.json": "{}"}, [], True),  # no consolidated weights: vLLM's auto reads config.json
        ({"consolidated.safetensors": EMPTY_SAFETENSORS.decode()}, [], True),
    ],
)
@pytest.mark.parametrize("where", ["local", "hub"])
def test_a_mistral_format_model_is_not_judged_on_its_config_json(setup, tmp_path, files, arguments, judged, where):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    cache = tmp_path / "hub"
    if where == "local":
        directory = model = write_model(tmp_path / "mistral-like", DEEPSEEK_V3)
    else:
        model = "lab/mistral-like"
        directory = (
            write_cached_repo(cache, model, {COMMIT_A: DEEPSEEK_V3}, {"main": COMMIT_A}) / "snapshots" / COMMIT_A
        )
    for name, text in files.items():
        (directory / name).parent.mkdir(parents=True, exist_ok=True)
        (directory / name).write_text(text)
    done = preflight(tree, library, *serve(model, models["drafter"], *arguments), env={"HF_HUB_CACHE": str(cache)})
    if judged:
        assert done.returncode == 0, done.stdout + done.stderr
    else:
        assert_clean_failure(done, 4)
        assert "cannot judge" in done.stderr and "config.json only" in done.stderr


@pytest.mark.parametrize(
    ("argv", "took"),
    [
        (["vllm", "serve", "--served-model-name", "chat", "/models/ds"], "took chat /models/ds as served names"),
        (["vllm", "serve", "-tp", "2", "--served-model-name", "chat"], "took chat as served names"),
    ],
)
def test_a_model_taken_as_a_served_name_is_said_so(argv, took):
    with pytest.raises(BadInput) as refused:
        parse(argv, "0.16.0")
    assert took in refused.value.message and "default model" in refused.value.message
    assert "vllm serve MODEL --served-model-name NAME" in (refused.value.hint or "")


def test_a_served_model_name_is_never_the_model_checked(setup, tmp_path):
    tree, library, models = setup
    command = parse(["vllm", "serve", str(models["deepseek"]), "--served-model-name", "chat", "ds"], "0.16.0")
    assert command.model == str(models["deepseek"])
    done = preflight(tree, library, *serve(models["deepseek"], models["drafter"], "--served-model-name", "chat"))
    assert not any("chat" in f["message"] for f in findings(done).values())


# --- review 07: --target/--python names a tree the command's own `vllm` does not run -----------------


def _venv_with_vllm(root: Path, version: str = "0.16.0") -> tuple[Path, Path]:
    """(a venv whose site-packages holds a vllm package, its `vllm` script naming the venv's python)."""
    import venv

    from helpers import write_tree

    venv.create(root, with_pip=False, symlinks=True)
    [site] = root.glob("lib/python*/site-packages")
    write_tree(site, version)
    script = root / "bin" / "vllm"
    script.write_text(f"#!{root / 'bin' / 'python'}\nimport sys\n")
    script.chmod(0o755)
    return site, script


def test_a_target_the_commands_vllm_does_not_run_fails_naming_both(setup, tmp_path):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    site, script = _venv_with_vllm(tmp_path / "stock-venv")
    command = [str(script), *serve(models["deepseek"], models["drafter"])[1:]]

    done = preflight(tree, library, *command)
    assert_clean_failure(done, 1)
    assert failed(done) == {"launch-target"}
    message = findings(done)["launch-target"]["message"]
    assert str(tree) in message and str(site) in message and str(tmp_path / "stock-venv" / "bin" / "python") in message
    assert "--python" in findings(done)["launch-target"]["fix"]

    done = run_cli("run", "--target", tree, "--patches", library, "--", *command)
    assert_clean_failure(done, 1)
    assert "not launched" in done.stderr and "launch-target" in done.stdout


def test_a_target_the_commands_vllm_does_run_adds_no_finding(setup, tmp_path):
    _, library, models = setup
    site, script = _venv_with_vllm(tmp_path / "venv")
    command = [str(script), *serve(models["deepseek"], models["drafter"])[1:]]
    python = tmp_path / "venv" / "bin" / "python"
    for named in (["--target", str(site)], ["--python", str(python)], ["--python", str(python) + "3"]):
        done = run_cli_read_only(
            "preflight", *named, "--patches", library, "--format", "json", "--no-import", "--", *command
        )
        assert "launch-target" not in findings(done), done.stdout


# --- review 05: releases after 0.20.0 are read with their own recorded parser ----------------------


def test_the_releases_own_speculative_flags_are_merged_into_the_speculative_config():
    """0.32.0's --spec-method/--spec-model/--spec-tokens are keys of the speculative config, as its
    create_speculative_config merges them; one given both ways is refused, as vLLM refuses it."""
    flags = ["--spec-method", "eagle3", "--spec-model", "org/d", "--spec-tokens", "3"]
    command = parse(["vllm", "serve", "org/m", *flags], "0.32.0")
    assert command.exact and command.release == "0.32.0"
    assert command.speculative_config == {"method": "eagle3", "model": "org/d", "num_speculative_tokens": 3}
    assert command.named_method == "eagle3"
    partly = parse(["vllm", "serve", "org/m", "--spec-model", "org/d", "-sc", '{"method": "eagle3"}'], "0.32.0")
    assert partly.speculative_config == {"method": "eagle3", "model": "org/d"}
    with pytest.raises(BadInput, match="--spec-model and --speculative-config's 'model' exclude each other"):
        _ = parse(["vllm", "serve", "org/m", "--spec-model", "org/d", "-sc", '{"model": "org/e"}'], "0.32.0")


def test_a_bad_drafter_given_by_the_releases_own_flags_is_checked(tmp_path):
    tree, library = write_eagle3_setup(tmp_path, "0.32.0")
    target = write_model(tmp_path / "target", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "target_hidden_size": 4096})
    flags = ["--spec-method", "eagle3", "--spec-model", str(drafter), "--spec-tokens", "3"]
    done = preflight(tree, library, "vllm", "serve", str(target), *flags)
    assert_clean_failure(done, 1)
    assert "drafter-hidden-size" in failed(done), done.stdout
    assert "command" not in findings(done)  # read by 0.32.0's own parser: nothing left unread


# --- review-launch3 01: the tree checked is the one the launch imports, in its environment and cwd --


def _venv_running(tree: Path, root: Path) -> Path:
    """A venv whose python imports vllm from `tree` (a .pth), with a `vllm` script naming it: its python."""
    return venv_importing(tree, root).parent / "python"


def test_the_launchs_pythonpath_or_working_directory_that_imports_another_vllm_fails_launch_target(setup, tmp_path):
    from helpers import write_tree

    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    python = _venv_running(tree, tmp_path / "venv")
    other = write_tree(tmp_path / "other")
    launch = serve(models["deepseek"], models["drafter"])[2:]
    script = str(python.parent / "vllm")
    module = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", *launch]
    assert "launch-target" not in findings(preflight(tree, library, script, "serve", *launch))
    for named in ([], ["--target", str(tree)]):
        for command, cwd in (
            (["env", f"PYTHONPATH={other}", script, "serve", *launch], None),
            (["env", "-i", f"PYTHONPATH={other}", script, "serve", *launch], None),
            (module, other),
        ):
            args = ["preflight", *named, "--patches", library, "--format", "json", "--no-import", "--", *command]
            done = run_cli_read_only(*args, cwd=cwd)
            assert_clean_failure(done, 1)
            assert failed(done) == {"launch-target"}, (command, done.stdout)
            assert str(other) in findings(done)["launch-target"]["message"]
    done = run_cli_read_only(
        "preflight", "--patches", library, "--format", "json", "--no-import", "--", *module, cwd=tmp_path
    )
    assert "launch-target" not in findings(done), done.stdout  # a working directory without a vllm
    done = run_cli("run", "--patches", library, "--", "env", f"PYTHONPATH={other}", script, "serve", *launch)
    assert_clean_failure(done, 1)
    assert "not launched" in done.stderr and "launch-target" in done.stdout


# --- review-launch3 02/05: the configs vLLM reads, in vLLM's order -----------------------------------


@pytest.mark.parametrize(
    ("table", "reads"),
    [
        ('{"lab/ds": "{narrow}"}', 4096),
        ("# a comment line\nlab/ds   {narrow}\r\nother x\n", 4096),
        ("[]\nlab/ds {narrow}\n", 4096),  # not JSON: read as lines
        ('{"other/model": "{narrow}"}', 7168),
        ("", 7168),
    ],
)
def test_vllm_model_redirect_path_is_followed_as_vllm_follows_it(setup, tmp_path, table, reads):
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    cache = tmp_path / "hub"
    write_cached_repo(cache, "lab/ds", {COMMIT_A: DEEPSEEK_V3}, {"main": COMMIT_A})
    narrow = write_model(tmp_path / "narrow", NARROW)
    redirect = tmp_path / "redirect"
    redirect.write_text(table.replace("{narrow}", str(narrow)))
    env = {"HF_HUB_CACHE": str(cache), "VLLM_MODEL_REDIRECT_PATH": str(redirect)}
    assert checked_hidden_size(tree, library, models["drafter"], "vllm", "serve", "lab/ds", env=env) == reads
    # the drafter is redirected too
    env["VLLM_MODEL_REDIRECT_PATH"] = str(tmp_path / "drafter-redirect")
    Path(env["VLLM_MODEL_REDIRECT_PATH"]).write_text(f"lab/d {models['drafter']}\n")
    assert checked_hidden_size(tree, library, "lab/d", "vllm", "serve", str(models["deepseek"]), env=env) == 7168


@pytest.mark.parametrize(("table", "code"), [(b'"a string"', 2), (b'{"{model}": 5}', 2), (b"{model} \xff\n", 4)])
def test_a_redirect_file_vllm_fails_on_is_never_read_as_no_redirect(setup, tmp_path, table, code):
    tree, library, models = setup
    redirect = tmp_path / "redirect"
    redirect.write_bytes(table.replace(b"{model}", bytes(models["deepseek"])))
    env = {"VLLM_MODEL_REDIRECT_PATH": str(redirect)}
    done = preflight(tree, library, *serve(models["deepseek"], models["drafter"]), env=env)
    assert_clean_failure(done, code)
    assert "VLLM_MODEL_REDIRECT_PATH" in done.stderr


def test_vllm_use_modelscope_cannot_be_judged(setup):
    tree, library, models = setup
    done = preflight(tree, library, *serve(models["deepseek"], models["drafter"]), env={"VLLM_USE_MODELSCOPE": "True"})
    assert_clean_failure(done, 4)
    assert "cannot judge" in done.stderr and "VLLM_USE_MODELSCOPE" in done.stderr


def test_a_speculators_model_with_hf_config_path_is_still_served_as_its_verifiers_drafter(setup, tmp_path):
    """vLLM's speculators check reads MODEL's own config.json; --hf-config-path is the verifier's config."""
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    model = write_model(tmp_path / "spec-format", speculator_config(models["deepseek"]))
    narrow = write_model(tmp_path / "narrow", NARROW)
    done = preflight(tree, library, "vllm", "serve", str(model), "--hf-config-path", str(narrow))
    assert set(findings(done)) >= DRAFTER_CHECKS, done.stdout
    assert failed(done) == {"drafter-hidden-size"}, done.stdout
    assert "speculators-format" in findings(done)["command"]["message"]


@pytest.mark.parametrize(
    ("change", "served"),
    [
        (
            {
                "eagle_aux_hidden_state_layer_ids": None,
                "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]},
            },
            True,
        ),
        (
            {"eagle_aux_hidden_state_layer_ids": [], "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 29, 57]}},
            True,
        ),
        ({"eagle_aux_hidden_state_layer_ids": 29}, False),
    ],
)
def test_aux_layers_vllm_never_reads_name_the_default_it_uses(setup, tmp_path, change, served):
    """vLLM 0.16.0's model runner reads only a non-empty top-level list; else the target's default. Ids only
    in eagle_config (the top level empty or silent) it serves so (review41a F8): a pass said as a note."""
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(tmp_path / "nested-drafter", _changed(DRAFTER, change))
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    assert "(2, 30, 58)" in findings(done)["drafter-aux-layers"]["message"]
    if served:
        assert done.returncode == 0 and findings(done)["drafter-aux-layers"]["result"] == "pass", done.stdout
        assert "vLLM ignores the drafter's eagle_config" in findings(done)["drafter-aux-layers"]["message"]
        return
    assert_clean_failure(done, 1)
    assert failed(done) == {"drafter-aux-layers"}, done.stdout


@pytest.mark.parametrize(
    ("drafter_change", "target_layers", "taken"),
    [
        ({"eagle_aux_hidden_state_layer_ids": [3, 3, 40]}, 61, 2),  # a repeated id is collected once
        ({"eagle_aux_hidden_state_layer_ids": [5, 44]}, 61, 2),
        ({"eagle_aux_hidden_state_layer_ids": [0, 9, 30, 60]}, 61, 4),
        ({"eagle_aux_hidden_state_layer_ids": None}, 6, 2),  # the target's default (2, 3, 3)
    ],
)
def test_aux_layers_giving_other_than_three_hidden_states_fail(setup, tmp_path, drafter_change, target_layers, taken):
    """vLLM 0.16.0's EAGLE-3 drafter's fc takes 3 x hidden size: the target returns one state per distinct
    layer id, and another number fails the first request's proposal after the whole load."""
    tree, library, _ = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    target = write_model(tmp_path / "target", {**DEEPSEEK_V3, "num_hidden_layers": target_layers})
    drafter = write_model(tmp_path / "drafter", _changed(DRAFTER, drafter_change))
    done = preflight(tree, library, *serve(target, drafter))
    assert_clean_failure(done, 1)
    assert failed(done) == {"drafter-aux-layers"}, done.stdout
    finding = findings(done)["drafter-aux-layers"]
    assert f"give {taken} hidden state(s)" in finding["message"]
    assert f"3 distinct layers below {target_layers}" in finding["fix"]


@pytest.mark.parametrize(
    ("drafter_change", "target_layers"),
    [
        ({"eagle_aux_hidden_state_layer_ids": [4, 20, 50]}, 61),
        ({"eagle_aux_hidden_state_layer_ids": None}, 7),  # (2, 3, 4)
        ({"eagle_aux_hidden_state_layer_ids": [5, 44], "eagle_config": {"use_aux_hidden_state": False}}, 61),
    ],
)
def test_aux_layers_giving_three_hidden_states_or_none_taken_pass(setup, tmp_path, drafter_change, target_layers):
    tree, library, _ = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    target = write_model(tmp_path / "target", {**DEEPSEEK_V3, "num_hidden_layers": target_layers})
    drafter = write_model(tmp_path / "drafter", _changed(DRAFTER, drafter_change))
    done = preflight(tree, library, *serve(target, drafter))
    assert "drafter-aux-layers" not in failed(done), done.stdout


@pytest.mark.parametrize(
    ("layers", "stages", "partition", "taken"),
    [
        ([1, 29, 57], "2", None, 1),  # the last of 2 stages holds layers 31-60
        ([40, 50, 60], "4", None, 2),  # 61 // 4: the last stage holds 46-60
        ([40, 50, 60], "2", "51,10", 1),  # VLLM_PP_LAYER_PARTITION: the last stage holds 51-60
    ],
)
def test_eagle3_under_pipeline_parallelism_counts_the_last_stages_layers_alone(
    setup, tmp_path, layers, stages, partition, taken
):
    """Only the last pipeline stage holds the drafter; the stages before it hand on hidden_states and
    residual alone, so their layers' aux hidden states never reach the drafter's fc."""
    tree, library, models = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "eagle_aux_hidden_state_layer_ids": layers})
    env = {} if partition is None else {"VLLM_PP_LAYER_PARTITION": partition}
    done = preflight(tree, library, *serve(models["deepseek"], drafter, "-pp", stages), env=env)
    assert_clean_failure(done, 1)
    assert failed(done) == {"drafter-aux-layers"}, done.stdout
    finding = findings(done)["drafter-aux-layers"]
    assert f"give {taken} hidden state(s) of the last pipeline stage's layers" in finding["message"]
    assert "serve without -pp" in finding["fix"]  # the drafter's 3 layers are right: the pipeline is not


@pytest.mark.parametrize(
    ("architecture", "module", "counted"),
    [
        ("DeepseekV32ForCausalLM", "deepseek_v2", True),  # V3.2: vLLM builds deepseek_v2's DeepseekV3ForCausalLM
        ("AcmeMoeForCausalLM", "deepseek_v2", True),
        ("DeepseekV3ForCausalLM", "llama", False),  # the name alone decides nothing: the registry's module does
    ],
)
def test_the_last_stage_rule_follows_the_class_the_registry_builds(setup, tmp_path, architecture, module, counted):
    """Whether the target's forward counts aux layer ids from the model's first layer on every pipeline stage is
    the patched deepseek_v2 forward's, whatever config.json calls the architecture."""

    tree, library, _ = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    registered = REGISTRY_PY.replace(
        '    "DeepseekV3ForCausalLM": ("deepseek_v2", "DeepseekV3ForCausalLM"),\n',
        f'    "{architecture}": ("{module}", "DeepseekV3ForCausalLM"),\n',
    )
    assert registered != REGISTRY_PY
    (tree / REGISTRY).write_text(registered)
    target = write_model(tmp_path / "target", {**DEEPSEEK_V3, "architectures": [architecture]})
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "eagle_aux_hidden_state_layer_ids": [1, 29, 57]})
    done = preflight(tree, library, *serve(target, drafter, "-pp", "2"))
    assert ("drafter-aux-layers" in failed(done)) is counted, done.stdout
    if counted:
        assert (
            "give 1 hidden state(s) of the last pipeline stage's layers"
            in findings(done)["drafter-aux-layers"]["message"]
        )


@pytest.mark.parametrize(
    ("layers", "stages", "partition"),
    [([31, 45, 60], "2", None), ([1, 29, 57], "1", None), ([10, 20, 30], "2", "5,56"), ([1, 29, 57], "2", "1,60")],
)
def test_eagle3_under_pipeline_parallelism_with_the_last_stages_layers_passes(
    setup, tmp_path, layers, stages, partition
):
    tree, library, models = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "eagle_aux_hidden_state_layer_ids": layers})
    env = {} if partition is None else {"VLLM_PP_LAYER_PARTITION": partition}
    done = preflight(tree, library, *serve(models["deepseek"], drafter, "-pp", stages), env=env)
    assert "drafter-aux-layers" not in failed(done), done.stdout


@pytest.mark.parametrize(
    ("architectures", "fails"),
    [
        (["EagleLlamaForCausalLM"], True),  # EAGLE-1's: built as Eagle3EagleLlamaForCausalLM, registered nowhere
        (["Eagle3EagleLlamaForCausalLM"], True),
        (["LlamaForCausalLM"], False),  # built as Eagle3LlamaForCausalLM
        (["Foo", "LlamaForCausalLMEagle3"], False),  # vLLM builds the first its registry holds
    ],
)
def test_the_drafter_is_looked_up_by_the_name_vllm_gives_it_under_eagle3(setup, tmp_path, architectures, fails):
    tree, library, models = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "architectures": architectures})
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    assert ("drafter-architecture" in failed(done)) is fails, done.stdout
    if fails:
        assert "Eagle3EagleLlamaForCausalLM" in findings(done)["drafter-architecture"]["message"]


@pytest.mark.parametrize(
    ("heads", "kv_heads", "tp", "says"),
    [
        (56, 8, 16, "56 attention heads do not divide by -tp 16"),
        (48, 6, 4, "6 KV heads do not split over -tp 4"),
        (48, 3, 4, "3 KV heads do not split over -tp 4"),
        (40, None, 16, "40 attention heads do not divide by -tp 16"),  # KV heads default to the heads
    ],
)
def test_a_drafter_whose_heads_the_tensor_parallel_size_cannot_split_fails(setup, tmp_path, heads, kv_heads, tp, says):
    """vLLM builds the drafter in the target's -tp group after the target's load; its attention asserts the split."""
    tree, library, models = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(
        tmp_path / "drafter", _changed(DRAFTER, {"num_attention_heads": heads, "num_key_value_heads": kv_heads})
    )
    finding = drafter_verdict(preflight(tree, library, *serve(models["deepseek"], drafter, "-tp", str(tp))), fails=True)
    assert says in finding["message"]
    assert "-tp that divides" in finding["fix"]


@pytest.mark.parametrize(("heads", "kv_heads", "tp"), [(48, 5, 1), (48, 96, 1), (48, 36, 4), (40, 16, 8)])
def test_a_drafter_whose_kv_heads_do_not_divide_its_heads_fails_at_any_tp(setup, tmp_path, heads, kv_heads, tp):
    """review42a R6: vLLM's Attention asserts num_heads % num_kv_heads == 0 building the drafter (after the
    target's load), KV heads above the heads included; the static path checked them against -tp only."""
    tree, library, models = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(
        tmp_path / "drafter", {**DRAFTER, "num_attention_heads": heads, "num_key_value_heads": kv_heads}
    )
    finding = drafter_verdict(preflight(tree, library, *serve(models["deepseek"], drafter, "-tp", str(tp))), fails=True)
    assert f"its {kv_heads} KV heads do not divide its {heads} heads" in finding["message"], finding
    assert "after the target's load" in finding["message"], finding
    assert "num_key_value_heads must divide num_attention_heads" in finding["fix"], finding


@pytest.mark.parametrize(("heads", "kv_heads", "tp"), [(56, 8, 8), (64, 8, 16), (48, 3, 6), (56, 8, 1)])
def test_a_drafter_whose_heads_the_tensor_parallel_size_splits_passes(setup, tmp_path, heads, kv_heads, tp):
    tree, library, models = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter = write_model(
        tmp_path / "drafter", {**DRAFTER, "num_attention_heads": heads, "num_key_value_heads": kv_heads}
    )
    done = preflight(tree, library, *serve(models["deepseek"], drafter, "-tp", str(tp)))
    assert "drafter-architecture" not in failed(done), done.stdout


# llama.py's LlamaMLP as 0.16.0 has it (the EAGLE-3 drafter's layers are llama.py's), and one taking more
LLAMA_MLP = """
class LlamaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size, hidden_act, quant_config=None):
        super().__init__()
        if hidden_act != "silu":
            raise ValueError(f"Unsupported activation: {hidden_act}. Only silu is supported for now.")
        self.act_fn = SiluAndMul()
"""
LLAMA_MLP_ANY = """
class LlamaMLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size, hidden_act, quant_config=None):
        super().__init__()
        self.act_fn = get_act_and_mul_fn(hidden_act)
"""


@pytest.mark.parametrize(
    ("llama", "act", "fails"),
    [
        (LLAMA_MLP, "gelu", True),
        (LLAMA_MLP, "relu\u202e", True),  # shown escaped
        (LLAMA_MLP, "silu", False),
        (LLAMA_MLP, None, False),  # absent: LlamaConfig's default, silu
        (LLAMA_MLP_ANY, "gelu", False),  # the tree's own rule: none here
        (None, "gelu", False),  # no llama.py in the tree: not judged
    ],
)
def test_a_drafter_whose_activation_the_trees_llama_mlp_refuses_fails(setup, tmp_path, llama, act, fails):
    """vLLM builds the drafter's LlamaMLP only after the target's load; it raises for a hidden_act it lacks."""
    tree, library, models = setup
    applied(tree, library, {LLAMA: llama})
    drafter = write_model(tmp_path / "drafter", _changed(DRAFTER, {"hidden_act": act}))
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    finding = drafter_verdict(done, fails=fails)
    if finding is None:
        return
    shown = act.replace("\u202e", "\\u202e")
    assert f"its hidden_act '{shown}' is not silu" in finding["message"]
    assert "after the target's load" in finding["message"]
    assert "trained with hidden_act silu" in finding["fix"]


# llama.py's LlamaAttention and llama_eagle3.py's draft-layer count as 0.11-0.34 have them: a non-empty
# layer_types is indexed by the draft layer, from 0, and asserted to hold it
LLAMA_ATTENTION = """
class LlamaAttention(nn.Module):
    def __init__(self, config, hidden_size, num_heads, num_kv_heads, prefix=""):
        layer_idx = extract_layer_index(prefix)
        if layer_types := getattr(config, "layer_types", None):
            if hasattr(config, "target_layer_count"):
                effective_layer_idx = layer_idx - config.target_layer_count
            else:
                effective_layer_idx = layer_idx
            assert effective_layer_idx < len(layer_types), "out of bounds for layer_types"
"""
EAGLE3_LAYER_COUNT = "self.config.target_layer_count = target_layer_num\n"


@pytest.mark.parametrize(
    ("layer_types", "layers", "says"),
    [
        (["full_attention"], 2, "its layer_types gives 1 entry for its 2 layers"),
        ({"0": "full_attention"}, 1, "its layer_types is no list"),  # vLLM indexes it by 0: KeyError
        (5, 1, "its layer_types is no list"),  # len(5): TypeError
        ("a", 3, "its layer_types is no list"),  # a string shorter than the layers: the assert
        (["full_attention"] * 2, 2, None),
        (["full_attention"] * 4, 1, None),  # more than its layers: the first read
        ([], 2, None),  # empty: vLLM reads none
        ("full_attention", 2, None),  # a long enough string builds (indexed by character)
    ],
)
def test_a_drafter_layer_types_shorter_than_its_layers_fails(setup, tmp_path, layer_types, layers, says):
    """vLLM builds the drafter's LlamaAttention only after the target's load; it asserts each draft layer
    has a layer_types entry (review38 B5's class)."""
    tree, library, models = setup
    applied(tree, library, {LLAMA: LLAMA_ATTENTION, EAGLE3: EAGLE3_LAYER_COUNT})
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "layer_types": layer_types, "num_hidden_layers": layers})
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    finding = drafter_verdict(done, fails=says is not None)
    if finding is None:
        return
    assert says in finding["message"] and "after the target's load" in finding["message"]
    assert (
        finding["fix"]
        == f"give the drafter's config.json layer_types one entry a layer ({layers}), or drop layer_types"
    )


@pytest.mark.parametrize("where", ["llama.py", "llama_eagle3.py", "registry"])
def test_a_short_layer_types_is_not_judged_where_the_tree_does_not_show_the_rule(setup, tmp_path, where):
    """No assert in llama.py, no draft-layer count in llama_eagle3.py (layer_types then indexed otherwise), or a
    drafter class not built of llama.py's layers: not judged."""
    tree, library, models = setup
    layers = "" if where == "llama_eagle3.py" else EAGLE3_LAYER_COUNT
    applied(tree, library, {LLAMA: "" if where == "llama.py" else LLAMA_ATTENTION, EAGLE3: layers})
    models_dir = tree / "vllm" / "model_executor" / "models"
    if where == "registry":
        registry = models_dir / "registry.py"
        registry.write_text(
            registry.read_text().replace(
                '("llama_eagle3", "Eagle3LlamaForCausalLM")', '("qwen3_eagle3", "Eagle3Qwen3ForCausalLM")'
            )
        )
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "layer_types": ["full_attention"], "num_hidden_layers": 2})
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    assert done.returncode == 0 and failed(done) == set(), done.stdout


# llama_eagle3.py's layout as 0.13-0.18 have it (layer 0's q/k/v take embeds and hidden states, 2 x hidden
# size; the fc 3 x the target's hidden size; a checkpoint's midlayer is layer 0; d2t the draft-to-target map)
EAGLE3_WEIGHTS = """
qkv_input_size = 2 * self.hidden_size if layer_idx == 0 else self.hidden_size
fc_input_size = self.config.hidden_size * 3
name = name.replace("midlayer.", "layers.0.")
if "d2t" in name:
"""
# a small drafter of DeepSeek-V3 (hidden 7168): 4 heads of 16, 2 KV heads, 512 draft ids
SMALL_DRAFTER = {**DRAFTER, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2}
SMALL_DRAFTER |= {"intermediate_size": 128, "draft_vocab_size": 512}
SMALL_WEIGHTS = eagle3_tensors(64, 32, 128, 512, 7168, 129280)

TRAINED_WITH_HEAD_DIM_8 = {
    "midlayer.self_attn.q_proj.weight": [32, 128],
    "midlayer.self_attn.k_proj.weight": [16, 128],
    "midlayer.self_attn.v_proj.weight": [16, 128],
    "midlayer.self_attn.o_proj.weight": [64, 32],
}


def weights_verdict(done, config: dict, says: str | None) -> dict | None:
    """drafter_verdict of a weights test (`says`: the failure expected, None: a pass). A drafter without
    fc (use_aux_hidden_state off) fails drafter-hidden-size alone: its 64-wide head takes the 7168-wide
    states as they come (None then too)."""
    if "eagle_config" in config:
        assert failed(done) == {"drafter-hidden-size"}, done.stdout
        return None
    return drafter_verdict(done, fails=says is not None)


@pytest.mark.parametrize(
    ("change", "config", "says"),
    [
        ({}, {}, None),
        (
            {"fc.weight": [64, 3 * 4096]},
            {},
            "fc.weight is [64, 12288] (model.safetensors), where its config.json builds [64, 21504]",
        ),
        ({"lm_head.weight": [1024, 64]}, {}, "lm_head.weight is [1024, 64]"),  # draft_vocab_size 512: an assert
        ({"d2t": [1000]}, {}, "d2t is [1000] (model.safetensors), where its config.json builds [512]"),
        ({"midlayer.self_attn.q_proj.weight": [32, 128]}, {}, "builds [at least 64, 128]"),  # trained with head_dim 8
        ({"midlayer.self_attn.q_proj.weight": [64, 64]}, {}, "builds [at least 64, 128]"),  # layer 0 takes 2 x 64
        ({"midlayer.self_attn.o_proj.weight": [64, 32]}, {}, "builds [64, at least 64]"),
        ({"midlayer.mlp.down_proj.weight": [32, 128]}, {}, "builds [64, at least 128]"),
        ({"midlayer.hidden_norm.weight": [32]}, {}, "builds [64]"),
        ({"embed_tokens.weight": [1000, 64]}, {}, "embed_tokens.weight is [1000, 64]"),
        ({"layers.1.mlp.up_proj.weight": [128, 64]}, {}, "its weights hold layers.1.mlp.up_proj.weight"),
        ({"fc.weight": [64, 64]}, {"eagle_config": {"use_aux_hidden_state": False}}, None),  # vLLM skips fc.
        ({"t2d": [7]}, {}, None),  # vLLM skips it
        ({"midlayer.self_attn.q_proj.weight": [128, 128]}, {}, None),  # larger: its loader narrows it
        ({"midlayer.self_attn.k_proj.weight": [64, 128]}, {}, None),
        (TRAINED_WITH_HEAD_DIM_8, {"head_dim": 8}, None),  # head_dim read from the config (else 64 // 4)
        ({"midlayer.self_attn.q_proj.weight": [32, 128]}, {"num_attention_heads": None}, None),  # heads not given
        ({"fc.weight": [64, 64]}, {"quantization_config": {"quant_method": "fp8"}}, None),  # quantized: not judged
        ({"layers.0.self_attn.q_proj.weight": [64, 128]}, {"num_hidden_layers": 2}, None),
    ],
)
def test_drafter_weights_whose_shapes_its_config_does_not_build_fail(setup, tmp_path, change, config, says):
    """vLLM loads the drafter's weights (llama_eagle3.py's loaders) only after the target's load; the
    safetensors header gives each tensor's shape (review38 B5's class)."""
    tree, library, models = setup
    applied(tree, library, {EAGLE3: EAGLE3_WEIGHTS})
    drafter = weighted_model(tmp_path / "drafter", _changed(SMALL_DRAFTER, config), {**SMALL_WEIGHTS, **change})
    finding = weights_verdict(preflight(tree, library, *serve(models["deepseek"], drafter)), config, says)
    if finding is None:
        return
    assert says in finding["message"] and "after the target's load" in finding["message"], finding
    assert "config.json" in finding["fix"]


@pytest.mark.parametrize("where", ["layout", "bin", "index"])
def test_drafter_weights_are_not_judged_where_the_tree_or_the_files_do_not_tell(setup, tmp_path, where):
    """Another llama_eagle3.py layout; weights vLLM does not read as safetensors; a shard its index leaves out."""
    tree, library, models = setup
    eagle3 = EAGLE3_WEIGHTS.replace("name.replace", "name.rename") if where == "layout" else EAGLE3_WEIGHTS
    applied(tree, library, {EAGLE3: eagle3})
    drafter = weighted_model(tmp_path / "drafter", SMALL_DRAFTER, {**SMALL_WEIGHTS, "fc.weight": [64, 64]})
    if where == "bin":
        (drafter / "model.safetensors").rename(drafter / "pytorch_model.bin")
    if where == "index":
        (drafter / "model.safetensors").rename(drafter / "old.safetensors")
        write_weights(drafter, SMALL_WEIGHTS)
        (drafter / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"d2t": "model.safetensors"}}))
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    assert done.returncode == 0 and failed(done) == set(), done.stdout


# llama_eagle3.py's renames of tensor names and its qkv bias rule, llama.py's o_proj and MLP bias rules (0.16.0)
EAGLE3_NAMES = (
    EAGLE3_WEIGHTS
    + """
qkv_bias = getattr(config, "attention_bias", False)
if "t2d" in name:
elif "lm_head" not in name:
    name = "model." + name
"""
)
LLAMA_BIASES = 'bias_o_proj = attention_bias\nbias=getattr(config, "mlp_bias", False)\n'
QKV_BIASES = {f"midlayer.self_attn.{p}_proj.bias": [n] for p, n in (("q", 64), ("k", 32), ("v", 32))}


@pytest.mark.parametrize(
    ("change", "config", "says"),
    [
        (QKV_BIASES, {}, "its weights hold midlayer.self_attn.k_proj.bias (model.safetensors) (and 2 more)"),
        (QKV_BIASES, {"attention_bias": True}, None),
        ({"midlayer.self_attn.o_proj.bias": [64]}, {}, "midlayer.self_attn.o_proj.bias"),
        ({"midlayer.self_attn.o_proj.bias": [64]}, {"bias": True}, None),  # llama.py: attention_bias or bias
        ({"midlayer.self_attn.q_proj.bias": [64]}, {"bias": True}, "q_proj.bias"),  # the drafter's qkv: not bias
        ({"midlayer.mlp.up_proj.bias": [128]}, {}, "midlayer.mlp.up_proj.bias"),
        ({"midlayer.mlp.up_proj.bias": [128]}, {"mlp_bias": True}, None),
        ({"lm_head.bias": [512]}, {}, "its weights hold lm_head.bias"),
        ({"extra_head.weight": [64, 64]}, {}, "its weights hold extra_head.weight"),
        ({"midlayer.self_attn.q_norm.weight": [16]}, {}, "midlayer.self_attn.q_norm.weight"),
        ({"model.embed_tokens.weight": [129280, 64]}, {}, "model.embed_tokens.weight"),
        ("model.", {}, "its weights hold model.d2t (model.safetensors) (and 12 more)"),
        ("layers.0.", {}, None),  # the speculators layout: layers.0.* as built
        ({"midlayer.self_attn.rotary_emb.inv_freq": [8], "mask_hidden": [192]}, {}, None),  # vLLM skips them
        ({"embed_tokens.weight": [129280, 64]}, {}, None),
        ({"fc.weight": [64, 64]}, {"eagle_config": {"use_aux_hidden_state": False}}, None),  # skipped: "fc."
    ],
)
def test_drafter_weights_whose_names_the_built_drafter_has_no_parameter_for_fail(setup, tmp_path, change, config, says):
    """vLLM's llama_eagle3.py renames each tensor's name and looks it up among the parameters its
    config builds, after the target's load: a bias the config does not build, a head it has not, a
    layout it does not map (review39 C9)."""
    tree, library, models = setup
    applied(tree, library, {EAGLE3: EAGLE3_NAMES, LLAMA: LLAMA_BIASES})
    weights = {**SMALL_WEIGHTS, **change} if isinstance(change, dict) else _renamed(SMALL_WEIGHTS, change)
    drafter = weighted_model(tmp_path / "drafter", _changed(SMALL_DRAFTER, config), weights)
    finding = weights_verdict(preflight(tree, library, *serve(models["deepseek"], drafter)), config, says)
    if finding is None:
        return
    assert says in finding["message"] and "no parameter for" in finding["message"], finding
    assert "after the target's load" in finding["message"] and "names vLLM maps" in finding["fix"], finding


def _renamed(weights: dict, prefix: str) -> dict:
    """Every tensor but lm_head's under `prefix`; layers.0. takes midlayer.'s place."""
    if prefix == "layers.0.":
        return {name.replace("midlayer.", prefix): shape for name, shape in weights.items()}
    return {name if name.startswith("lm_head") else prefix + name: shape for name, shape in weights.items()}


@pytest.mark.parametrize("where", ["names", "qkv-bias"])
def test_drafter_weight_names_are_not_judged_where_the_tree_does_not_show_the_renames(setup, tmp_path, where):
    """A llama_eagle3.py without 0.16.0's renames, or (0.13.0) without its qkv bias rule: not judged."""
    tree, library, models = setup
    marker = '"model." + name' if where == "names" else 'getattr(config, "attention_bias", False)'
    applied(tree, library, {EAGLE3: EAGLE3_NAMES.replace(marker, "False" if where == "qkv-bias" else '"model." + nom')})
    extra_head = {"extra_head.weight": [64]} if where == "names" else {}
    drafter = weighted_model(tmp_path / "drafter", SMALL_DRAFTER, {**SMALL_WEIGHTS, **QKV_BIASES, **extra_head})
    done = preflight(tree, library, *serve(models["deepseek"], drafter))
    assert done.returncode == 0 and failed(done) == set(), done.stdout


# quantization/__init__.py and two method modules as 0.16.0 lays them out (a method mapped to its class,
# imported from its module; get_config_filenames the files get_quant_config looks for)
QUANT_INIT = """
def get_quantization_config(quantization: str):
    from .awq import AWQConfig
    from .fp8 import Fp8Config
    from vllm.model_executor.layers.quantization.gptq.gptq import GPTQConfig
    method_to_config = {"awq": AWQConfig, "fp8": Fp8Config, "gptq": GPTQConfig}
    return method_to_config[quantization]
"""
QUANT_FILES = {
    "awq.py": "class AWQConfig:\n    def get_config_filenames():\n"
    '        return ["quant_config.json", "quantize_config.json"]\n',
    "fp8.py": "class Fp8Config:\n    def get_config_filenames():\n        return []\n",
    "gptq/gptq.py": 'class GPTQConfig:\n    def get_config_filenames():\n        return ["quantize_config.json"]\n',
}


QUANTIZATION = "vllm/model_executor/layers/quantization"


def quantized_drafter_preflight(setup, tmp_path: Path, method: str, files: list[str], change: dict, tree_files=None):
    """preflight of a serve of the DeepSeek-V3 target with an EAGLE-3 drafter (DRAFTER with `change`, and
    `files` in its directory) quantized by `method`, on the applied tree with 0.16.0's quantization layout
    and `tree_files`."""
    tree, library, models = setup
    layout = {f"{QUANTIZATION}/{name}": text for name, text in {"__init__.py": QUANT_INIT, **QUANT_FILES}.items()}
    applied(tree, library, {**layout, **(tree_files or {})})
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, **change})
    for name in files:
        (drafter / name).write_text("{}")
    spec = json.dumps({"method": "eagle3", "model": str(drafter), "num_speculative_tokens": 3, "quantization": method})
    return preflight(tree, library, "vllm", "serve", str(models["deepseek"]), "--speculative-config", spec)


@pytest.mark.parametrize(
    ("method", "files", "change", "says"),
    [
        ("awq", [], {}, "no quant_config.json or quantize_config.json"),
        ("gptq", ["quant_config.json"], {}, "no quantize_config.json"),  # awq's file, not gptq's
        ("awq", ["quant_config.json", "x-quantize_config.json"], {}, "holds 2 quantization files for awq"),
        ("awq", ["quantize_config.json"], {}, None),
        ("gptq", ["quantize_config.json"], {}, None),
        ("awq", [], {"quantization_config": {"quant_method": "awq", "bits": 4}}, None),  # vLLM reads it there
        ("fp8", [], {}, None),  # a method needing no file
        ("nvfp4", [], {}, None),  # a method the tree does not map: not judged here
    ],
)
def test_a_speculative_quantization_the_drafter_has_no_config_for_fails(setup, tmp_path, method, files, change, says):
    """vLLM reads the drafter's quantization config only building it, after the target's load (review38 B11)."""
    done = quantized_drafter_preflight(setup, tmp_path, method, files, change)
    finding = drafter_verdict(done, fails=says is not None)
    if finding is None:
        return
    assert says in finding["message"] and "after the target's load" in finding["message"]
    assert ("keep one of" if "holds" in says else 'drop "quantization"') in finding["fix"]


# get_quant_config's read of hf_overrides as 0.12-0.17 write it (no guard for the draft config's function), and
# as 0.22 on guard it
UNGUARDED = "def get_quant_config(model_config, load_config):\n    return model_config.hf_overrides.get('f', None)\n"
GUARDED = (
    "def get_quant_config(model_config, load_config):\n    hf_overrides = model_config.hf_overrides\n"
    "    if not isinstance(hf_overrides, dict):\n        raise ValueError('x')\n    return hf_overrides.get('f')\n"
)


@pytest.mark.parametrize(
    ("utils", "method", "files", "change", "fails"),
    [
        (UNGUARDED, "fp8", [], {}, True),
        (UNGUARDED, "awq", ["quant_config.json"], {}, True),  # its file found, but vLLM fails before it looks
        (GUARDED, "fp8", [], {}, False),
        (GUARDED, "awq", ["quant_config.json"], {}, False),
        (UNGUARDED, "fp8", [], {"quantization_config": {"quant_method": "fp8"}}, False),
        (UNGUARDED, "fp8", ["hf_quant_config.json"], {}, False),  # ModelOpt's: vLLM reads it as the config's
    ],
)
def test_a_speculative_quantization_fails_where_the_tree_reads_hf_overrides_unguarded(
    setup, tmp_path, utils, method, files, change, fails
):
    """0.12-0.17: the draft config's hf_overrides is a function; get_quant_config calls .get on it (review42a R5)."""
    done = quantized_drafter_preflight(
        setup, tmp_path, method, files, change, {"vllm/model_executor/model_loader/weight_utils.py": utils}
    )
    finding = drafter_verdict(done, fails=fails)
    if not fails:
        assert finding is None or "hf_overrides" not in finding["message"], finding
        return
    assert finding is not None and "hf_overrides" in finding["message"], done.stdout
    assert "after the target's load" in finding["message"] and 'drop "quantization"' in finding["fix"], finding


@pytest.mark.parametrize(
    ("fc", "fails"),
    [
        (b"fc_input_size = self.config.target_hidden_size * 3\n", True),
        (b"self.fc_input_size = target_hidden_size * self.num_aux_hidden_states\n", False),
    ],
)
def test_the_aux_layer_count_follows_the_trees_own_drafter(setup, tmp_path, fc, fails):
    """A vLLM whose drafter sizes its fc from the drafter's config is not held to 3."""
    tree, library, _ = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    drafter_file = tree / "vllm" / "model_executor" / "models" / "llama_eagle3.py"
    drafter_file.parent.mkdir(parents=True, exist_ok=True)
    drafter_file.write_bytes(fc)
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "eagle_aux_hidden_state_layer_ids": [5, 44]})
    done = preflight(tree, library, *serve(write_model(tmp_path / "target", DEEPSEEK_V3), drafter))
    assert ("drafter-aux-layers" in failed(done)) is fails, done.stdout


# DeepseekV2Model.forward as the set's patch wrote it up to session 28, and as upstream 0.18.0 has it: the
# aux hidden state of layer 0 adds the residual, which is None before the first layer
FORWARD = """
    def forward(self, hidden_states):
        residual = None
        aux_hidden_states = []
        for idx, layer in enumerate(self.layers):
            if idx in self.aux_hidden_state_layers:
                aux_hidden_states.append(ADDED)
            hidden_states, residual = layer(hidden_states, residual)
        return hidden_states, aux_hidden_states
"""
UNGUARDED = "hidden_states + residual"
GUARDED = "hidden_states if residual is None else hidden_states + residual"


@pytest.mark.parametrize(
    ("added", "layers", "target", "fails"),
    [
        (UNGUARDED, [0, 29, 57], "deepseek", True),
        (UNGUARDED, [0, 29, 57], "kimi", True),  # Kimi-K2.5's language model is DeepseekV2Model
        (GUARDED, [0, 29, 57], "deepseek", False),
        (UNGUARDED, [1, 29, 57], "deepseek", False),
    ],
)
def test_aux_layer_zero_fails_where_the_targets_forward_adds_a_residual_that_is_still_none(
    tmp_path, added, layers, target, fails
):
    """Review38 B1: the target's first forward (vLLM's start-up profile run, after both loads) raised
    TypeError for a drafter trained on layer 0; the verdict follows the tree's own forward."""
    forward = FORWARD.replace("ADDED", added).lstrip("\n")
    deepseek = DEEPSEEK_PATCHED.replace(
        "    def forward(self, x):\n        return [x for _ in self.aux_hidden_state_layers]\n", forward
    )
    assert deepseek != DEEPSEEK_PATCHED
    tree, library = write_eagle3_setup(tmp_path, patched={DEEPSEEK: deepseek})
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    model = write_model(tmp_path / "target", KIMI_K25 if target == "kimi" else DEEPSEEK_V3)
    drafter = write_model(
        tmp_path / "drafter",
        {**(KIMI_DRAFTER if target == "kimi" else DRAFTER), "eagle_aux_hidden_state_layer_ids": layers},
    )
    done = preflight(tree, library, *serve(model, drafter))
    assert ("drafter-aux-layers" in failed(done)) is fails, done.stdout
    if fails:
        assert_clean_failure(done, 1)
        finding = findings(done)["drafter-aux-layers"]
        assert "include layer 0" in finding["message"] and "deepseek_v2.py" in finding["message"], finding
        assert finding["fix"] == "use a drafter trained on layers from 1 up"


def test_a_pythonpath_set_in_patchkits_own_environment_and_unset_by_the_launch_fails_launch_target(setup, tmp_path):
    from helpers import write_tree

    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    python = _venv_running(tmp_path / "other", tmp_path / "venv")
    write_tree(tmp_path / "other")
    launch = serve(models["deepseek"], models["drafter"])[2:]
    command = ["env", "-u", "PYTHONPATH", str(python.parent / "vllm"), "serve", *launch]
    done = preflight(tree, library, *command, env={"PYTHONPATH": str(tree)})
    assert failed(done) == {"launch-target"}, done.stdout


def test_a_missing_model_and_a_missing_drafter_are_both_named_each_with_its_hint(setup, tmp_path):
    # review 5 M2: only the model was named; the drafter showed up once the model was found
    tree, library, _ = setup
    command = ("env", f"HF_HOME={tmp_path / 'empty-hf-home'}", *serve("lab/not-here-target", tmp_path / "gone-drafter"))
    done = preflight(tree, library, *command)
    assert_clean_failure(done, 4)
    models = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "models"]
    assert ["gone-drafter" in f["message"] for f in models] == [False, True]
    assert "lab/not-here-target" in models[0]["message"] and all(f["fix"] for f in models)
    text = preflight(tree, library, *command, fmt="text")
    assert_clean_failure(text, 4)
    assert "lab/not-here-target" in text.stdout + text.stderr and "gone-drafter" in text.stdout + text.stderr


def test_offline_a_missing_tokenizer_model_and_drafter_are_each_named(setup, tmp_path):
    # the class of review 5 M2: offline, a tokenizer found nowhere hid the model and the drafter
    tree, library, models = setup
    offline = ("env", "HF_HUB_OFFLINE=1", f"HF_HOME={tmp_path / 'empty-hf-home'}")
    missing = (*offline, *serve("lab/gone-model", tmp_path / "gone-drafter", "--tokenizer", "lab/gone-tok"))
    done = preflight(tree, library, *missing)
    assert_clean_failure(done, 4)
    said = [f["message"] for f in json.loads(done.stdout)["findings"] if f["check"] == "models"]
    assert [any(name in m for m in said) for name in ("lab/gone-model", "lab/gone-tok", "gone-drafter")] == [True] * 3
    found = preflight(
        tree, library, *offline, *serve(models["kimi"], models["kimi-drafter"], "--tokenizer", "lab/gone-tok")
    )
    assert_clean_failure(found, 4)
    assert "lab/gone-tok" in " ".join(f["message"] for f in json.loads(found.stdout)["findings"] if not f["ok"])
    assert set(findings(found)) >= DRAFTER_CHECKS  # the models found are still checked


def test_a_command_wider_than_the_terminal_is_continued_between_its_words(setup, tmp_path, monkeypatch):
    # a new user at 80 columns (issue 22): "`pipx run --spec huggingface_hub hf download ... conf" / "ig.json`";
    # new-user 14 item 22: a command broken at its spaces pasted as two commands: each line ends in ` \`
    tree, library, models = setup
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    model = "deepseek-ai/DeepSeek-V3"
    argv = ["preflight", "--target", tree, "--patches", library, "--", *serve(model, models["drafter"])]
    code, drawn = on_a_terminal(argv, width=80, drop_env=("COLUMNS", "LINES", "FORCE_COLOR"))
    shown = terminal_screen(drawn)
    assert code == 4, shown
    # wider than 80: only a word no line holds (this test's long temporary path), never cut
    wide = [line.strip().removesuffix(" \\") for line in shown.splitlines() if len(line) > 80]
    assert all(" " not in word for word in wide), shown
    pasted = re.sub(r" \\\n\s*", " ", shown)  # the shell joins a line ending in ` \` with the next
    pasted = pasted.replace("\\\n", "")  # and a word broken by a bare `\` (wider than a line: 11m)
    assert f"`pipx run --spec huggingface_hub hf download {model} config.json`" in pasted, shown
    assert f"`patchkit apply --target {tree} --patches {library}`" in pasted, shown


def test_a_missing_hub_model_says_how_to_fetch_its_config_alone_and_every_path_copies_whole(
    setup, request, monkeypatch
):
    """At 80 columns the cache path is whole (never elided, never folded mid-word), and the fix is a
    command: only config.json is read, not the weights. Said once: the finding is not repeated as an error."""
    tree, library, models = setup
    # a path that fits a line of 80: tmp_path's length varies (/dev/shm in test-fast, pytest's run number)
    short = Path(tempfile.mkdtemp(prefix="hub-"))
    request.addfinalizer(lambda: shutil.rmtree(short, ignore_errors=True))
    cache = short / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    argv = ["preflight", "--target", tree, "--patches", library, "--", *serve("lab/gone-model", models["drafter"])]
    code, drawn = on_a_terminal(argv, width=80, drop_env=("COLUMNS", "LINES", "FORCE_COLOR"))
    shown = terminal_screen(drawn)
    assert code == 4, shown
    naming = [line for line in shown.splitlines() if f"{cache}/" in line]
    assert len(naming) == 1 and all(len(line) <= 80 for line in naming), shown
    assert shown.count("`hf download lab/gone-model config.json`") == 1, shown


def test_the_hub_model_hint_says_where_hf_comes_from(setup, tmp_path, monkeypatch):
    """review 7 L4: `hf` is not in patchkit's venv nor a pipx install: the hint says how to get it,
    with a command a pip or pipx user can copy whole."""
    tree, library, models = setup
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    done = preflight(tree, library, *serve("lab/gone-model", models["drafter"]), fmt="text")
    assert_clean_failure(done, 4)
    said = " ".join((done.stdout + done.stderr).split())
    assert "`hf` comes with huggingface_hub" in said, said
    assert "`python3 -m pip install huggingface_hub`" in said, said
    assert "`pipx run --spec huggingface_hub hf download lab/gone-model config.json`" in said, said


def test_a_target_eagle3_refuses_because_of_hf_overrides_has_a_fix(setup):
    """New-user 14 (item 24, related): `--hf-overrides '{"model_type": "mistral"}'` failed the whitelist
    with no fix line at all."""
    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    override = json.dumps({"model_type": "mistral"})
    done = preflight(tree, library, *serve(models["deepseek"], models["drafter"], "--hf-overrides", override))
    whitelist = findings(done)["whitelist"]
    assert not whitelist["ok"] and "'mistral'" in whitelist["message"], whitelist
    assert whitelist["fix"].startswith("--hf-overrides sets model_type 'mistral': drop that override"), whitelist


def test_a_relative_drafter_not_found_names_the_directory_it_was_read_in(setup, tmp_path):
    """New-user trial 16, 6h: from /tmp, `./eagle3-drafter` gave `looked at: eagle3-drafter/config.json`,
    not saying it was read relative to /tmp (where the user had no drafter)."""
    tree, library, models = setup
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    command = serve(models["deepseek"], "./eagle3-drafter")
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--", *command, cwd=elsewhere
    )
    assert_clean_failure(done, 4)
    said = " ".join((done.stdout + done.stderr).split())
    assert f"(looked at: eagle3-drafter/config.json under the current directory {elsewhere})" in said, said


def test_the_launch_target_fix_quotes_a_python_path_with_a_space(setup, tmp_path):
    """Review 13 L5: the fix named `--python /x/sp ace/bin/python` unquoted: pasted, it breaks."""
    import shlex

    tree, library, models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    _site, script = _venv_with_vllm(tmp_path / "stock venv")
    python = tmp_path / "stock venv" / "bin" / "python"
    # what pip writes for a venv path with a space: a /bin/sh wrapper naming the interpreter
    script.write_text(f"#!/bin/sh\n'''exec' {shlex.quote(str(python))} \"$0\" \"$@\"\n' '''\nimport sys\n")
    done = preflight(tree, library, str(script), *serve(models["deepseek"], models["drafter"])[1:])
    assert_clean_failure(done, 1)
    assert f"--python {shlex.quote(str(python))})" in findings(done)["launch-target"]["fix"], done.stdout


def test_a_model_config_that_is_a_fifo_is_refused_with_what_to_do(setup):
    """review30 L2: "model config .../config.json: not a regular file (a fifo, a device or a directory)",
    and no hint."""
    tree, library, models = setup
    config = models["deepseek"] / "config.json"
    config.unlink()
    os.mkfifo(config)
    done = preflight(tree, library, *serve(models["deepseek"], models["drafter"]), fmt="text")
    said = " ".join(done.stderr.split())
    assert done.returncode == 2 and f"model config {config}: not a regular file" in said, said
    assert f"hint: put the file itself there (vLLM reads {config} as a file too)" in said, said


def test_vllms_own_answers_load_the_bytecode_the_launch_would(monkeypatch):
    """vllm-validation and vLLM's model questions run with the launch's options that change which
    bytecode its imports load (under --check-hash-based-pycs never a stale checked-hash .pyc runs)."""
    seen: list[list[str]] = []

    def worker(*args, options=(), **kwargs):
        seen.append(list(options))
        return {"status": "ok"}

    monkeypatch.setattr(validation, "run_worker", worker)
    api = ["-m", "vllm.entrypoints.openai.api_server", "--model", "m"]
    launch = parse(["python3", "-X", "dev", "-Xpycache_prefix=/x", "--check-hash-based-pycs", "never", *api])
    validation.engine_validation(sys.executable, launch)
    validation.model_interface(sys.executable, launch, ["DeepseekV3ForCausalLM"], "supports_eagle3")
    assert seen == [["-Xpycache_prefix=/x", "--check-hash-based-pycs", "never"]] * 2
    validation.engine_validation(sys.executable, parse(["python3", *api]))
    assert seen[-1] == []


def test_stale_checked_hash_bytecode_of_the_guard_fails_a_launch_that_never_checks_hashes(setup, tmp_path):
    """The guard module's own checked-hash .pyc of other bytes: a launch run with
    --check-hash-based-pycs never runs it in place of patchkit_guard.py, so preflight fails naming it."""
    tree, library, _models = setup
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    older = (tree / "patchkit_guard.py").read_text() + "\nOLDER_GUARD = True\n"
    pyc, never, tree_state = _checked_hash_of_other_bytes(setup, tmp_path, "patchkit_guard.py", older)
    assert not tree_state["ok"], tree_state
    assert tree_state["message"].startswith(f"__pycache__/{os.path.basename(pyc)} is checked-hash bytecode"), tree_state
    assert tree_state["fix"] == f"run `rm -f -- {pyc}` (Python compiles the source again)", tree_state
    os.unlink(pyc)
    assert findings(preflight(tree, library, *never))["tree-state"]["ok"]


# the tree's attention backend registry and the rule its backends share, as 0.16.0 lays them out
ATTENTION_FILES = {
    "vllm/v1/attention/backends/registry.py": "class AttentionBackendEnum(Enum):\n"
    '    FLASH_ATTN = "vllm.v1.attention.backends.flash_attn.FlashAttentionBackend"\n'
    '    TRITON_MLA = "vllm.v1.attention.backends.mla.triton_mla.TritonMLABackend"\n'
    '    FLASHMLA_SPARSE = "vllm.v1.attention.backends.mla.flashmla_sparse.FlashMLASparseBackend"\n'
    "    FLASHMLA = (\n"
    '        "vllm.v1.attention.backends.mla.flashmla.FlashMLABackend"\n'
    "    )\n",
    "vllm/v1/attention/backend.py": "class AttentionBackend:\n    def validate_configuration(cls, use_mla):\n"
    "        if use_mla != cls.is_mla():\n"
    '            reasons.append("MLA not supported" if use_mla else "non-MLA not supported")\n',
}
MLA = {"kv_lora_rank": 512}
# 0.13-0.14: the AttentionConfig takes VLLM_ATTENTION_BACKEND over the option (set in the tree below)
ENV_READ = "reads the variable"
ENV_READER = 'def __post_init__(self):\n    self._set_from_env_if_set("backend", "VLLM_ATTENTION_BACKEND")\n'


def mla_models(tree: Path, library: Path, tmp_path: Path, target: dict, drafter: dict) -> tuple[Path, Path]:
    """(target, drafter): the eagle3 set applied to `tree` with its attention files, a DeepSeek-V3
    target and an EAGLE-3 drafter of these changes."""
    applied(tree, library, ATTENTION_FILES)
    return write_model(tmp_path / "target", {**DEEPSEEK_V3, **target}), write_model(
        tmp_path / "drafter", {**DRAFTER, **drafter}
    )


@pytest.mark.parametrize(
    ("options", "env", "target", "drafter", "version", "says"),
    [
        (["--attention-backend", "TRITON_MLA"], {}, MLA, {}, None, "--attention-backend TRITON_MLA"),
        (["--attention-backend", "flashmla"], {}, MLA, {}, None, "--attention-backend flashmla"),
        (["--attention-config.backend", "FLASHMLA"], {}, MLA, {}, None, "--attention-config's backend FLASHMLA"),
        (["-ac", '{"backend": "TRITON_MLA"}'], {}, MLA, {}, "0.16.0+cu129", "--attention-config's backend"),
        (["--attention-backend", "FLASH_ATTN"], {}, MLA, {}, None, None),  # the drafter's kind
        (["--attention-backend", "TRITON_MLA"], {}, {}, {}, None, None),  # a non-MLA target refuses it first
        (["--attention-backend", "TRITON_MLA"], {"VLLM_MLA_DISABLE": "1"}, MLA, {}, None, None),
        # vLLM's bool(int(...)) of it: MLA stays on
        (["--attention-backend", "TRITON_MLA"], {"VLLM_MLA_DISABLE": "00"}, MLA, {}, None, "--attention-backend"),
        (["--attention-backend", "TRITON_MLA"], {"VLLM_MLA_DISABLE": "+0"}, MLA, {}, None, "--attention-backend"),
        (["--attention-backend", "TRITON_MLA"], {"VLLM_MLA_DISABLE": " 1 "}, MLA, {}, None, None),
        (["--attention-backend", "TRITON_MLA"], {}, MLA, MLA, None, None),  # an MLA drafter takes it
        (["--attention-backend", "TRITON_MLA"], {}, MLA, {}, "0.16.0+rocm700", None),  # ROCm picks another
        (["--attention-backend", "NOT_A_BACKEND"], {}, MLA, {}, None, None),  # vLLM refuses it at start
        ([], {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}, MLA, {}, None, None),  # 0.16.0 reads no such variable
        ([], {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}, MLA, {}, ENV_READ, "VLLM_ATTENTION_BACKEND TRITON_MLA"),
        (["--attention-backend", "FLASH_ATTN"], {"VLLM_ATTENTION_BACKEND": "TRITON_MLA"}, MLA, {}, ENV_READ, "VLLM_"),
        (["--attention-backend", "FLASHMLA_SPARSE"], {}, MLA, {}, None, None),  # a dense target refuses it first
        (["--attention-backend", "FLASHMLA_SPARSE"], {}, {**MLA, "index_topk": 2048}, {}, None, "FLASHMLA_SPARSE"),
    ],
)
def test_an_mla_attention_backend_the_drafter_inherits_fails(
    setup, tmp_path, options, env, target, drafter, version, says
):
    """One named attention backend serves every layer: vLLM's CUDA platform raises for an MLA backend on the
    EAGLE-3 drafter's non-MLA attention, building the drafter after the MLA target's load."""
    tree, library, _ = setup
    if version == ENV_READ:
        version = None
        (tree / "vllm" / "config" / "attention.py").write_text(ENV_READER)
    if version is not None:  # the installed vLLM's build, as its METADATA says (before the apply records it)
        metadata = tree / "vllm-0.16.0.dist-info" / "METADATA"
        metadata.write_text(metadata.read_text().replace("Version: 0.16.0", f"Version: {version}"))
    model, draft = mla_models(tree, library, tmp_path, target, drafter)
    words = ["env", *(f"{k}={v}" for k, v in env.items())] if env else []
    done = preflight(tree, library, *words, *serve(model, draft, *options))
    finding = drafter_verdict(done, fails=says is not None)
    if finding is None:
        return
    assert f"{says}" in finding["message"] and "is an MLA backend" in finding["message"]
    assert "after the target's load" in finding["message"]
    # the variable is the command's own (its `env` prefix): dropped there, not unset in the shell
    assert finding["fix"].startswith(
        "drop VLLM_ATTENTION_BACKEND=TRITON_MLA from the command" if "VLLM_" in says else "drop --attention-"
    )


def test_an_mla_attention_backend_the_launch_inherits_is_unset_in_the_shell(setup, tmp_path):
    """VLLM_ATTENTION_BACKEND from the environment patchkit runs in (not the command's `env` prefix):
    the fix unsets it there."""
    tree, library, _ = setup
    (tree / "vllm" / "config" / "attention.py").write_text(ENV_READER)
    model, draft = mla_models(tree, library, tmp_path, MLA, {})
    done = preflight(tree, library, *serve(model, draft), env={"VLLM_ATTENTION_BACKEND": "TRITON_MLA"})
    assert_clean_failure(done, 1)
    finding = findings(done)["drafter-architecture"]
    assert "but VLLM_ATTENTION_BACKEND TRITON_MLA is an MLA backend" in finding["message"], finding
    assert finding["fix"].startswith("unset VLLM_ATTENTION_BACKEND: "), finding


@pytest.mark.parametrize(
    ("yaml", "options", "says", "fix"),
    [
        (
            "attention-backend: TRITON_MLA\n",
            [],
            "{file}'s attention-backend TRITON_MLA",
            "drop attention-backend from {file}",
        ),
        (
            "attention_backend: flashmla\n",
            [],
            "{file}'s attention_backend flashmla",
            "drop attention_backend from {file}",
        ),
        (
            "attention-config:\n  backend: TRITON_MLA\n",
            [],
            "{file}'s attention-config's backend TRITON_MLA",
            "drop attention-config's backend from {file}",
        ),
        (  # both: vLLM takes the command line's, and the file's is there once that is dropped
            "attention-backend: TRITON_MLA\n",
            ["--attention-backend", "FLASHMLA"],
            "--attention-backend FLASHMLA",
            "drop --attention-backend and attention-backend from {file}",
        ),
        ("attention-backend: TRITON_MLA\n", ["--attention-backend", "FLASH_ATTN"], None, None),  # the command's wins
        (  # the file's FLASH_ATTN would fail the MLA target at start: both go
            "attention-backend: FLASH_ATTN\n",
            ["--attention_backend=TRITON_MLA"],
            "--attention-backend TRITON_MLA",
            "drop --attention-backend and attention-backend from {file}",
        ),
    ],
)
def test_an_mla_attention_backend_from_the_config_file_is_named_where_it_is_given(
    setup, tmp_path, yaml, options, says, fix
):
    """A backend given in the launch's --config YAML: the finding names the file's key, and its fix drops
    that key (the command line has no --attention-backend to drop); one given in both is dropped from both."""
    tree, library, _ = setup
    model, draft = mla_models(tree, library, tmp_path, MLA, {})
    config = tmp_path / "serve.yaml"
    config.write_text(yaml)
    done = preflight(tree, library, *serve(model, draft, "--config", str(config), *options))
    finding = drafter_verdict(done, fails=says is not None)
    if finding is None:
        return
    assert f"but {says.format(file=config)} is an MLA backend" in finding["message"], finding
    assert finding["fix"].startswith(fix.format(file=config) + " (the --config file): "), finding


# llama.py's LlamaDecoderLayer as 0.11-0.34 have it: the rotary table's length is the drafter's own value
LLAMA_ROPE_TABLE = 'max_position_embeddings = getattr(config, "max_position_embeddings", 8192)\n'
YARN = {"rope_type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}
# _get_and_verify_max_len's RoPE scaling as 0.12-0.26 write it (abridged)
LENGTH_BY_ROPE = """
def _get_and_verify_max_len(hf_config, max_model_len):
    for rp in rope_parameters.values():
        rope_type = rp["rope_type"]
        if rope_type not in ("su", "longrope", "llama3"):
            scaling_factor = rp.get("factor", scaling_factor)
            if rope_type == "yarn":
                derived_max_model_len = rp["original_max_position_embeddings"]
"""


@pytest.mark.parametrize(
    ("target", "tokenizer", "drafter", "extra", "length"),
    [
        ({}, {}, {}, (), 163840),  # the target's max_position_embeddings, no rope scaling
        ({}, {}, {}, ("--max-model-len", "4096"), 4096),
        ({}, {}, {}, ("--max-model-len", "2048"), None),  # the fix: the table's length
        ({}, {}, {"max_position_embeddings": 163840}, (), None),  # the other fix
        ({}, {"model_max_length": 2048}, {}, (), 163840),  # vLLM reads the tokenizer's only for pooling models
        ({"model_max_length": 4096}, {}, {}, (), 4096),  # the config's model_max_length wins over the least key
        ({}, {}, {}, ("--disable-sliding-window",), None),  # capped by a sliding window: not judged here
        ({"rope_scaling": YARN}, {"model_max_length": 131072}, {"max_position_embeddings": 131072}, (), 163840),
        ({}, {}, {"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, (), 163840),  # llama3 keeps the length
        ({}, {}, {"rope_scaling": {"type": "linear", "factor": 100.0}}, (), None),  # a scaled table: not judged
        ({}, {}, {}, ("--max-model-len", "-1"), None),  # fitted to the memory: not judged
        ({}, {}, {"max_position_embeddings": None}, (), None),  # absent: not judged
    ],
)
def test_a_drafter_rotary_table_shorter_than_the_launch_max_model_len_fails(
    setup, tmp_path, target, tokenizer, drafter, extra, length
):
    """vLLM 0.11-0.26 size the drafter's rotary table from its max_position_embeddings and feed it the
    target's positions, up to max_model_len - 1: the first longer request crashes the engine (review39 C6)."""
    tree, library, _ = setup
    applied(tree, library, {LLAMA: LLAMA_ROPE_TABLE})
    (tree / "vllm" / "config").mkdir(parents=True, exist_ok=True)
    (tree / "vllm" / "config" / "model.py").write_text(LENGTH_BY_ROPE)  # the tree's scaling of the target's length
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "max_position_embeddings": 163840, **target})
    (model / "tokenizer_config.json").write_text(json.dumps(tokenizer))
    config = {k: v for k, v in {**DRAFTER, "max_position_embeddings": 2048, **drafter}.items() if v is not None}
    done = preflight(tree, library, *serve(model, write_model(tmp_path / "drafter", config), *extra))
    finding = drafter_verdict(done, fails=length is not None)
    if finding is None:
        return
    held = config["max_position_embeddings"]
    assert f"its rotary table holds {held} positions" in finding["message"]
    assert f"up to max_model_len {length}:" in finding["message"]
    assert finding["fix"] == (
        f"give --max-model-len {held}, or set max_position_embeddings to {length} in the drafter's config.json"
    )


# the V2 model runner's EAGLE step as 0.12-0.16 have it (abridged): no aux hidden states reach the speculator
V2_RUNNER_UNFED = """\
class GPUModelRunner:
    def propose_draft(self, hidden_states):
        return self.speculator.propose(
            hidden_states,
            None,  # aux_hidden_states
        )
"""


@pytest.mark.parametrize(
    ("environ", "runner", "fails"),
    [
        ({"VLLM_USE_V2_MODEL_RUNNER": "1"}, V2_RUNNER_UNFED, True),
        ({"VLLM_USE_V2_MODEL_RUNNER": "2"}, V2_RUNNER_UNFED, True),  # vLLM's bool(int(...))
        ({"VLLM_USE_V2_MODEL_RUNNER": "0"}, V2_RUNNER_UNFED, False),
        ({}, V2_RUNNER_UNFED, False),
        ({"VLLM_USE_V2_MODEL_RUNNER": "1"}, V2_RUNNER_UNFED.replace("None,  # aux", "aux,  # aux"), False),
    ],
)
def test_the_v2_model_runner_that_feeds_no_aux_hidden_states_fails_an_eagle3_drafter(
    setup, tmp_path, environ, runner, fails
):
    """VLLM_USE_V2_MODEL_RUNNER picks vLLM's V2 runner, whose EAGLE step in 0.12-0.16 gives the drafter no
    aux hidden states: its drafts fail after the target's load (review40a D5)."""
    tree, library, models = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    (tree / "vllm" / "v1" / "worker" / "gpu").mkdir(parents=True, exist_ok=True)
    (tree / "vllm" / "v1" / "worker" / "gpu" / "model_runner.py").write_text(runner)
    prefix = ["env", *(f"{k}={v}" for k, v in environ.items())]
    done = preflight(tree, library, *prefix, *serve(models["deepseek"], models["drafter"]))
    assert ("drafter-architecture" in failed(done)) is fails, done.stdout
    if fails:
        finding = findings(done)["drafter-architecture"]
        given = environ["VLLM_USE_V2_MODEL_RUNNER"]
        assert f"VLLM_USE_V2_MODEL_RUNNER={given} picks vLLM's V2 model runner" in finding["message"], finding
        assert finding["fix"].startswith(f"drop VLLM_USE_V2_MODEL_RUNNER={given} from the command"), finding


# the EAGLE proposer's load_model as 0.17-0.18 have it (abridged): use_local_argmax_reduction needs get_top_tokens
PROPOSER_ASKING = """\
class EagleProposer:
    def load_model(self, target):
        if self.use_local_argmax_reduction:
            if not hasattr(self.model, "get_top_tokens"):
                raise ValueError("use_local_argmax_reduction is enabled but draft model does not implement it")
"""


@pytest.mark.parametrize(
    ("asked", "proposer", "defined", "fails"),
    [
        (True, PROPOSER_ASKING, False, True),
        ("yes", PROPOSER_ASKING, False, True),  # pydantic's lax bool
        (False, PROPOSER_ASKING, False, False),
        (True, PROPOSER_ASKING, True, False),  # the drafter's class defines it
        (True, "class EagleProposer:\n    pass\n", False, False),  # a proposer that never asks (0.16)
    ],
)
def test_local_argmax_reduction_fails_a_drafter_class_without_get_top_tokens(
    setup, tmp_path, asked, proposer, defined, fails
):
    """vLLM 0.17's EAGLE proposer raises in load_model, after the target's load, where the speculative config
    asks for use_local_argmax_reduction and the drafter's class has no get_top_tokens() (review40a D13)."""
    tree, library, models = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    (tree / "vllm" / "v1" / "spec_decode").mkdir(parents=True, exist_ok=True)
    (tree / "vllm" / "v1" / "spec_decode" / "eagle.py").write_text(proposer)
    drafter_file = tree / "vllm" / "model_executor" / "models" / "llama_eagle3.py"
    if defined:
        drafter_file.write_text(
            "class Eagle3LlamaForCausalLM:\n    def get_top_tokens(self, hidden_states):\n        pass\n"
        )
    spec = {"method": "eagle3", "model": str(models["drafter"]), "num_speculative_tokens": 3}
    spec["use_local_argmax_reduction"] = asked
    done = preflight(tree, library, "vllm", "serve", str(models["deepseek"]), "--speculative-config", json.dumps(spec))
    assert ("drafter-architecture" in failed(done)) is fails, done.stdout
    if fails:
        finding = findings(done)["drafter-architecture"]
        assert "get_top_tokens(), which llama_eagle3.py does not define" in finding["message"], finding
        assert finding["fix"].startswith('drop "use_local_argmax_reduction"'), finding


# a models/config.py shaped as 0.11-0.17's: the class MODELS_CONFIG_MAP gives V3.2 rewrites an fp8 cache format
SPARSE_CACHE_CONFIG = """\
class SparseV32Config:
    @classmethod
    def verify_and_update_config(cls, vllm_config):
        if vllm_config.cache_config.cache_dtype.startswith("fp8"):
            vllm_config.cache_config.cache_dtype = "fp8_ds_mla"


class OtherConfig:
    pass


MODELS_CONFIG_MAP: dict = {"DeepseekV32ForCausalLM": SparseV32Config, "DeepseekV3ForCausalLM": OtherConfig}
"""


@pytest.mark.parametrize(
    ("architecture", "dtype", "in_file", "fails"),
    [
        ("DeepseekV32ForCausalLM", "fp8", False, True),
        ("DeepseekV32ForCausalLM", "fp8_e4m3", True, True),  # from the --config file
        ("DeepseekV32ForCausalLM", "auto", False, False),
        ("DeepseekV3ForCausalLM", "fp8", False, False),  # its config class keeps the format
    ],
)
def test_an_fp8_kv_cache_the_target_rewrites_to_its_sparse_format_fails_an_eagle3_drafter(
    setup, tmp_path, architecture, dtype, in_file, fails
):
    """The drafter's attention takes the engine's KV-cache format; DeepSeek-V3.2's config class (0.11-0.17)
    turns an fp8 one into fp8_ds_mla, which no non-MLA attention backend takes (review40a D3)."""
    tree, library, _ = setup
    assert run_cli_judged("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    (tree / REGISTRY).write_text(
        REGISTRY_PY.replace(
            '    "DeepseekV3ForCausalLM"',
            '    "DeepseekV32ForCausalLM": ("deepseek_v2", "DeepseekV3ForCausalLM"),\n    "DeepseekV3ForCausalLM"',
        )
    )
    (tree / "vllm" / "model_executor" / "models" / "config.py").write_text(SPARSE_CACHE_CONFIG)
    target = write_model(tmp_path / "target", {**DEEPSEEK_V3, "architectures": [architecture]})
    given = ("--kv-cache-dtype", dtype)
    if in_file:
        (tmp_path / "serve.yaml").write_text(f"kv-cache-dtype: {dtype}\n")
        given = ("--config", str(tmp_path / "serve.yaml"))
    done = preflight(tree, library, *serve(target, write_model(tmp_path / "drafter", DRAFTER), *given))
    if not fails:
        assert "drafter-architecture" not in failed(done), done.stdout
        return
    assert_clean_failure(done, 1)
    assert failed(done) == {"drafter-architecture"}, done.stdout
    finding = findings(done)["drafter-architecture"]
    assert "KV cache as fp8_ds_mla, which the drafter's attention cannot take" in finding["message"], finding
    said = f"drop kv-cache-dtype from {tmp_path / 'serve.yaml'}" if in_file else f"drop --kv-cache-dtype {dtype}"
    assert finding["fix"].startswith(said), finding


# model.py's _get_and_verify_max_len as 0.14+ have it: -1 (auto) starts from the derived length
AUTO_FIT_RULE = "if max_model_len is None or max_model_len == -1:\n    max_model_len = int(derived_max_model_len)\n"


@pytest.mark.parametrize(("given", "fitted"), [("-1", True), ("auto", True), ("-1", False), ("auto", False)])
def test_a_short_drafter_rotary_table_fails_under_auto_fit_where_it_starts_from_the_derived_length(
    setup, tmp_path, given, fitted
):
    """--max-model-len auto/-1 is the target's derived length on trees whose model.py starts there (the engine
    lowers it only where the KV cache cannot hold it): a short drafter table is no silent pass, and the
    words say vLLM picks the length by the memory free at start (review41a F10)."""
    tree, library, _ = setup
    applied(tree, library, {LLAMA: LLAMA_ROPE_TABLE, "vllm/config/model.py": AUTO_FIT_RULE if fitted else ""})
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "max_position_embeddings": 163840})
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "max_position_embeddings": 2048})
    done = preflight(tree, library, *serve(model, drafter, "--max-model-len", given))
    if not fitted:  # a tree without auto-fit (0.11-0.13 refuse -1 at config time): not judged by this rule
        assert "drafter-architecture" not in failed(done), done.stdout
        return
    assert_clean_failure(done, 1)
    finding = findings(done)["drafter-architecture"]
    assert "its rotary table holds 2048 positions" in finding["message"], finding
    assert (
        "up to the max_model_len vLLM picks at start by the GPU memory free (auto; at most the target's 163840): "
        "where that is above 2048, the first request past 2048 tokens crashes the engine"
    ) in finding["message"], finding
    assert finding["fix"].startswith("give --max-model-len 2048 in place of auto"), finding


@pytest.mark.parametrize("where", ["llama.py", "speculative.py"])
def test_a_short_drafter_rotary_table_passes_where_the_tree_does_not_have_the_fault(setup, tmp_path, where):
    """0.30's speculative.py raises the drafter's max_position_embeddings to the target's length; a
    llama.py that does not size the table from it is not judged."""
    tree, library, _ = setup
    if where == "speculative.py":
        spec = tree / "vllm" / "config" / "speculative.py"
        spec.write_text(spec.read_text() + "\n# draft_hf_config.max_position_embeddings = target_max_model_len\n")
    applied(tree, library, {LLAMA: "" if where == "llama.py" else LLAMA_ROPE_TABLE})
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "max_position_embeddings": 163840})
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "max_position_embeddings": 2048})
    done = preflight(tree, library, *serve(model, drafter))
    assert done.returncode == 0 and failed(done) == set(), done.stdout


# transformers' sources the drafter's config class defaults are read from (as 4.57 lays them out), and
# vLLM's own config registry, which does not take model_type llama
LLAMA_CONFIG_SOURCES = {
    "transformers/models/auto/configuration_auto.py": (
        'CONFIG_MAPPING_NAMES = OrderedDict[str, str]([("llama", "LlamaConfig")])\n'
        "SPECIAL_MODEL_TYPE_TO_MODULE_NAME = OrderedDict[str, str]([])\n"
    ),
    "transformers/models/llama/configuration_llama.py": (
        "class LlamaConfig(PretrainedConfig):\n"
        "    def __init__(self, vocab_size=32000, hidden_size=4096, max_position_embeddings=2048, **kwargs):\n"
        "        self.max_position_embeddings = max_position_embeddings\n"
    ),
    "vllm/transformers_utils/config.py": '_CONFIG_REGISTRY = LazyConfigDict(\n    eagle="EAGLEConfig",\n)\n',
}
# the rotary classes' table lines as 0.11-0.18 write them (0.22's dynamic one keeps max_position_embeddings rows)
ROPE_CLASSES = {
    "linear_scaling_rope.py": "            max_len = self.max_position_embeddings * scaling_factor\n",
    "dynamic_ntk_scaling_rope.py": "        max_len = self.max_position_embeddings * self.scaling_factor\n",
    "yarn_scaling_rope.py": (
        "        t = torch.arange(\n            self.max_position_embeddings * self.scaling_factor, dtype=torch.float32\n"
    ),
}
DYNAMIC_0_22 = (
    "    def _compute_cos_sin_cache(self):\n        t = torch.arange(self.max_position_embeddings, dtype=torch.float)\n"
)
LONGROPE_CLASS = {
    "phi3_long_rope_scaled_rope.py": "        long_short_cache = torch.cat([short_cache, long_cache], dim=0)\n"
}
NTK = "class NTKScalingRotaryEmbedding(RotaryEmbedding):\n    def _compute_inv_freq(self, base):\n        pass\n"

VLLM_OWN_LLAMA = "_CONFIG_REGISTRY = LazyConfigDict(llama='X')"  # a registry where vLLM reads llama itself
RAISED = "\n# draft_hf_config.max_position_embeddings = target_max_model_len\n"  # as 0.30's speculative.py


def drafter_attention_tree(setup, files: dict[str, str]):
    """The applied stand-in tree with llama.py's rotary and sliding-window reads, and `files` (with "raised":
    a speculative.py that raises the drafter's max_position_embeddings, as 0.30's does)."""
    tree, library, _ = setup
    if files.pop("raised", None) is not None:  # before the apply, which records the file as it writes it
        spec = tree / "vllm" / "config" / "speculative.py"
        spec.write_text(spec.read_text() + RAISED)
    sliding = "                sliding_window = config.sliding_window\n"
    applied(tree, library, {LLAMA: LLAMA_ROPE_TABLE + sliding, **files})
    return tree, library


@pytest.mark.parametrize(
    ("sources", "extra", "rows"),
    [
        (LLAMA_CONFIG_SOURCES, (), 2048),  # LlamaConfig's default sizes the table
        (LLAMA_CONFIG_SOURCES, ("--max-model-len", "2048"), None),
        ({**LLAMA_CONFIG_SOURCES, "vllm/transformers_utils/config.py": VLLM_OWN_LLAMA}, (), "model_type 'llama'"),
        ({}, (), "no transformers/ beside vllm/"),  # no sources to read the default from
        ({}, ("--max-model-len", "-1"), None),  # no length to hold it to: nothing to read
        ({"raised": ""}, (), None),  # 0.30 raises any max_position_embeddings
    ],
)
def test_a_drafter_without_max_position_embeddings_is_held_to_its_config_classs_default(
    setup, tmp_path, sources, extra, rows
):
    """vLLM reads the drafter's config.json with its transformers config class, whose default (LlamaConfig's
    2048) then sizes the drafter's rotary table (review39 C6, its absent value); where that default cannot
    be read, the check says it cannot judge, and what lets it."""
    tree, library = drafter_attention_tree(setup, {**sources})
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "max_position_embeddings": 163840})
    drafter = write_model(tmp_path / "drafter", DRAFTER)  # no max_position_embeddings
    done = preflight(tree, library, *serve(model, drafter, *extra))
    finding = findings(done)["drafter-architecture"]
    if not isinstance(rows, int):
        assert done.returncode == 0 and failed(done) == set(), done.stdout
        assert (finding["result"] == "pass") is (rows is None), finding
        assert rows is None or (finding["message"].startswith("cannot judge: ") and rows in finding["message"])
        assert rows is None or finding["fix"].startswith("set max_position_embeddings in the drafter's config.json")
        return
    assert_clean_failure(done, 1)
    assert (
        f"its rotary table holds {rows} positions (max_position_embeddings, its config's default)" in finding["message"]
    ), finding
    assert finding["fix"] == (
        f"give --max-model-len {rows}, or set max_position_embeddings to 163840 in the drafter's config.json"
    )


@pytest.mark.parametrize(
    ("rope", "classes", "length", "rows"),
    [
        ({"rope_type": "linear", "factor": 4.0}, ROPE_CLASSES, 8193, 8192),  # 2048 x 4
        ({"rope_type": "linear", "factor": 4.0}, ROPE_CLASSES, 8192, None),
        ({"type": "linear", "factor": 0.5}, ROPE_CLASSES, 2048, 1024),  # a factor below 1 shortens it
        ({"rope_type": "linear", "factor": 1.3}, ROPE_CLASSES, 2663, None),  # ceil(2662.4): arange of a float
        ({"rope_type": "linear", "factor": 1.3}, ROPE_CLASSES, 2664, 2663),
        ({"rope_type": "dynamic", "factor": 2.0}, ROPE_CLASSES, 4097, 4096),
        ({"rope_type": "dynamic", "factor": 2.0}, {"dynamic_ntk_scaling_rope.py": DYNAMIC_0_22}, 2049, 2048),
        ({"rope_type": "dynamic", "factor": 2.0}, {"dynamic_ntk_scaling_rope.py": DYNAMIC_0_22}, 2048, None),
        ({"rope_type": "dynamic", "alpha": 2.0, "factor": 2.0}, ROPE_CLASSES, 4097, None),  # alpha's class
        # yarn's table is original_max_position_embeddings x factor, whatever max_position_embeddings says
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, ROPE_CLASSES, 4097, 4096),
        ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, ROPE_CLASSES, 4096, None),
        ({"rope_type": "yarn", "factor": 4.0}, ROPE_CLASSES, 4097, None),  # vLLM refuses it building the config
        ({"rope_type": "linear", "factor": 4.0}, {}, 8193, None),  # the tree shows no sizing: not judged
        ({"rope_type": "ntk", "factor": 4.0}, {"ntk_scaling_rope.py": NTK}, 2049, 2048),  # base's table
        ({"rope_type": "ntk", "factor": 4.0}, {"ntk_scaling_rope.py": NTK + DYNAMIC_0_22}, 2049, None),  # its own table
        ({"rope_type": "longrope", "original_max_position_embeddings": 1024}, ROPE_CLASSES, 8193, None),  # unshown
        # longrope: max_position_embeddings positions once max_model_len passes the original (short) length
        ({"rope_type": "longrope", "original_max_position_embeddings": 1024}, LONGROPE_CLASS, 2049, 2048),
        ({"rope_type": "longrope", "original_max_position_embeddings": 1024}, LONGROPE_CLASS, 2048, None),
        ({"type": "su", "original_max_position_embeddings": 4096}, LONGROPE_CLASS, 4096, None),  # the short table
        ({"type": "su", "original_max_position_embeddings": 4096}, LONGROPE_CLASS, 4097, 2048),
        ({"rope_type": "longrope"}, LONGROPE_CLASS, 4097, None),  # no original length: not judged
        # 0.30's speculative.py raises max_position_embeddings to max_model_len: yarn's table does not start there
        ({"rope_type": "linear", "factor": 4.0}, {**ROPE_CLASSES, "raised": ""}, 8193, None),
        (
            {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
            {**ROPE_CLASSES, "raised": ""},
            4097,
            4096,
        ),
    ],
)
def test_a_drafter_scaled_rotary_table_shorter_than_max_model_len_fails(setup, tmp_path, rope, classes, length, rows):
    """get_rope sizes a scaled drafter table by its RoPE class (linear and dynamic: max_position_embeddings x
    factor in 0.11-0.18, 0.22's dynamic and ntk: max_position_embeddings; yarn: original_max_position_embeddings
    x factor), and vLLM feeds it the target's positions up to max_model_len - 1 (review39 C6, a scaled table)."""
    rotary = "vllm/model_executor/layers/rotary_embedding/"
    files = {name if name == "raised" else rotary + name: text for name, text in classes.items()}
    tree, library = drafter_attention_tree(setup, files)
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "max_position_embeddings": 163840})
    drafter = write_model(tmp_path / "drafter", {**DRAFTER, "max_position_embeddings": 2048, "rope_scaling": rope})
    done = preflight(tree, library, *serve(model, drafter, "--max-model-len", str(length)))
    if rows is None:
        assert done.returncode == 0 and failed(done) == set(), done.stdout
        return
    assert_clean_failure(done, 1)
    finding = findings(done)["drafter-architecture"]
    kind = rope.get("rope_type", rope.get("type"))
    assert f"its rotary table holds {rows} positions (its {kind} RoPE scaling)" in finding["message"], finding
    assert f"up to max_model_len {length}:" in finding["message"], finding
    assert finding["fix"] == (
        f"give --max-model-len {rows}, or use a drafter whose rotary table holds {length} positions"
    )


SLIDING_FIX = "give the drafter's config.json a sliding_window (a number), or layer_types of full_attention"
MLA_ASSERT = 'assert not vllm_config.model_config.use_mla, (\n    "MLA is not supported for slidingwindow"\n)\n'


@pytest.mark.parametrize(
    ("drafter", "target", "sources", "says"),
    [
        ({}, {}, LLAMA_CONFIG_SOURCES, "but it gives no sliding_window"),  # AttributeError building it
        ({}, {}, {}, "cannot judge: "),  # the config class's defaults unread: what lets it judge
        ({}, {"kv_lora_rank": 512}, {}, "cannot judge: "),  # under MLA: full attention is the one sure fix
        ({}, {"kv_lora_rank": 512}, LLAMA_CONFIG_SOURCES, "but it gives no sliding_window"),
        ({"sliding_window": "128"}, {"kv_lora_rank": 512}, {}, "its sliding_window '128' is no number"),
        ({"sliding_window": "128"}, {}, {}, "its sliding_window '128' is no number"),  # TypeError
        ({"sliding_window": [128]}, {}, {}, "its sliding_window [128] is no number"),
        ({"sliding_window": None}, {}, {}, None),  # vLLM builds a full-attention layer
        ({"sliding_window": 128}, {}, {}, None),
        ({"sliding_window": 128}, {"kv_lora_rank": 512}, {}, None),  # the tree shows no MLA assert
        ({"sliding_window": 128}, {"kv_lora_rank": 512}, {"vllm/attention/layer.py": MLA_ASSERT}, "an MLA target"),
        ({"sliding_window": 128, "layer_types": ["full_attention"]}, {"kv_lora_rank": 512}, {}, None),
        ({"sliding_window": 128, "layer_types": ["full_attention", "sliding_attention"]}, {}, {}, None),  # layer 2
    ],
)
def test_a_drafter_sliding_layer_vllm_cannot_build_or_serve_fails(setup, tmp_path, drafter, target, sources, says):
    """llama.py reads config.sliding_window for a layer typed sliding_attention (AttributeError without one,
    TypeError when no number, building the drafter after the target's load); vLLM's KV cache asserts no
    sliding layer under an MLA target (DeepSeek-V3, Kimi-K2), after both loads."""
    sources = {**sources}
    if "vllm/attention/layer.py" in sources:
        sources["vllm/model_executor/layers/attention/attention.py"] = sources.pop("vllm/attention/layer.py")
    tree, library = drafter_attention_tree(setup, sources)
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, **target})
    config = {**DRAFTER, "max_position_embeddings": 163840, "layer_types": ["sliding_attention"], **drafter}
    done = preflight(tree, library, *serve(model, write_model(tmp_path / "drafter", config)))
    finding = findings(done)["drafter-architecture"]
    if says is None or says == "cannot judge: ":
        assert done.returncode == 0 and failed(done) == set(), done.stdout
        assert (finding["result"] == "pass") is (says is None), finding
        assert says is None or (finding["message"].startswith(says) and "gives no sliding_window" in finding["message"])
    else:
        assert_clean_failure(done, 1)
        assert says in finding["message"] and "after the target's load" in finding["message"], finding
    mla = "give the drafter's layer_types full_attention: an MLA target has no sliding window"
    other = "set sliding_window in the drafter's config.json" if says == "cannot judge: " else SLIDING_FIX
    assert says is None or finding["fix"].startswith(mla if "kv_lora_rank" in target else other), finding


# vLLM's is_deepseek_mla as 0.16-0.21 write it (abridged): MLA only for the model types it lists
IS_DEEPSEEK_MLA = """
class ModelArchConfigConvertorBase:
    def is_deepseek_mla(self) -> bool:
        if not hasattr(self.hf_text_config, "model_type"):
            return False
        elif self.hf_text_config.model_type in ("deepseek_v2", "deepseek_v3", "kimi_k2"):
            return self.hf_text_config.kv_lora_rank is not None
        elif self.hf_text_config.model_type == "eagle":
            return (
                self.hf_text_config.model.model_type in ("deepseek_v2", "deepseek_v3")
                and self.hf_text_config.kv_lora_rank is not None
            )
        return False
"""
MLA_RULE = "vllm/transformers_utils/model_arch_config_convertor.py"


@pytest.mark.parametrize(
    ("target", "rule", "mla"),
    [
        ({"kv_lora_rank": 512}, IS_DEEPSEEK_MLA, True),  # deepseek_v3: listed
        (
            {"model_type": "llama", "kv_lora_rank": 512},
            IS_DEEPSEEK_MLA,
            False,
        ),  # not listed: vLLM's attention is not MLA
        ({"model_type": "llama", "kv_lora_rank": 512}, None, True),  # the rule not read: any kv_lora_rank
        ({"model_type": "deepseek_v3", "kv_lora_rank": None}, IS_DEEPSEEK_MLA, True),  # left out: the class's 512
    ],
)
def test_an_mla_target_is_told_by_the_trees_own_rule(setup, tmp_path, target, rule, mla):
    """review41a F1: vLLM's is_deepseek_mla counts MLA only for the model types it lists (a kv_lora_rank
    besides); patchkit took any kv_lora_rank. The sliding-layer-under-MLA rule follows the tree's rule."""
    sources = {"vllm/model_executor/layers/attention/attention.py": MLA_ASSERT, **({MLA_RULE: rule} if rule else {})}
    tree, library = drafter_attention_tree(setup, sources)
    model = write_model(tmp_path / "target", {k: v for k, v in {**DEEPSEEK_V3, **target}.items() if v is not None})
    config = {**DRAFTER, "max_position_embeddings": 163840, "layer_types": ["sliding_attention"], "sliding_window": 128}
    done = preflight(tree, library, *serve(model, write_model(tmp_path / "drafter", config)))
    finding = findings(done)["drafter-architecture"]
    assert ("an MLA target" in finding["message"]) is mla, finding
    assert done.returncode == (1 if mla else 0), done.stdout


# get_rope's range check and patch_rope_parameters' names, as 0.13-0.34 write them
PARTIAL_FILES = {
    "vllm/model_executor/layers/rotary_embedding/__init__.py": (
        "    if partial_rotary_factor <= 0.0 or partial_rotary_factor > 1.0:\n        raise ValueError()\n"
    ),
    "vllm/transformers_utils/config.py": 'names = ["partial_rotary_factor", "rotary_pct", "rotary_emb_fraction"]\n',
}


@pytest.mark.parametrize(
    ("drafter", "version", "files", "says"),
    [
        ({"partial_rotary_factor": 1.5}, "4.57.6", PARTIAL_FILES, "its partial_rotary_factor 1.5 is not above 0"),
        ({"partial_rotary_factor": 0}, "4.57.6", PARTIAL_FILES, "its partial_rotary_factor 0 is not above 0"),
        ({"rotary_pct": -0.5}, "4.57.6", PARTIAL_FILES, "its rotary_pct -0.5 is not above 0"),
        ({"rope_scaling": {"rope_type": "default", "partial_rotary_factor": 2}}, "4.57.6", PARTIAL_FILES, "factor 2"),
        ({"partial_rotary_factor": "half"}, "4.57.6", PARTIAL_FILES, "its partial_rotary_factor 'half' is not"),
        ({"partial_rotary_factor": 0.5}, "4.57.6", PARTIAL_FILES, None),
        ({"partial_rotary_factor": 1}, "4.57.6", PARTIAL_FILES, None),
        ({"partial_rotary_factor": None, "rotary_pct": 2.0}, "4.57.6", PARTIAL_FILES, None),  # the first name wins
        ({"partial_rotary_factor": 1.5}, "5.0.0", PARTIAL_FILES, None),  # transformers 5 may refuse it at start
        ({"partial_rotary_factor": 1.5}, None, PARTIAL_FILES, None),  # no transformers read: not judged
        ({"partial_rotary_factor": 1.5}, "4.57.6", {}, None),  # the tree shows neither step
    ],
)
def test_a_drafter_partial_rotary_factor_get_rope_refuses_fails(setup, tmp_path, drafter, version, files, says):
    """vLLM copies the drafter's partial_rotary_factor (or rotary_pct, rotary_emb_fraction: the first it has)
    into its RoPE parameters, and get_rope raises for one outside (0, 1], building the drafter after the target's
    load (measured on vLLM 0.16.0 with transformers 4.57.6)."""
    tree, library = drafter_attention_tree(setup, dict(files))
    if version is not None:
        info = tree / "transformers-4.57.6.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: transformers\nVersion: {version}\n\n")
    model = write_model(tmp_path / "target", {**DEEPSEEK_V3, "max_position_embeddings": 163840})
    config = {**DRAFTER, "max_position_embeddings": 163840, **drafter}
    done = preflight(tree, library, *serve(model, write_model(tmp_path / "drafter", config)))
    finding = findings(done)["drafter-architecture"]
    if says is None:
        assert done.returncode == 0 and failed(done) == set(), done.stdout
        return
    assert_clean_failure(done, 1)
    assert says in finding["message"] and "after the target's load" in finding["message"], finding
    assert finding["fix"].startswith("give the drafter's config.json a ") and "above 0 and at most 1" in finding["fix"]
