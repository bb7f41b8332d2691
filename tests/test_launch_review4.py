"""Review 4 of the launch (preflight / run): what a launch names read as vLLM 0.16.0 reads it. Each
test here failed on the code before its fix; the real-vLLM comparisons are in tests/vllm_import/."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import assert_clean_failure, run_cli, run_cli_read_only, run_cli_writing, write_tree
from importable_vllm import engine_args
from launch_fixtures import DEEPSEEK_V3, DRAFTER, write_eagle3_setup, write_model

from patchkit.base.errors import BadInput, TargetError
from patchkit.launch.command import parse
from patchkit.launch.preflight import _models

NARROW = {**DEEPSEEK_V3, "hidden_size": 4096}


@pytest.fixture
def models(tmp_path) -> dict[str, Path]:
    return {
        "target": write_model(tmp_path / "models" / "target", DEEPSEEK_V3),
        "drafter": write_model(tmp_path / "models" / "drafter", DRAFTER),
    }


def spec(drafter: object, **fields: object) -> str:
    return json.dumps({"method": "eagle3", "model": drafter, "num_speculative_tokens": 3, **fields})


# --- 1: a name no file can have (a NUL, a lone surrogate) is bad input, never exit 70 ----------------


def _nul_launches(tmp_path: Path, models: dict[str, Path]) -> list[list[str]]:
    target, drafter = str(models["target"]), str(models["drafter"])
    (tmp_path / "model.yaml").write_text('model: "m\\0odel"\n')
    (tmp_path / "config-path.yaml").write_text('hf-config-path: "c\\0fg"\n')
    (tmp_path / "revision.yaml").write_text('revision: "r\\0ev"\n')
    (tmp_path / "nul.json").write_text(json.dumps({target: "t\u0000o"}))
    (tmp_path / "surrogate.json").write_text(json.dumps({target: "\ud834"}))
    (tmp_path / "drafter-surrogate.json").write_text(json.dumps({drafter: "\udfff-drafter"}))
    redirect = "VLLM_MODEL_REDIRECT_PATH="
    return [
        ["vllm", "serve", target, "--speculative-config", spec("lab/dr\u0000after")],
        ["vllm", "serve", target, "--speculative-config", spec(drafter, revision="\u0000")],
        ["vllm", "serve", target, "--speculative-config.model", '"x\\u0000y"', "--speculative-config.method", "eagle3"],
        ["vllm", "serve", "--config", str(tmp_path / "model.yaml")],
        ["vllm", "serve", target, "--config", str(tmp_path / "config-path.yaml")],
        ["vllm", "serve", target, "--config", str(tmp_path / "revision.yaml")],
        ["env", f"{redirect}{tmp_path / 'nul.json'}", "vllm", "serve", target],
        ["env", f"{redirect}{tmp_path / 'surrogate.json'}", "vllm", "serve", target],
        [
            "env",
            f"{redirect}{tmp_path / 'drafter-surrogate.json'}",
            "vllm",
            "serve",
            target,
            "--speculative-config",
            spec(drafter),
        ],
    ]


def test_a_name_no_file_can_hold_is_bad_input_wherever_the_launch_gives_it(tmp_path, models):
    for argv in _nul_launches(tmp_path, models):
        with pytest.raises(BadInput, match="no file name can hold it"):
            _models(parse(argv))


def test_a_nul_in_a_name_is_exit_2_for_preflight_and_run(tmp_path, models):
    tree, library = write_eagle3_setup(tmp_path)
    argv = _nul_launches(tmp_path, models)[3]
    for verb in (["preflight", "--no-import"], ["run"]):
        done = run_cli(*verb, "--target", tree, "--patches", library, "--", *argv)
        assert_clean_failure(done, 2)
        assert "no file name can hold it" in done.stderr


# --- 2: offline (HF_HUB_OFFLINE), EngineArgs takes the cached snapshot before any redirect ----------

COMMIT = "c" * 40


def cache_model(cache: Path, repo: str, config: dict, commit: str = COMMIT) -> Path:
    root = cache / f"models--{repo.replace('/', '--')}"
    write_model(root / "snapshots" / commit, config)
    (root / "refs").mkdir(exist_ok=True)
    (root / "refs" / "main").write_text(commit)
    return root / "snapshots" / commit


def read_models(*argv: str, variables: dict[str, str]):
    """(target, drafter) as patchkit reads them for `argv` run with exactly `variables`."""
    target, drafter, _, _ = _models(parse(["env", "-i", *(f"{k}={v}" for k, v in variables.items()), *argv]))
    return target, drafter


@pytest.mark.parametrize(
    ("switches", "is_offline"),
    [
        ({"HF_HUB_OFFLINE": "1"}, True),
        ({"HF_HUB_OFFLINE": "yes"}, True),
        ({"HF_HUB_OFFLINE": "On"}, True),
        ({"TRANSFORMERS_OFFLINE": "TRUE"}, True),
        ({"HF_HUB_OFFLINE": "", "TRANSFORMERS_OFFLINE": "1"}, True),  # an empty value: the other name
        ({"HF_HUB_OFFLINE": "0", "TRANSFORMERS_OFFLINE": "1"}, False),  # the first name set wins
        ({"HF_HUB_OFFLINE": "2"}, False),
        ({}, False),
    ],
)
def test_offline_the_target_is_its_cached_snapshot_and_never_redirected(tmp_path, switches, is_offline):
    hub = tmp_path / "hub"
    snapshot = cache_model(hub, "lab/served", NARROW)
    wide = write_model(tmp_path / "wide", DEEPSEEK_V3)
    table = tmp_path / "redirect.json"
    table.write_text(json.dumps({"lab/served": str(wide)}))
    variables = {"HF_HUB_CACHE": str(hub), "VLLM_MODEL_REDIRECT_PATH": str(table), **switches}
    target, _ = read_models("vllm", "serve", "lab/served", variables=variables)
    assert target.get("hidden_size") == (4096 if is_offline else 7168)
    assert (target.path.parent == snapshot) is is_offline


def test_offline_a_table_naming_the_snapshot_path_redirects_it(tmp_path):
    hub = tmp_path / "hub"
    snapshot = cache_model(hub, "lab/served", NARROW)
    table = tmp_path / "redirect.txt"
    table.write_text(f"{snapshot} {write_model(tmp_path / 'wide', DEEPSEEK_V3)}\n")
    variables = {"HF_HUB_CACHE": str(hub), "VLLM_MODEL_REDIRECT_PATH": str(table), "HF_HUB_OFFLINE": "1"}
    target, _ = read_models("vllm", "serve", "lab/served", variables=variables)
    assert target.get("hidden_size") == 7168


def test_offline_the_drafter_is_still_redirected(tmp_path, models):
    table = tmp_path / "redirect.txt"
    table.write_text(f"lab/drafter {models['drafter']}\n")
    variables = {"HF_HUB_CACHE": str(tmp_path / "empty"), "VLLM_MODEL_REDIRECT_PATH": str(table), "HF_HUB_OFFLINE": "1"}
    _, drafter = read_models(
        "vllm", "serve", str(models["target"]), "--speculative-config", spec("lab/drafter"), variables=variables
    )
    assert drafter is not None and drafter.path == models["drafter"] / "config.json"


@pytest.mark.parametrize(
    "where",
    [
        "transformers-cache-only",  # TRANSFORMERS_CACHE is transformers' own: get_model_path never reads it
        "not-cached",
        "redirected-only",  # the redirect would find it, but comes after the snapshot look-up
        "revision-not-cached",
        "tokenizer-not-cached",
    ],
)
def test_offline_a_model_with_no_cached_snapshot_is_refused_as_vllm_refuses_it(tmp_path, models, where):
    hub, other = tmp_path / "hub", tmp_path / "transformers"
    if where != "not-cached":
        cache_model(other if where == "transformers-cache-only" else hub, "lab/served", DEEPSEEK_V3)
    table = tmp_path / "redirect.txt"
    table.write_text(f"lab/absent {models['target']}\n")
    variables = {
        "HF_HUB_CACHE": str(hub),
        "TRANSFORMERS_CACHE": str(other),
        "VLLM_MODEL_REDIRECT_PATH": str(table),
        "HF_HUB_OFFLINE": "1",
    }
    argv = {
        "redirected-only": ["vllm", "serve", "lab/absent"],
        "revision-not-cached": ["vllm", "serve", "lab/served", "--revision", "v2"],
        "tokenizer-not-cached": ["vllm", "serve", "lab/served", "--tokenizer", "lab/absent"],
    }.get(where, ["vllm", "serve", "lab/served"])
    with pytest.raises(TargetError, match="HF_HUB_OFFLINE") as refused:
        read_models(*argv, variables=variables)
    assert "`hf` comes with huggingface_hub" in str(refused.value.hint)  # newuser17 5d: every `hf` hint says it
    variables["HF_HUB_OFFLINE"] = "0"  # online, vLLM reads these (redirected, or from transformers' cache)
    if where == "transformers-cache-only":
        assert read_models(*argv, variables=variables)[0].get("hidden_size") == 7168


BUILD_ARG_UTILS = engine_args(
    '"--model"',
    head="import huggingface_hub.constants as constants",
    init="self.built_offline = constants.HF_HUB_OFFLINE  # vLLM's __post_init__ swaps a hub id for its snapshot when True",
    config='raise ValueError(f"built offline {self.built_offline}, configured offline {constants.HF_HUB_OFFLINE}")',
)


@pytest.mark.parametrize(
    ("prefix", "built"), [([], False), (["HF_HUB_OFFLINE=1"], True), (["TRANSFORMERS_OFFLINE=on"], True)]
)
def test_vllms_validation_builds_the_engine_args_online_or_offline_as_the_launch_does(tmp_path, models, prefix, built):
    """The worker never downloads (offline once the engine arguments are built), but builds them in
    the launch's own mode: offline, vLLM's EngineArgs swaps a hub id for its snapshot, never redirected."""

    tree, library = write_eagle3_setup(tmp_path)
    fake = tmp_path / "fake"
    for package in ("vllm", "vllm/engine", "huggingface_hub"):
        (fake / package).mkdir(parents=True)
        (fake / package / "__init__.py").write_text("")
    (fake / "vllm" / "engine" / "arg_utils.py").write_text(BUILD_ARG_UTILS)
    offline = "os.environ.get('HF_HUB_OFFLINE') or os.environ.get('TRANSFORMERS_OFFLINE') or ''"
    (fake / "huggingface_hub" / "constants.py").write_text(
        f"import os\nHF_HUB_OFFLINE = ({offline}).upper() in ('1', 'ON')\n"
    )
    command = ["env", "-i", f"PYTHONPATH={fake}", *prefix, "vllm", "serve", str(models["target"])]
    base = ["preflight", "--target", tree, "--python", sys.executable, "--patches", library, "--format", "json"]
    done = run_cli(*base, "--", *command)
    [check] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "vllm-validation"]
    assert f"built offline {built}, configured offline True" in check["message"], check


# --- 3: a model path read as vLLM reads it: no ~ expansion, a file there refused ----------------------


def test_a_tilde_in_a_model_path_is_never_expanded(tmp_path, monkeypatch, models):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))  # patchkit's own home too: nothing would find it but expansion
    write_model(home / "models" / "m", DEEPSEEK_V3)
    write_model(home / "drafters" / "d", DRAFTER)
    (tmp_path / "tilde.yaml").write_text(f"model: ~/models/m\nspeculative-config:\n  model: {models['drafter']}\n")
    variables = {"HOME": str(home), "HF_HUB_CACHE": str(tmp_path / "hub")}
    for argv in (
        ["vllm", "serve", "--config", str(tmp_path / "tilde.yaml")],
        ["vllm", "serve", str(models["target"]), "--speculative-config", spec("~/drafters/d")],
        ["vllm", "serve", str(models["target"]), "--hf-config-path", "~/models/m"],
    ):
        with pytest.raises(TargetError, match=r"no config\.json found") as refused:
            read_models(*argv, variables=variables)
        assert "never expands ~" in (refused.value.hint or "")


@pytest.mark.parametrize(("content", "says"), [(b"not a model\n", "is a file"), (b"GGUF\x03\x00", "GGUF")])
def test_a_file_at_the_model_path_is_not_read_as_a_hub_id(tmp_path, monkeypatch, models, content, says):
    hub = tmp_path / "hub"
    cache_model(hub, "lab/served", DEEPSEEK_V3)
    cache_model(hub, "lab/drafter", DRAFTER)
    (tmp_path / "lab").mkdir()
    monkeypatch.chdir(tmp_path)
    variables = {"HF_HUB_CACHE": str(hub)}
    for name in ("lab/served", "lab/drafter"):
        (tmp_path / name).write_bytes(content)
        with pytest.raises(TargetError, match=says):
            read_models("vllm", "serve", "lab/served", "--speculative-config", spec("lab/drafter"), variables=variables)
        (tmp_path / name).unlink()
    assert read_models("vllm", "serve", "lab/served", variables=variables)[0].get("hidden_size") == 7168


# --- 5: the method vLLM infers from the drafter's name, after VLLM_MODEL_REDIRECT_PATH -------------


@pytest.mark.parametrize(
    ("written", "redirected_to", "method"),
    [
        ("lab/eagle3-ds", "plain-drafter", None),  # the name written says eagle3; vLLM sees the redirect's
        ("lab/plain", "EAGLE3-ds", "eagle3"),
        ("lab/plain", "EAGLE-ds", "eagle"),
        ("lab/eagle-x", "other", None),
    ],
)
def test_the_method_is_told_from_the_redirected_drafter_name(tmp_path, written, redirected_to, method):
    drafter = write_model(tmp_path / redirected_to, {**DRAFTER, "model_type": "llama"})
    table = tmp_path / "redirect.txt"
    table.write_text(f"{written} {drafter}\n")
    for offline_switch in ("0", "1"):  # the drafter is redirected offline too
        argv = ["env", f"VLLM_MODEL_REDIRECT_PATH={table}", f"HF_HUB_OFFLINE={offline_switch}", "vllm", "serve", "m"]
        command = parse([*argv, "--speculative-config", json.dumps({"model": written, "num_speculative_tokens": 3})])
        assert command.named_method == method


def test_a_drafter_whose_redirected_name_names_no_method_fails_the_speculative_config(tmp_path, models):
    tree, library = write_eagle3_setup(tmp_path)
    table = tmp_path / "redirect.txt"
    table.write_text(f"lab/eagle3-ds {models['drafter']}\n")
    sc = json.dumps({"model": "lab/eagle3-ds", "num_speculative_tokens": 3})
    argv = [
        "env",
        f"VLLM_MODEL_REDIRECT_PATH={table}",
        "vllm",
        "serve",
        str(models["target"]),
        "--speculative-config",
        sc,
    ]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--", *argv
    )
    assert_clean_failure(done, 1)
    refused = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "speculative-config"]
    assert refused and not refused[0]["ok"] and "names none" in refused[0]["message"], done.stdout


# --- 4: the interpreter options on a `vllm` script's #! line, honoured where the launch's tree is found


def _venv_importing(tree: Path, root: Path) -> Path:
    """A venv whose python imports vllm from `tree` (a .pth)."""
    import venv

    venv.create(root, with_pip=False, symlinks=True)
    [site] = root.glob("lib/python*/site-packages")
    (site / "stock.pth").write_text(f"{tree}\n")
    return root / "bin" / "python"


def _script(python: Path, shebang: str) -> Path:
    script = python.parent / "vllm"
    script.write_text(f"#!{shebang.format(python=python, bin=python.parent)}\nimport sys\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize(
    ("shebang", "imports"),
    [
        ("{python}", "checked"),  # PYTHONPATH, inherited, comes first
        ("{python} -E", "other"),
        ("{python} -sE", "other"),
        ("{python} -I", "other"),
        ("/usr/bin/env -S PATH={bin} python -I", "other"),
    ],
)
def test_the_tree_a_script_imports_is_found_with_its_interpreter_options(tmp_path, models, shebang, imports):

    tree, library = write_eagle3_setup(tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    other = write_tree(tmp_path / "other")
    script = _script(_venv_importing(other, tmp_path / "venv"), shebang)
    argv = [str(script), "serve", str(models["target"])]
    base = ["preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--"]
    done = run_cli(*base, *argv, env={"PYTHONPATH": str(tree)})
    checks = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    if imports == "checked":
        assert "launch-target" not in checks, done.stdout
    else:
        assert_clean_failure(done, 1)
        assert not checks["launch-target"]["ok"] and str(other) in checks["launch-target"]["message"], done.stdout


@pytest.mark.parametrize(
    ("options", "variables", "first"),
    [
        ("", {}, "bin"),
        (" -P", {}, None),
        (" -I", {}, None),
        (" -sP", {}, None),
        ("", {"PYTHONSAFEPATH": "1"}, None),
        (" -E", {"PYTHONSAFEPATH": "1"}, "bin"),  # -E: PYTHONSAFEPATH is ignored
    ],
)
def test_the_first_path_of_a_script_follows_its_interpreter_options(tmp_path, options, variables, first):
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.symlink_to(Path(sys.executable))
    script = _script(python, "{python}" + options)
    command = parse(["env", "-i", *(f"{k}={v}" for k, v in variables.items()), str(script), "serve", "m"])
    assert command.first_path() == (str(python.parent) if first else None)


@pytest.mark.parametrize("options", [" -s -E", " -c pass", " -m vllm", " -x", " -X"])
def test_interpreter_options_patchkit_cannot_pass_on_cannot_be_told(tmp_path, options):
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.symlink_to(Path(sys.executable))
    command = parse([str(_script(python, "{python}" + options)), "serve", "m"])
    with pytest.raises(TargetError, match="cannot tell"):
        command.interpreter()


@pytest.mark.parametrize(
    ("options", "passed", "prefix", "mode"),
    [
        (" -W error", [], None, "default"),  # warnings: no import changes
        (" -Xpycache_prefix=/pp", ["-Xpycache_prefix=/pp"], "/pp", "default"),
        (" -EXpycache_prefix=rel", ["-E", "-Xpycache_prefix=rel"], "{cwd}/rel", "default"),
        (
            " -X pycache_prefix=/pp",
            ["-X pycache_prefix=/pp"],
            None,
            "default",
        ),  # one word: " pycache_prefix" is no option
        (" -Xutf8", ["-Xutf8"], None, "default"),
    ],
)
def test_a_scripts_x_options_are_read_as_a_python_launchs(tmp_path, options, passed, prefix, mode):
    """The kernel passes what follows a #! line's interpreter as one word, which Python reads as its
    options; -X values (a pycache prefix) are the launch's as `python -X...`'s are."""
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.symlink_to(Path(sys.executable))
    command = parse([str(_script(python, "{python}" + options)), "serve", "m"])
    assert command.launch_python()[1] == passed
    assert command.pycache_prefix() == (prefix.format(cwd=os.getcwd()) if prefix else None)
    assert command.interpreter_settings()[2] == mode


def test_a_scripts_hash_mode_given_through_env_s_is_the_launchs(tmp_path):
    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.symlink_to(Path(sys.executable))
    line = "/usr/bin/env -S {python} --check-hash-based-pycs always --check-hash-based-pycs never -sX pycache_prefix=/q"
    command = parse([str(_script(python, line)), "serve", "m"])
    assert command.interpreter_settings() == (["-s"], ["pycache_prefix=/q"], "never")
    assert command.loading_options() == ["-Xpycache_prefix=/q", "--check-hash-based-pycs", "never"]
    assert command.pycache_prefix() == "/q"


def test_an_x_values_letters_are_not_flags_of_the_scripts_python(tmp_path, monkeypatch):
    """`-Xpycache_prefix=/Envs/I` holds an E and an I, which are no -E or -I: PYTHONPATH is still on
    the launch's import path, and PYTHONPYCACHEPREFIX is not what sets its prefix."""
    from patchkit.launch.engine import import_path

    python = tmp_path / "bin" / "python3"
    python.parent.mkdir()
    python.symlink_to(Path(sys.executable))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "libs"))
    command = parse([str(_script(python, "{python} -Xpycache_prefix=/Envs/I")), "serve", "m"])
    assert command.launch_python()[1] == ["-Xpycache_prefix=/Envs/I"]
    assert str(tmp_path / "libs") in import_path(command, tmp_path)
    assert command.pycache_prefix() == "/Envs/I" and command.first_path() == str(python.parent)


# --- 6: a relative python in the command is the launch's, from its working directory ----------------


def test_a_relative_python_in_the_command_is_found_from_the_launchs_directory(tmp_path, models):
    tree, library = write_eagle3_setup(tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    _venv_importing(tree, tmp_path / "project" / ".venv")
    module = [".venv/bin/python", "-m", "vllm.entrypoints.openai.api_server", "--model", str(models["target"])]
    base = ["preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--"]
    done = run_cli(*base, *module, cwd=tmp_path / "project")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "launch-target" not in {f["check"] for f in json.loads(done.stdout)["findings"]}
    other = write_tree(tmp_path / "project" / "other")
    (tmp_path / "project" / ".venv").rename(tmp_path / "project" / "elsewhere")
    _venv_importing(other, tmp_path / "project" / ".venv")
    done = run_cli(*base, *module, cwd=tmp_path / "project")
    assert_clean_failure(done, 1)
    [found] = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "launch-target"]
    assert str(other) in found["message"] and "not found" not in found["message"], found


# --- 7: an option vLLM reads with optional_type: "" and "None" are no value --------------------------


@pytest.mark.parametrize(
    "given",
    [
        ["--revision", "None"],
        ["--hf-config-path", "None"],
        ["--revision", ""],
        ["--config", "{tmp}/empty.yaml"],  # `revision:` and `hf-config-path:` with no value
    ],
)
def test_none_or_nothing_for_an_optional_option_is_the_default(tmp_path, given):
    hub = tmp_path / "hub"
    cache_model(hub, "lab/served", NARROW)
    (tmp_path / "empty.yaml").write_text("revision:\nhf-config-path:\n")
    argv = ["vllm", "serve", "lab/served", *(g.format(tmp=tmp_path) for g in given)]
    target, _ = read_models(*argv, variables={"HF_HUB_CACHE": str(hub)})
    assert target.get("hidden_size") == 4096


def test_none_is_no_tokenizer_revision_offline(tmp_path):
    hub = tmp_path / "hub"
    cache_model(hub, "lab/served", NARROW)
    argv = ["vllm", "serve", "lab/served", "--tokenizer", "lab/served", "--tokenizer-revision", "None"]
    target, _ = read_models(*argv, variables={"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"})
    assert target.get("hidden_size") == 4096


# --- 8: env -C with a relative directory: the hint, followed, is accepted ----------------------------


def test_the_env_chdir_hint_followed_is_accepted(tmp_path, monkeypatch):
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInput) as refused:
        parse(["env", "-C", "sub", "vllm", "serve", "m"])
    hint = refused.value.hint or ""
    directory, command = hint.split("cd ", 1)[1].split(" && patchkit preflight -- ")
    monkeypatch.chdir(directory)
    command = command.replace("...", "vllm serve m").split()
    assert parse(command).cwd == str(tmp_path / "sub")


@pytest.mark.parametrize(("flags", "imports"), [([], "checked"), (["-E"], "other"), (["-s", "-I"], "other")])
def test_python_m_with_interpreter_options_is_read_and_they_are_honoured(tmp_path, models, flags, imports):
    tree, library = write_eagle3_setup(tmp_path)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    python = _venv_importing(write_tree(tmp_path / "other"), tmp_path / "venv")
    module = [str(python), *flags, "-m", "vllm.entrypoints.openai.api_server", "--model", str(models["target"])]
    base = ["preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--"]
    done = run_cli(*base, *module, env={"PYTHONPATH": str(tree)})
    checks = {f["check"]: f for f in json.loads(done.stdout)["findings"]}
    assert ("launch-target" in checks) is (imports == "other"), done.stdout
    assert done.returncode == (1 if imports == "other" else 0), done.stdout + done.stderr
