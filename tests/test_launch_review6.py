"""Review 6 of the launch (`preflight`, `run`): each finding's regression test, on inputs of its own.

H1: vLLM runs its general plugins (vllm.general_plugins entry points) before it builds a model, and a
plugin may register another class for the target's architecture: vLLM's own supports_eagle3() is
asked of the class the launch builds, the plugin's."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from helpers import run_cli_judged, run_cli_read_only, run_cli_writing
from importable_vllm import (
    ARCH,
    PLAIN_CLASS,
    importable_with_plugins,
    make_importable,
    preflight_importing,
    write_plugin,
)
from launch_fixtures import DEEPSEEK_V3, DRAFTER, apply_fix, findings, serve, write_eagle3_setup, write_model

from patchkit.base.errors import BadInput
from patchkit.launch.command import parse

EAGLE3_CLASS = """
    from vllm.model_executor.models.interfaces import SupportsEagle3


    class Eagle3Deepseek(SupportsEagle3):
        pass


    def register():
        from vllm.model_executor.models import ModelRegistry

        ModelRegistry.register_model("DeepseekV3ForCausalLM", "{name}_mod:Eagle3Deepseek")
"""


@pytest.fixture
def eagle3(tmp_path):
    tree, library = write_eagle3_setup(tmp_path)
    target = write_model(tmp_path / "models" / "dsv3", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "models" / "drafter", DRAFTER)
    return tree, library, serve(target, drafter)


def test_a_plugin_that_registers_a_class_without_eagle3_fails_the_applied_tree(eagle3, tmp_path):
    tree, library, command = eagle3
    env = importable_with_plugins(tree)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    plug = write_plugin(tmp_path / "plug", "acme", PLAIN_CLASS.format(name="acme"))

    alone = findings(preflight_importing(tree, library, command, env))["supports-eagle3"]
    assert alone["ok"] and "is True for vllm.model_executor.models.deepseek_v2." in alone["message"], alone

    env = {"PYTHONPATH": f"{env['PYTHONPATH']}:{plug}"}
    done = preflight_importing(tree, library, command, env)
    assert done.returncode == 1, done.stdout + done.stderr
    supports = findings(done)["supports-eagle3"]
    assert not supports["ok"], supports
    assert (
        "is False for acme_mod.NoEagle3Deepseek, which a vllm.general_plugins entry point registers"
        in (supports["message"])
    )
    assert "VLLM_PLUGINS" in supports["fix"]

    left_out = preflight_importing(tree, library, command, {**env, "VLLM_PLUGINS": "someone_else"})
    assert findings(left_out)["supports-eagle3"]["ok"], left_out.stdout


def test_a_plugin_that_registers_a_class_with_eagle3_passes_the_stock_tree(eagle3, tmp_path):
    tree, library, command = eagle3
    env = importable_with_plugins(tree)
    stock = findings(preflight_importing(tree, library, command, env))["supports-eagle3"]
    assert not stock["ok"] and stock["fix"] == apply_fix(tree, library, sys.executable), stock

    plug = write_plugin(tmp_path / "plug", "zeta", EAGLE3_CLASS.format(name="zeta"))
    env = {"PYTHONPATH": f"{env['PYTHONPATH']}:{plug}"}
    supports = findings(preflight_importing(tree, library, command, env))["supports-eagle3"]
    assert supports["ok"], supports
    assert (
        "is True for zeta_mod.Eagle3Deepseek, which a vllm.general_plugins entry point registers"
        in (supports["message"])
    )


def test_a_plugin_that_raises_stops_the_launch_and_is_named(eagle3, tmp_path):
    tree, library, command = eagle3
    env = importable_with_plugins(tree)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    body = "def register():\n    raise RuntimeError('no licence server at 10.0.0.9')\n"
    plug = write_plugin(tmp_path / "plug", "broken_plug", body)
    env = {"PYTHONPATH": f"{env['PYTHONPATH']}:{plug}"}
    done = preflight_importing(tree, library, command, env)
    assert done.returncode == 1, done.stdout + done.stderr
    supports = findings(done)["supports-eagle3"]
    assert not supports["ok"], supports
    assert "stops at the vllm.general_plugins entry point 'broken_plug', which raises" in supports["message"]
    assert "no licence server at 10.0.0.9" in supports["message"]
    assert "'broken_plug'" in supports["fix"]


# --- M1: a human-readable integer too large for vLLM's float reading is refused, exit 2, never 70 ----

HUGE = "8" * 330


@pytest.mark.parametrize(
    ("words", "release"),
    [
        (["--max-num-batched-tokens", f"{HUGE}m"], "0.16.0"),
        (["--kv-cache-memory-bytes", f"{HUGE}.25g"], "0.16.0"),
        (["--max-model-len", f"{HUGE}t"], "0.16.0"),
        (["--kv-transfer-config", f'{{"kv_connector": "x", "kv_buffer_size": {HUGE}k}}'], "0.20.0"),
    ],
)
def test_a_human_readable_integer_too_large_for_a_float_is_refused(words, release):
    with pytest.raises(BadInput) as refused:
        parse(["vllm", "serve", "org/m", *words], release)
    assert refused.value.exit_code == 2 and "is too large a number" in refused.value.message, refused.value.message


def test_a_too_large_human_readable_integer_in_a_config_file_or_run_exits_2(eagle3, tmp_path):
    tree, library, command = eagle3
    config = tmp_path / "serve.yaml"
    config.write_text(f"max-num-batched-tokens: {HUGE}k\n")
    for argv in ([*command, "--config", str(config)], [*command, "--max-model-len", f"{HUGE}g"]):
        done = run_cli_read_only("preflight", "--target", tree, "--patches", library, "--no-import", "--", *argv)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "too large a number" in done.stderr and "internal error" not in done.stderr


# --- M2: of config.json's architectures, the one judged is the one vLLM builds: the first registered --


def test_the_architecture_judged_is_the_first_the_registry_holds(eagle3, tmp_path):
    tree, library, _ = eagle3
    env = make_importable(tree)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    target = write_model(tmp_path / "listed", {**DEEPSEEK_V3, "architectures": ["AcmeUnknownLM", ARCH]})
    drafter = write_model(tmp_path / "drafter2", DRAFTER)
    argv = serve(target, drafter)

    static = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--", *argv
    )
    supports = findings(static)["supports-eagle3"]
    assert static.returncode == 0 and supports["ok"], supports
    assert f"{ARCH} has base SupportsEagle3" in supports["message"]

    supports = findings(preflight_importing(tree, library, argv, env))["supports-eagle3"]
    assert supports["ok"], supports
    assert f"is True for vllm.model_executor.models.deepseek_v2.{ARCH}" in supports["message"]


def test_a_registered_architecture_whose_class_does_not_import_is_passed_over_as_vllm_does(eagle3, tmp_path):
    tree, library, _ = eagle3
    env = make_importable(tree)
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    models_dir = tree / "vllm" / "model_executor" / "models"
    (models_dir / "gone.py").write_text("import a_module_nobody_installed\n")
    registry = tree / "vllm" / "model_executor" / "models" / "registry.py"
    registry.write_text(
        registry.read_text().replace(
            '    "LlamaForCausalLM"', '    "GoneForCausalLM": ("gone", "Gone"),\n    "LlamaForCausalLM"'
        )
    )
    target = write_model(tmp_path / "listed", {**DEEPSEEK_V3, "architectures": ["GoneForCausalLM", ARCH]})
    supports = findings(preflight_importing(tree, library, serve(target, tmp_path / "models" / "drafter"), env))
    assert supports["supports-eagle3"]["ok"], supports["supports-eagle3"]
    assert f"is True for vllm.model_executor.models.deepseek_v2.{ARCH}" in supports["supports-eagle3"]["message"]


# --- L2, L3: the speculative config's whole-number fields as pydantic's lax mode reads a string --------


MORE_FIELDS = """\
    max_model_len: int | None = Field(default=None, ge=1)
    disable_by_batch_size: int | None = Field(default=None, ge=2)

    def _verify_and_get_draft_tp(self):
        return self.draft_tensor_parallel_size

"""


def _speculative(tmp_path: Path, spec: dict):
    """The speculative-config finding on a stock tree whose speculative.py declares bounds (or None)."""
    tree, library = write_eagle3_setup(tmp_path)
    source = tree / "vllm" / "config" / "speculative.py"
    text = source.read_text().replace(
        "    revision: str | None = None\n", "    revision: str | None = None\n" + MORE_FIELDS
    )
    source.write_text(text)
    target = write_model(tmp_path / "models" / "dsv3", DEEPSEEK_V3)
    drafter = write_model(tmp_path / "models" / "drafter", DRAFTER)
    spec = {"method": "eagle3", "model": str(drafter), **spec}
    argv = ["vllm", "serve", str(target), "--speculative-config", json.dumps(spec)]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--", *argv
    )
    return findings(done).get("speculative-config")


@pytest.mark.parametrize(
    "spec",
    [
        {"num_speculative_tokens": "0b11"},
        {"num_speculative_tokens": "4.5"},
        {"num_speculative_tokens": "2e1"},
        {"num_speculative_tokens": 4, "max_model_len": "2m"},
        {"num_speculative_tokens": 4, "disable_by_batch_size": "1__0"},
    ],
)
def test_a_whole_number_field_given_a_string_pydantic_cannot_read_is_refused(tmp_path, spec):
    found = _speculative(tmp_path, spec)
    assert found is not None and not found["ok"], found


@pytest.mark.parametrize(
    "spec",
    [
        {"num_speculative_tokens": "\t4.00 "},
        {"num_speculative_tokens": "+4", "max_model_len": "2_048"},
    ],
)
def test_a_whole_number_field_given_a_string_pydantic_reads_passes(tmp_path, spec):
    found = _speculative(tmp_path, spec)
    assert found is None or found["ok"], found


def test_the_draft_tensor_parallel_fix_names_1_once_when_the_target_runs_on_one_gpu(tmp_path):
    found = _speculative(tmp_path, {"num_speculative_tokens": 4, "draft_tensor_parallel_size": 3})
    assert found is not None and found["fix"] == 'give "draft_tensor_parallel_size" 1, or drop it', found


# --- L4: a `python` launch with -W, -X or an attached -m is read as the launch it is ----------------


@pytest.mark.parametrize(
    ("line", "serve", "flags"),
    [
        ("python3 -W error::UserWarning -m vllm.entrypoints.cli.main serve lab/m", True, []),
        ("python -Xfaulthandler -m vllm.entrypoints.openai.api_server --model lab/m", False, []),
        ("python -sWdefault -mvllm.entrypoints.cli.main serve lab/m", True, ["-s"]),
        ("python -B -X dev -Pm vllm.entrypoints.cli.main serve lab/m", True, ["-B", "-P"]),
    ],
)
def test_python_options_with_a_value_are_read_as_python_reads_them(line, serve, flags):
    command = parse(line.split(), "0.16.0")
    assert (command.model, command.serve, command.python_flags) == ("lab/m", serve, flags)


def test_a_python_launch_with_the_module_value_missing_is_still_no_launch():
    with pytest.raises(BadInput) as refused:
        parse(["python", "-X", "dev", "-m"], "0.16.0")
    assert "not a vLLM launch" in refused.value.message


# --- L1: validate_parsed_serve_args' option pairs, refused as vLLM refuses them before any load ------


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["--enable-auto-tool-choice"], "--enable-auto-tool-choice requires --tool-call-parser"),
        (["--enable-auto-tool-choice", "--tool-call-parser", ""], "--enable-auto-tool-choice requires"),
        (["--enable-log-outputs", "--no-enable-log-requests"], "--enable-log-outputs requires --enable-log-requests"),
    ],
)
def test_an_option_that_needs_another_is_refused_as_vllm_refuses_it(words, said):
    for argv in (
        ["vllm", "serve", "lab/m", *words],
        ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "lab/m", *words],
    ):
        with pytest.raises(BadInput) as refused:
            parse(argv, "0.16.0")
        assert said in refused.value.message, refused.value.message


def test_an_option_with_the_one_it_needs_is_read():
    words = [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--enable-log-outputs",
        "--enable-log-requests",
    ]
    assert parse(["vllm", "serve", "lab/m", *words], "0.16.0").model == "lab/m"


# --- H1, where vLLM is not asked: the general plugins that may change the class are named ------------


def test_without_vllm_asked_the_general_plugins_installed_are_named(eagle3, tmp_path):
    tree, library, command = eagle3
    assert run_cli_writing("apply", "--target", tree, "--patches", library, "--no-import").returncode == 0
    args = ["preflight", "--target", tree, "--patches", library, "--format", "json", "--no-import", "--"]
    alone = findings(run_cli_judged(*args, *command))["supports-eagle3"]
    assert alone["ok"] and "general plugins" not in alone["message"], alone  # patchkit's guard is no such plugin

    write_plugin(tree, "site_plug", "def register():\n    pass\n")
    plug = write_plugin(tmp_path / "elsewhere", "path_plug", "def register():\n    pass\n")
    done = run_cli_judged(*args, "env", f"PYTHONPATH={plug}", *command)
    supports = findings(done)["supports-eagle3"]
    assert supports["ok"], supports
    assert (
        f"not judged: the class the general plugins path_plug, site_plug may register for {ARCH}"
        in (supports["message"])
    )
