"""A misspelt --tool-call-parser (new-user 14 item 3): vLLM refuses `--enable-auto-tool-choice
--tool-call-parser NAME` at start when the tree's release registers no parser NAME; preflight fails it
with "did you mean", from the names read out of the tree's files (nothing imported)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers import lay_out_release, run_cli, run_cli_read_only
from launch_fixtures import DEEPSEEK_V3, write_eagle3_setup, write_model

from patchkit.launch import toolparsers
from patchkit.launch.engine import TREE_FILE_LIMIT, tree_reader

TABLE = """_TOOL_PARSERS_TO_REGISTER = {
    "deepseek_v3": ("deepseekv3_tool_parser", "DeepSeekV3ToolParser"),
    "kimi_k2": ("kimi_k2_tool_parser", "KimiK2ToolParser"),
    "granite-20b-fc": ("granite_20b_fc_tool_parser", "Granite20bFCToolParser"),
}
"""
REASONING = """_REASONING_PARSERS_TO_REGISTER = {
    "deepseek_r1": ("deepseek_r1_reasoning_parser", "DeepSeekR1ReasoningParser"),
    "qwen3": ("qwen3_reasoning_parser", "Qwen3ReasoningParser"),
}
"""
OLD_INIT = "from .abstract_tool_parser import ToolParser\nfrom .hermes_tool_parser import Hermes2ProToolParser\n"
# a parser plugin of the user's: the names it registers, as vLLM's parser files do
PLUGIN = """from vllm.tool_parsers import ToolParserManager
from vllm.reasoning import ReasoningParserManager


@ToolParserManager.register_module("mine")
class Mine:
    pass


@ReasoningParserManager.register_module(name=["mine", "x"])
class MineReasoning:
    pass
"""
OLD_PARSER = '@ToolParserManager.register_module(["hermes", "hermes2"])\nclass Hermes2ProToolParser:\n    pass\n'


@pytest.fixture
def launch(tmp_path) -> tuple[Path, Path, Path]:
    tree, library = write_eagle3_setup(tmp_path)
    (tree / "vllm" / "tool_parsers").mkdir()
    (tree / "vllm" / "tool_parsers" / "__init__.py").write_text(TABLE)
    (tree / "vllm" / "reasoning").mkdir()
    (tree / "vllm" / "reasoning" / "__init__.py").write_text(REASONING)
    for plugin in ("mine.py", "p.py"):  # parser files of the user's, beside the launch (preflight's cwd)
        (tmp_path / plugin).write_text(PLUGIN)
    return tree, library, write_model(tmp_path / "models" / "dsv3", DEEPSEEK_V3)


def preflight(tree: Path, library: Path, model: Path | str, *options: str):
    """Run from the tree's directory, where the `launch` fixture writes the plugins (mine.py, p.py); in this
    process (read-only, judged by its output and exit code alone: CONTRIBUTING)."""
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, "--no-import", "--format", "json",
        "--", "vllm", "serve", str(model), *options, cwd=tree.parent,
    )  # fmt: skip
    return done, [f for f in json.loads(done.stdout)["findings"] if f["check"] == "command"]


@pytest.mark.parametrize(
    ("given", "meant"), [("deepseekv3", "deepseek_v3"), ("kimi-k2", "kimi_k2"), ("Kimi_K2", "kimi_k2")]
)
def test_a_misspelt_parser_fails_with_the_name_meant(launch, given, meant):
    tree, library, model = launch
    done, (found,) = preflight(tree, library, model, "--enable-auto-tool-choice", "--tool-call-parser", given)
    assert done.returncode == 1 and not found["ok"], done.stdout
    assert f"--tool-call-parser {given}: vLLM 0.16.0 registers no tool-call parser of that name" in found["message"]
    assert "vllm/tool_parsers/__init__.py" in found["message"] and "refuses the launch at start" in found["message"]
    assert found["fix"] == f"did you mean {meant}? write --tool-call-parser {meant}"


def test_a_misspelt_reasoning_parser_fails_too_without_auto_tool_choice(launch):
    """Review 10a M1: vLLM refuses an unregistered --reasoning-parser at start, whatever the tool options."""
    tree, library, model = launch
    done, (found,) = preflight(tree, library, model, "--reasoning-parser", "deepseekr1")
    assert done.returncode == 1 and not found["ok"], done.stdout
    assert found["message"].startswith("--reasoning-parser deepseekr1: vLLM 0.16.0 registers no reasoning parser")
    assert "(vllm/reasoning/__init__.py)" in found["message"]
    assert found["fix"] == "did you mean deepseek_r1? write --reasoning-parser deepseek_r1"
    for fine in (
        ("--reasoning-parser", "qwen3"),
        ("--reasoning-parser", ""),  # review 11 M2b: vLLM skips an empty name and serves
    ):
        assert preflight(tree, library, model, *fine)[1] == [], fine
    _, (plugged,) = preflight(tree, library, model, "--reasoning-parser", "x", "--reasoning-parser-plugin", "p.py")
    assert plugged["result"] == "cannot judge", plugged


def test_a_name_nothing_resembles_lists_the_registered_ones(launch):
    tree, library, model = launch
    _, (found,) = preflight(tree, library, model, "--enable-auto-tool-choice", "--tool-call-parser", "zzz")
    assert (
        found["fix"] == "write one of deepseek_v3, granite-20b-fc, kimi_k2, or load your own with --tool-parser-plugin"
    )


@pytest.mark.parametrize(
    "options",
    [
        ("--enable-auto-tool-choice", "--tool-call-parser", "granite-20b-fc"),  # registered
        ("--tool-call-parser", "deepseekv3"),  # vLLM holds the name to its registry only with auto tool choice
    ],
)
def test_a_registered_name_or_one_vllm_does_not_check_is_no_finding(launch, options):
    tree, library, model = launch
    done, found = preflight(tree, library, model, *options)
    assert found == [], done.stdout


def test_the_parser_is_judged_when_the_model_is_missing_too(launch):
    tree, library, _ = launch
    done, (found,) = preflight(tree, library, "org/absent", "--enable-auto-tool-choice", "--tool-call-parser", "x")
    assert done.returncode == 4 and not found["ok"], done.stdout


def test_a_tree_without_the_registry_cannot_judge_the_name_and_says_what_gives_it(launch):
    tree, library, model = launch
    (tree / "vllm" / "tool_parsers" / "__init__.py").unlink()  # a tree from `fetch --dest`
    (tree / "vllm" / "reasoning" / "__init__.py").write_text("from .absent import X\n")  # not read whole
    options = ("--enable-auto-tool-choice", "--tool-call-parser", "deepseekv3", "--reasoning-parser", "qwen3")
    done, (tool, reasoning) = preflight(tree, library, model, *options)
    assert [tool["result"], reasoning["result"]] == ["cannot judge"] * 2, done.stdout
    assert tool["message"] == (
        "cannot judge: --tool-call-parser deepseekv3: the tree has no vllm/tool_parsers/__init__.py "
        "(a tree of only the patched files?)"
    )
    assert reasoning["message"] == (
        "cannot judge: --reasoning-parser qwen3: patchkit cannot read the reasoning parsers "
        "vllm/reasoning/__init__.py registers"
    )
    assert (
        tool["fix"]
        == reasoning["fix"]
        == (
            f"lay out the whole release (`patchkit fetch --patches {library} 0.16.0 --all --dest {tree}`), "
            "or check the venv you launch (--python PATH in place of --target)"
        )
    )


def test_the_old_layout_registers_by_decorator(tmp_path):
    package = tmp_path / "vllm" / "entrypoints" / "openai" / "tool_parsers"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(OLD_INIT)
    (package / "abstract_tool_parser.py").write_text("class ToolParser:\n    pass\n")
    (package / "hermes_tool_parser.py").write_text(OLD_PARSER)
    assert toolparsers.registered(tree_reader(tmp_path)) == (
        "vllm/entrypoints/openai/tool_parsers/__init__.py",
        {"hermes", "hermes2"},
    )
    (package / "hermes_tool_parser.py").unlink()  # a module it imports is missing: nothing judged
    assert toolparsers.registered(tree_reader(tmp_path)) is None


# The real releases' registries: the table (0.12.0 under openai/, from 0.13.0 under vllm/), and 0.11.0's
# decorators on each module its __init__ imports.
OLD = "vllm/entrypoints/openai/tool_parsers"


@pytest.mark.release
@pytest.mark.parametrize(
    ("version", "paths"),
    [
        ("0.16.0", ["vllm/tool_parsers/__init__.py"]),
        ("0.34.0", ["vllm/tool_parsers/__init__.py"]),
        ("0.12.0", [f"{OLD}/__init__.py"]),
        ("0.11.0", None),
    ],
)
def test_the_releases_registries_name_the_parsers_the_sets_serve(tmp_path, version, paths):
    if paths is None:  # the modules 0.11.0's __init__ imports, each registering its own names
        init = lay_out_release(version, [f"{OLD}/__init__.py"], tmp_path / "init") / OLD / "__init__.py"
        modules = [line.split()[1][1:] for line in init.read_text().splitlines() if line.startswith("from .")]
        paths = [f"{OLD}/__init__.py", *(f"{OLD}/{m}.py" for m in modules)]
    tree = lay_out_release(version, paths, tmp_path / "tree")
    found = toolparsers.registered(tree_reader(tree))
    assert found is not None and found[0] == paths[0]
    assert {"deepseek_v3", "deepseek_v31", "kimi_k2", "hermes"} <= found[1], found
    assert toolparsers._closest("deepseekv3", found[1]) == "deepseek_v3"
    assert toolparsers._closest("kimi-k2", found[1]) == "kimi_k2"


@pytest.mark.release
@pytest.mark.parametrize("version", ["0.11.0", "0.16.0", "0.34.0"])
def test_the_releases_reasoning_registries_name_their_parsers(tmp_path, version):
    init = "vllm/reasoning/__init__.py"
    first = lay_out_release(version, [init], tmp_path / "init") / init
    modules = [line.split()[1][1:] for line in first.read_text().splitlines() if line.startswith("from .")]
    paths = [init, *(f"vllm/reasoning/{m}.py" for m in modules)]
    found = toolparsers.registered(
        tree_reader(lay_out_release(version, paths, tmp_path / "tree")), toolparsers.REASONING
    )
    assert found is not None and found[0] == init, found
    assert {"deepseek_r1", "qwen3"} <= found[1], found


def test_run_refuses_a_misspelt_parser_before_the_launch(launch, tmp_path):
    """`run` holds the launch to the same finding: vLLM would refuse it only after run exec'd it."""
    tree, library, model = launch
    no_vllm = {"PATH": str(tmp_path / "empty")}  # had run exec'd, it would say `cannot run vllm` (exit 4)
    options = ("--enable-auto-tool-choice", "--tool-call-parser", "kimi-k2")
    done = run_cli(
        "run", "--target", tree, "--patches", library, "--", "vllm", "serve", str(model), *options, env=no_vllm
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "did you mean kimi_k2?" in done.stdout + done.stderr and "cannot run vllm" not in done.stderr


STRUCTURED = "--structured-outputs-config"
INNER = f"{STRUCTURED}'s reasoning_parser"


@pytest.mark.parametrize("no_import", [True, False])
@pytest.mark.parametrize(
    "spelling",
    [
        (STRUCTURED, '{"reasoning_parser": "qwen_3", "backend": "xgrammar"}'),
        (f"{STRUCTURED}.reasoning_parser", "qwen_3"),
        (f"{STRUCTURED}.reasoning_parser=qwen_3",),
        ("--config", "CONFIG"),
    ],
)
def test_a_reasoning_parser_inside_structured_outputs_config_is_held_to_the_registry_at_start(
    launch, tmp_path, spelling, no_import
):
    """Review 11 M2a: vLLM's start check reads --structured-outputs-config's reasoning_parser (JSON,
    dotted, or a --config YAML), and refuses a name it does not register, before the model loads."""
    tree, library, model = launch
    config = tmp_path / "serve.yaml"
    config.write_text("structured-outputs-config:\n  reasoning_parser: qwen_3\n")
    options = [str(config) if word == "CONFIG" else word for word in spelling]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", library, *(["--no-import"] if no_import else []),
        "--format", "json", "--", "vllm", "serve", str(model), *options,
    )  # fmt: skip
    (found,) = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "command"]
    assert done.returncode == 1 and not found["ok"], done.stdout
    assert found["message"] == (
        "--structured-outputs-config's reasoning_parser qwen_3: vLLM 0.16.0 registers no reasoning parser "
        "of that name (vllm/reasoning/__init__.py): it refuses the launch at start"
    )
    assert found["fix"] == "did you mean qwen3? set that reasoning_parser to qwen3"


@pytest.mark.parametrize(
    ("options", "judged"),
    [
        # vLLM checks the inner name at start, whatever --reasoning-parser says (that one wins later)
        (("--reasoning-parser", "qwen3", STRUCTURED, '{"reasoning_parser": "r1"}'), [f"{INNER} r1"]),
        # the inner one registered: --reasoning-parser is still looked up, as the engine is built
        (("--reasoning-parser", "r1", STRUCTURED, '{"reasoning_parser": "qwen3"}'), ["--reasoning-parser r1"]),
        # both wrong: both said, one finding for one name
        (
            ("--reasoning-parser", "r1", STRUCTURED, '{"reasoning_parser": "r2"}'),
            [f"{INNER} r2", "--reasoning-parser r1"],
        ),
        (("--reasoning-parser", "r1", STRUCTURED, '{"reasoning_parser": "r1"}'), [f"{INNER} r1"]),
        # only --reasoning-parser-plugin is imported before the start check; the inner plugin is not
        ((STRUCTURED, '{"reasoning_parser": "mine", "reasoning_parser_plugin": "mine.py"}'), [f"{INNER} mine"]),
        ((STRUCTURED, '{"reasoning_parser": ""}'), []),  # vLLM's `(name := ...) and ...`: empty is none
        ((STRUCTURED, '{"backend": "xgrammar"}'), []),
        (("--reasoning-parser", "", STRUCTURED, '{"reasoning_parser": ""}'), []),
    ],
)
def test_both_reasoning_parser_spellings_are_judged_as_vllm_reads_each(launch, options, judged):
    tree, library, model = launch
    done, found = preflight(tree, library, model, *options)
    assert [f["ok"] for f in found] == [False] * len(judged), done.stdout
    assert [f["message"].split(": vLLM")[0] for f in found] == judged


def test_an_unregistered_reasoning_parser_is_refused_after_the_model_loads(launch):
    """Review 11 L3: vLLM 0.16.0 copies --reasoning-parser into its structured-outputs config only in
    create_engine_config, and looks it up in the engine core after the model loaded, not at start."""
    tree, library, model = launch
    _, (found,) = preflight(tree, library, model, "--reasoning-parser", "deepseekr1")
    assert found["message"].endswith(
        "(vllm/reasoning/__init__.py): it refuses the launch after the model loads "
        "(vLLM checks --reasoning-parser only as it builds the engine)"
    ), found
    assert "at start" not in found["message"]


@pytest.mark.parametrize(("version", "held"), [("0.33.0", []), ("0.33.0+cu130", []), ("0.32.0", ["None"])])
def test_none_is_no_reasoning_parser_from_0_33_on(version, held):
    """0.33.0's parse_reasoning_parser reads `none` in any case as unset; 0.32.0 looks it up."""
    named = toolparsers.given({"reasoning-parser": "None"}, version)
    assert [n.name for n in named] == held


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda f: os.mkfifo(f), "the tree's vllm/reasoning/__init__.py is a fifo, not a registry patchkit reads"),
        (
            lambda f: f.symlink_to("/dev/zero"),
            "the tree's vllm/reasoning/__init__.py is a link to /dev/zero (a character device), outside the tree",
        ),
        (
            lambda f: f.write_bytes(b"") or os.truncate(f, (64 << 20) + 1),
            "the tree's vllm/reasoning/__init__.py is a file of 67,108,865 bytes, over the 64 MiB patchkit "
            "reads of a source file",
        ),
        (lambda f: f.mkdir(), "the tree's vllm/reasoning/__init__.py is a directory, not a registry patchkit reads"),
    ],
)
def test_a_registry_that_is_there_but_unreadable_is_said_as_what_it_is(launch, make, said):
    """Review 11 L2: not "the tree has no vllm/reasoning/__init__.py" for a file that is there."""
    tree, library, model = launch
    registry = tree / "vllm" / "reasoning" / "__init__.py"
    registry.unlink()
    make(registry)
    done, (found,) = preflight(tree, library, model, "--reasoning-parser", "qwen3")
    assert found["result"] == "cannot judge", done.stdout
    assert said in found["message"] and "has no" not in found["message"]


@pytest.mark.parametrize(
    "options",
    [
        ("--enable-auto-tool-choice", "--tool-call-parser", "nosuch", "--tool-parser-plugin", "abc"),
        ("--reasoning-parser", "nosuch", "--reasoning-parser-plugin", "x"),
    ],
)
def test_a_plugin_name_vllm_does_not_import_leaves_the_parser_name_held(launch, options):
    """Review 12b L5: vLLM imports a parser plugin only when its name has more than 3 characters;
    any plugin option exempted the name, so a launch vLLM refuses passed."""
    tree, library, model = launch
    done, (found,) = preflight(tree, library, model, *options)
    assert done.returncode == 1 and not found["ok"] and "registers no" in found["message"], done.stdout


@pytest.mark.parametrize(
    ("config", "said"),
    [
        ('{"reasoning_parser": 7}', "reasoning_parser is 7,"),
        ('{"reasoning_parser": null}', "reasoning_parser is null,"),
        ('{"reasoning_parser": ["qwen3"]}', "reasoning_parser is a list,"),
        ('{"reasoning_parser": "qwen3", "reasoning_parser_plugin": false}', "reasoning_parser_plugin is false,"),
    ],
)
def test_a_structured_outputs_parser_that_is_no_string_is_refused(launch, config, said):
    """Review 12b L5: vLLM 0.16.0's StructuredOutputsConfig refuses a reasoning_parser that is not a
    string (pydantic, at start); preflight said "nothing judged" and passed."""
    tree, library, model = launch
    done, found = preflight(tree, library, model, "--structured-outputs-config", config)
    assert done.returncode == 1, done.stdout
    assert [said in f["message"] and not f["ok"] for f in found] == [True], found
    assert found[0]["fix"].startswith("write it as a JSON string")


@pytest.mark.parametrize(
    "plugin",
    [
        "/nonexistent/plug.py",  # review 13 H1: vLLM logs the failed import and carries on
        "plugdir.py",  # a directory
        "mine.txt",  # not a source file: spec_from_file_location gives no loader
    ],
)
def test_a_plugin_vllm_cannot_import_leaves_the_parser_name_held(launch, plugin):
    """Review 13 H1: any plugin option of more than 3 characters exempted the name, and preflight said
    ok for a launch vLLM 0.16.0 refuses at start (KeyError: invalid tool call parser)."""
    tree, library, model = launch
    (tree.parent / "plugdir.py").mkdir()
    (tree.parent / "mine.txt").write_text(PLUGIN)
    for options in (
        ("--enable-auto-tool-choice", "--tool-call-parser", "mine", "--tool-parser-plugin", plugin),
        ("--structured-outputs-config", '{"reasoning_parser": "mine"}', "--reasoning-parser-plugin", plugin),
    ):
        done, (found,) = preflight(tree, library, model, *options)
        assert done.returncode == 1 and not found["ok"] and "registers no" in found["message"], done.stdout


@pytest.mark.parametrize("make", ["fifo", "large"])
def test_a_plugin_patchkit_cannot_read_cannot_be_judged_not_held_against_the_name(launch, make):
    """review42a R17: a source plugin patchkit does not read (a fifo, never opened blocking; over the read
    limit) may register the name: cannot judge, not "registers no tool-call parser" failed."""
    tree, library, model = launch
    plugin = tree.parent / "unread.py"
    if make == "fifo":
        os.mkfifo(plugin)
    else:
        with plugin.open("wb") as sparse:
            sparse.truncate(TREE_FILE_LIMIT + 1)
    options = ("--enable-auto-tool-choice", "--tool-call-parser", "mine", "--tool-parser-plugin", "unread.py")
    done, (found,) = preflight(tree, library, model, *options)
    assert found["result"] == "cannot judge" and found["ok"], done.stdout
    assert "which it imports first, may: patchkit does not read it: not a regular file" in found["message"] or (
        make == "large" and "larger than" in found["message"]
    ), found


def test_a_plugin_that_names_no_such_parser_cannot_be_judged_never_a_pass(launch):
    """The plugin vLLM imports may register the name in a way patchkit does not read (it runs nothing):
    said as cannot judge, with what to make sure of, not a silent pass."""
    tree, library, model = launch
    (tree.parent / "other.py").write_text("import vllm\nvllm.register_parsers_somehow()\n")
    options = ("--enable-auto-tool-choice", "--tool-call-parser", "nosuch", "--tool-parser-plugin", "other.py")
    done, (found,) = preflight(tree, library, model, *options)
    assert found["result"] == "cannot judge", done.stdout  # (exit 1 here: the eagle3 set is not applied)
    assert found["message"] == (
        "cannot judge: --tool-call-parser nosuch: vLLM 0.16.0 registers no tool-call parser of that name "
        "(vllm/tool_parsers/__init__.py), and no register_module decorator in other.py, which it imports first, "
        "names it"
    )
    assert (
        found["fix"]
        == "make sure other.py imports in vLLM's venv and registers nosuch: else vLLM refuses the launch at start"
    )


@pytest.mark.parametrize(
    ("options", "plugin"),
    [
        (("--enable-auto-tool-choice", "--tool-call-parser", "mine", "--tool-parser-plugin"), "mine.py"),
        (("--structured-outputs-config", '{"reasoning_parser": "mine"}', "--reasoning-parser-plugin"), "mine.py"),
        # review 14 H2: vLLM loads bytecode too (spec_from_file_location): not held, not read
        (("--enable-auto-tool-choice", "--tool-call-parser", "mine", "--tool-parser-plugin"), "mine.pyc"),
    ],
)
def test_a_name_only_a_plugin_registers_cannot_be_judged_neither_pass_nor_fail(launch, options, plugin):
    """Review 14 H1': a plugin whose decorator names the parser but whose import fails in vLLM (it
    imports a module that release lacks) registers nothing, and vLLM refuses the launch: patchkit runs
    no plugin, so the name is 'cannot judge', not a pass; nor a failure (review 14 H2: a .pyc plugin)."""
    tree, library, model = launch
    if plugin.endswith(".pyc"):
        import py_compile

        py_compile.compile(str(tree.parent / "mine.py"), cfile=str(tree.parent / plugin))
    done, (found,) = preflight(tree, library, model, *options, plugin)
    assert found["result"] == "cannot judge" and found["ok"], done.stdout
    assert f"make sure {plugin} imports in vLLM's venv and registers mine" in found["fix"], found
    if plugin.endswith(".pyc"):  # review 15 L2: not "no register_module decorator names it"
        assert found["message"].endswith(
            "which it imports first, may: patchkit does not read bytecode or extension modules"
        ), found


UNPARSED = "from vllm.tool_parsers import ToolParserManager\ntype Alias = int\ndef (:\n"  # no Python's syntax


def test_a_plugin_patchkits_python_cannot_parse_cannot_be_judged_unless_the_launch_runs_that_python(launch, tmp_path):
    """Review 15 M2: a plugin in syntax patchkit's Python lacks (PEP 695 under 3.11) was held against
    the name, FAILED, while vLLM's newer Python imports it; held only where the launch's Python is
    known to be patchkit's version (here: the tree is its lib/pythonX.Y/site-packages)."""
    tree, library, model = launch
    plugin = tmp_path / "newer.py"
    plugin.write_text(UNPARSED)
    options = ("--enable-auto-tool-choice", "--tool-call-parser", "mine", "--tool-parser-plugin", str(plugin))
    done, (found,) = preflight(tree, library, model, *options)
    assert found["result"] == "cannot judge" and found["ok"], done.stdout
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert f"patchkit's Python {version} cannot parse it" in found["message"], found

    site = tmp_path / "venv" / "lib" / f"python{version}" / "site-packages"
    site.parent.mkdir(parents=True)
    tree.rename(site)
    done, (found,) = preflight(site, library, model, *options)
    assert done.returncode == 1 and not found["ok"] and "registers no tool-call parser" in found["message"], found


def test_an_extension_plugin_over_the_read_limit_is_not_held_against_the_name(launch, tmp_path):
    """Review 15 M2 and L2: an extension plugin over the read limit was read whole, failed the read,
    and the name was held (FAILED), though vLLM loads it; a compiled plugin's words claimed no
    decorator names the parser, though patchkit reads no bytecode."""
    tree, library, model = launch
    plugin = tmp_path / "big.cpython-311-x86_64-linux-gnu.so"
    with plugin.open("wb") as sparse:
        sparse.truncate(TREE_FILE_LIMIT + 1)
    options = ("--enable-auto-tool-choice", "--tool-call-parser", "mine", "--tool-parser-plugin", str(plugin))
    done, (found,) = preflight(tree, library, model, *options)
    assert found["result"] == "cannot judge" and found["ok"], done.stdout
    assert "patchkit does not read bytecode" in found["message"], found
    assert "register_module" not in found["message"], found
