"""Review 5 of the launch (preflight / run): the tree a launch imports is found as the launch finds it.
Each test here failed on the code before its fix."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import assert_clean_failure, run_cli, run_cli_read_only, run_cli_writing
from importable_vllm import venv_importing
from launch_fixtures import DEEPSEEK_V3, write_eagle3_setup, write_model
from serve_lines import ACCEPTED_VALUES, REFUSED_VALUES

from patchkit.base.errors import BadInput
from patchkit.launch.command import parse
from patchkit.launch.validation import engine_validation, model_interface


@pytest.fixture
def launch(tmp_path: Path) -> dict[str, Path]:
    """An applied tree that the venv's `vllm` imports, and a stock tree in the launch's directory
    (`project/site`) that a relative or empty PYTHONPATH entry puts before it."""
    applied, library = write_eagle3_setup(tmp_path)
    assert run_cli_writing("apply", "--target", applied, "--patches", library, "--no-import").returncode == 0
    project = tmp_path / "project"
    stock, _ = write_eagle3_setup(project)
    return {
        "applied": applied,
        "library": library,
        "project": project,
        "stock": stock,
        "script": venv_importing(applied, tmp_path / "venv"),
        "model": write_model(tmp_path / "models" / "target", DEEPSEEK_V3),
    }


# PYTHONPATH as the launch is given it, and the directory it runs in (under project/)
SPELLINGS = [
    ("site", "."),  # relative
    ("./site", "."),
    (".", "site"),  # the working directory itself
    (f"{os.sep}nowhere{os.pathsep}", "site"),  # a trailing colon: an empty entry, the working directory
    (f"{os.pathsep}{os.sep}nowhere", "site"),  # a leading empty entry
    (f"{os.sep}nowhere{os.pathsep}{os.pathsep}{os.sep}elsewhere", "site"),  # an empty entry inside
]


def _launch_target(done) -> dict:
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "launch-target"]
    return found


@pytest.mark.parametrize(("pythonpath", "where"), SPELLINGS)
@pytest.mark.parametrize("given", ["in the launch", "to patchkit"])
def test_a_pythonpath_entry_resolved_in_the_launchs_directory_is_the_tree_judged(launch, pythonpath, where, given):
    cwd = launch["project"] / where
    serve = [str(launch["script"]), "serve", str(launch["model"])]
    argv, env = (["env", f"PYTHONPATH={pythonpath}", *serve], None)
    if given == "to patchkit":
        argv, env = serve, {"PYTHONPATH": pythonpath}
    patches = ["--patches", launch["library"]]
    done = run_cli_read_only("preflight", *patches, "--format", "json", "--no-import", "--", *argv, env=env, cwd=cwd)
    assert_clean_failure(done, 1)
    found = _launch_target(done)
    assert not found["ok"] and f"imports vLLM from {launch['stock']}" in found["message"], found
    done = run_cli("run", *patches, "--", *argv, env=env, cwd=cwd)
    assert_clean_failure(done, 1)
    assert "not launched" in done.stderr and str(launch["stock"]) in done.stdout, done.stdout + done.stderr


def test_an_absolute_pythonpath_to_the_applied_tree_still_passes(launch):
    """The control: the same launch importing the applied tree is not refused."""
    argv = ["env", f"PYTHONPATH={launch['applied']}", str(launch["script"]), "serve", str(launch["model"])]
    patches = ["--patches", launch["library"]]
    done = run_cli_read_only(
        "preflight", *patches, "--format", "json", "--no-import", "--", *argv, cwd=launch["project"]
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "launch-target" not in {f["check"] for f in json.loads(done.stdout)["findings"]}


def test_python_m_with_a_relative_pythonpath_judges_the_tree_it_imports(launch):
    python = launch["script"].parent / "python"
    module = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(launch["model"])]
    argv = ["env", "PYTHONPATH=project/site", *module]
    patches = ["--patches", launch["library"]]
    cwd = launch["project"].parent
    done = run_cli_read_only("preflight", *patches, "--format", "json", "--no-import", "--", *argv, cwd=cwd)
    assert_clean_failure(done, 1)
    assert str(launch["stock"]) in _launch_target(done)["message"], done.stdout


# --- vLLM's own answers (vllm-validation, supports_eagle3()) come from the tree the launch imports ---


def _marked_tree(root: Path, mark: str) -> Path:
    """A vllm whose import fails saying `mark`: which tree vLLM's own questions imported."""
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text(f"raise ImportError({mark!r})\n")
    return root


@pytest.mark.parametrize(
    "argv",
    [
        ["env", "PYTHONPATH=stock", "{script}", "serve", "m"],
        ["env", f"PYTHONPATH={os.sep}nowhere{os.pathsep}", "{script}", "serve", "m"],
        ["{python}", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"],  # the cwd first on sys.path
    ],
)
def test_vllms_own_answers_come_from_the_tree_the_launch_imports(tmp_path, monkeypatch, argv):
    script = venv_importing(_marked_tree(tmp_path / "applied", "the applied tree"), tmp_path / "venv")
    project = tmp_path / "project"
    _marked_tree(project, "the launch's tree")
    _marked_tree(project / "stock", "the launch's tree")
    monkeypatch.chdir(project)
    python = str(script.parent / "python")
    command = parse([a.format(script=script, python=python) for a in argv])
    validated = engine_validation(python, command)
    assert "the launch's tree" in validated.message, validated
    asked = model_interface(python, command, ["DeepseekV3ForCausalLM"], "supports_eagle3")
    assert asked.result is None and "the launch's tree" in asked.message, asked


# --- L2: the tree found by the command's own interpreter is not said to be found by a --python --------


def test_the_launch_target_finding_names_no_python_option_when_none_was_given(launch):
    argv = ["env", f"PYTHONPATH={launch['stock']}", str(launch["script"]), "serve", str(launch["model"])]
    patches = ["--patches", launch["library"]]
    done = run_cli_read_only("preflight", *patches, "--format", "json", "--no-import", "--", *argv)
    assert_clean_failure(done, 1)
    message = _launch_target(done)["message"]
    python = launch["script"].parent / "python"
    assert message.startswith(f"the command's interpreter {python} names vLLM in {launch['applied']}"), message
    assert "--python" not in message, message
    given = run_cli_read_only("preflight", *patches, "--python", python, "--format", "json", "--no-import", "--", *argv)
    assert _launch_target(given)["message"].startswith(f"--python {python} names vLLM in"), given.stdout


@pytest.mark.parametrize(("words", "said"), REFUSED_VALUES)
def test_a_value_vllms_parser_refuses_is_refused_naming_the_option(words, said):
    with pytest.raises(BadInput) as refused:
        parse(["vllm", "serve", "org/m", *words], "0.16.0")
    assert said in refused.value.message, refused.value.message


@pytest.mark.parametrize("words", ACCEPTED_VALUES)
def test_a_value_vllms_parser_takes_is_read(words):
    assert parse(["vllm", "serve", "org/m", *words], "0.16.0").model == "org/m"


# The specs 0.24.0 to 0.33.0, re-recorded in a vLLM 0.33.0 venv, hold values as those releases' parsers
# do (before, only int, float and JSON: these were read)
NEWER_RELEASES = ["0.24.0", "0.27.1", "0.30.0", "0.33.0"]
REFUSED_BY_NEWER = [
    (["--dtype", "foo"], "--dtype: invalid choice: 'foo'"),
    (["--max-model-len", "lots"], "--max-model-len: 'lots' is not a whole number"),
    (["--compilation-config", "3"], "--compilation-config/-cc: '3' is not a JSON object"),
    (["--compilation-config.bad_key", "1"], "--compilation-config/-cc: unknown key 'bad_key'"),
    (["--lora-modules", '{"path": "/l"}'], "Invalid fields for --lora-modules"),
]


@pytest.mark.parametrize("release", NEWER_RELEASES)
@pytest.mark.parametrize(("words", "said"), REFUSED_BY_NEWER)
def test_a_newer_release_refuses_a_value_its_parser_refuses(release, words, said):
    with pytest.raises(BadInput) as refused:
        parse(["vllm", "serve", "org/m", *words], release)
    assert said in refused.value.message, refused.value.message


# LoRAParserAction splits `name=path` at every '=' before 0.30.0 (a second one fails it), at the first after
@pytest.mark.parametrize(
    ("release", "taken"), [("0.24.0", False), ("0.29.0", False), ("0.30.0", True), ("0.33.0", True)]
)
def test_a_lora_path_with_an_equals_sign_is_read_as_the_release_reads_it(release, taken):
    line = ["vllm", "serve", "org/m", "--lora-modules", "a=/l=1", "--max-model-len", "32k"]
    if taken:
        assert parse(line, release).model == "org/m"
        return
    with pytest.raises(BadInput) as refused:
        parse(line, release)
    assert "--lora-modules 'a=/l=1': give name=path" in refused.value.message, refused.value.message


def test_preflight_without_vllm_refuses_a_value_vllms_parser_refuses(launch):
    argv = [str(launch["script"]), "serve", str(launch["model"]), "--mamba-ssm-cache-dtype", "fp4"]
    done = run_cli_read_only("preflight", "--patches", launch["library"], "--no-import", "--", *argv)
    assert_clean_failure(done, 2)
    assert "--mamba-ssm-cache-dtype: invalid choice: 'fp4'" in done.stderr, done.stderr


# review 5 L1: a hub cache ref is read as huggingface_hub reads it (nothing stripped), online and offline
@pytest.mark.parametrize("ref", ["5eed5\n", "5eed5\r\n", " 5eed5", "5eed5\t"])
@pytest.mark.parametrize("offline", [False, True])
def test_a_hub_ref_with_a_space_or_line_break_names_no_snapshot(tmp_path, ref, offline):
    tree, library = write_eagle3_setup(tmp_path)
    repo = tmp_path / "hub" / "models--anorg--amodel"
    write_model(repo / "snapshots" / "5eed5", DEEPSEEK_V3)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_bytes(ref.encode())
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), **({"HF_HUB_OFFLINE": "1"} if offline else {})}
    argv = ["vllm", "serve", "anorg/amodel"]
    done = run_cli_read_only("preflight", "--target", tree, "--patches", library, "--no-import", "--", *argv, env=env)
    assert_clean_failure(done, 4)  # huggingface_hub finds no snapshot: vLLM would download it (offline: refuse)
    said = done.stdout + done.stderr
    assert ("holds no snapshot" if offline else "huggingface_hub reads it as it is") in said, said
    (repo / "refs" / "main").write_bytes(ref.strip().encode())  # the same commit alone: found
    done = run_cli_read_only("preflight", "--target", tree, "--patches", library, "--no-import", "--", *argv, env=env)
    assert done.returncode in (0, 1) and "cannot judge" not in done.stdout + done.stderr, done.stdout + done.stderr


# review 5 L5: `python -m vllm.entrypoints.cli.main serve ...` is what the `vllm` script runs: read as `vllm serve`
CLI_LINES = [
    ["some/model", "-tp", "4", "--trust-remote-code"],
    ["--enable-prefix-caching", "some/model", "--speculative", '{"method": "ngram"}'],
    ["--model", "some/model", "--model", "other/model", "--hf-overrides.text_config.hidden_size", "32"],
]


@pytest.mark.parametrize("line", CLI_LINES)
@pytest.mark.parametrize("python", [["python3"], ["/opt/venv/bin/python", "-E"]])
def test_the_cli_module_with_serve_is_read_as_vllm_serve(line, python):
    module = parse([*python, "-m", "vllm.entrypoints.cli.main", "serve", *line], "0.16.0")
    script = parse(["vllm", "serve", *line], "0.16.0")
    assert module.serve and (module.model, module.options) == (script.model, script.options)
    assert module.speculative_config == script.speculative_config


def test_the_cli_module_without_serve_is_no_launch():
    with pytest.raises(BadInput, match="expected serve"):
        parse(["python", "-m", "vllm.entrypoints.cli.main", "bench", "latency"], "0.16.0")


def test_preflight_judges_a_launch_by_the_cli_module(launch):
    python = launch["script"].parent / "python"
    argv = [str(python), "-m", "vllm.entrypoints.cli.main", "serve", str(launch["model"]), "--max-model-len", "2k"]
    done = run_cli_read_only(
        "preflight", "--patches", launch["library"], "--format", "json", "--no-import", "--", *argv
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["target"] == str(launch["applied"]), done.stdout


# review 5 L3: the api_server reads its model only from --model: a positional is not offered as the fix
@pytest.mark.parametrize(
    "words", [["./some-model"], ["--dtype", "half", "org/some"], ["org/some", "--served-model-name", "n"]]
)
def test_the_api_server_with_only_a_positional_model_names_the_fix_that_works(words):
    with pytest.raises(BadInput) as refused:
        parse(["python", "-m", "vllm.entrypoints.openai.api_server", *words], "0.16.0")
    said = refused.value.message + " " + (refused.value.hint or "")
    assert "positional MODEL" not in said and "vllm serve MODEL" not in said, said
    assert "--model" in refused.value.hint, refused.value.hint


def test_the_api_server_with_no_model_names_model_only():
    with pytest.raises(BadInput) as refused:
        parse(["python", "-m", "vllm.entrypoints.openai.api_server", "--dtype", "half"], "0.16.0")
    assert "positional" not in refused.value.message and "--model" in refused.value.hint


# the type functions as each release writes them: human_readable_int's t/T from 0.13.0; from 0.20.0 a
# config object's bare human-readable numbers are written out before pydantic reads its JSON
@pytest.mark.parametrize(
    ("release", "words", "read"),
    [
        ("0.12.0", ["--max-num-batched-tokens", "2t"], None),
        ("0.13.0", ["--max-num-batched-tokens", "2t"], {"max-num-batched-tokens": 2 * 10**12}),
        ("0.12.0", ["--max-num-batched-tokens", "2g"], {"max-num-batched-tokens": 2 * 10**9}),
        ("0.19.0", ["--kv-transfer-config", '{"kv_buffer_size": 2M}'], None),
        (
            "0.20.0",
            ["--kv-transfer-config", '{"kv_buffer_size": 2M}'],
            {"kv-transfer-config": '{"kv_buffer_size": 2097152}'},
        ),
        ("0.20.0", ["--kv-transfer-config", '{"kv_role": "2M"}'], {"kv-transfer-config": '{"kv_role": "2M"}'}),
        ("0.20.0", ["--kv-transfer-config", '{"kv_buffer_size": 2.5M}'], None),
    ],
)
def test_a_value_is_held_to_its_releases_own_type_function(release, words, read):
    if read is None:
        with pytest.raises(BadInput, match=words[0]):
            parse(["vllm", "serve", "org/m", *words], release)
        return
    assert parse(["vllm", "serve", "org/m", *words], release).options == read


def test_a_long_json_value_with_a_typo_at_its_end_is_shown_cut_with_an_ellipsis_and_where_json_stopped():
    """New-user 24, A2: a --speculative-config missing its closing brace was quoted cut at 40 characters,
    with no "…" and no position: a person looked for the typo where nothing was wrong."""
    value = '{"method": "eagle3", "model": "./kimi-k2.5-eagle3", "num_speculative_tokens": 5'
    with pytest.raises(BadInput) as refused:
        parse(["vllm", "serve", "org/m", "--speculative-config", value], "0.16.0")
    said = refused.value.message
    assert said.endswith(f": …{value[-40:]}") and "not valid JSON" in said, said  # it ends where json stopped
    assert f"at column {len(value) + 1}" in said, said
