"""A --tool-parser-plugin that imports a parser class from the parsers' package, which from 0.12.0 on
defines none of them (its lazy table names each class's own module): `from vllm.tool_parsers import
KimiK2ToolParser` raises ImportError, vLLM logs it, nothing after that line runs, and the plugin's own
parser name is refused at start. The tool-call set is not what the launch needs then."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import lay_out_release, run_cli_read_only
from launch_fixtures import eagle3_and_tools  # noqa: F401  (the fixture `setup`)

from patchkit.launch import parser_plugin, toolparsers
from patchkit.launch.command import parse
from patchkit.launch.engine import tree_reader

LAZY = (
    "from vllm.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager\n"
    '_TOOL_PARSERS_TO_REGISTER = {"demo": ("demo_tool_parser", "DemoToolParser")}\n'
)
EXPORTS = LAZY + "from vllm.tool_parsers.demo_tool_parser import DemoToolParser\n"  # as 0.11 binds its classes
DYNAMIC = LAZY + "def __getattr__(name):\n    return None\n"
REGISTERS_MINE = "@ToolParserManager.register_module('mine')\nclass Mine:\n    pass\n"
FAILS = "its line 2 imports DemoToolParser from vllm.tool_parsers, which defines no such name (ImportError"


def preflight(setup, tmp_path: Path, init: str, plugin: str) -> tuple[int, dict]:
    tree, lib, target, _ = setup
    (tree / "vllm" / "tool_parsers" / "__init__.py").write_text(init)
    (tmp_path / "plugin.py").write_text(plugin)
    launch = ["vllm", "serve", str(target), "--enable-auto-tool-choice", "--tool-call-parser", "mine"]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--",
        *launch, "--tool-parser-plugin", str(tmp_path / "plugin.py"),
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout)


def said(document: dict, check: str) -> list[dict]:
    return [f for f in document["findings"] if f["check"] == check]


def tools_not_used(document: dict) -> bool:
    return any(n.startswith("not used by this launch: ") and "tools" in n for n in document["notes"])


@pytest.mark.parametrize(
    ("first", "written"),
    [
        (
            "from vllm.tool_parsers import DemoToolParser\n",
            "from vllm.tool_parsers.demo_tool_parser import DemoToolParser",
        ),
        (
            "from vllm.tool_parsers import ToolParserManager, DemoToolParser as Base\n",
            "from vllm.tool_parsers.demo_tool_parser import DemoToolParser as Base",
        ),
    ],
)
def test_a_plugin_importing_a_class_the_package_does_not_define_is_refused_as_vllm_refuses_it(
    setup, tmp_path, first, written
):
    """plugin33's left item, settled on vLLM 0.16.0 (its tree and its real import): the plugin stops at
    that import, its parser is never registered and vLLM refuses --tool-call-parser mine at start. Was:
    "the tools set is needed" (and applying it changed nothing) and "cannot judge" the name."""
    code, document = preflight(setup, tmp_path, LAZY, "import json\n" + first + REGISTERS_MINE)
    (command,) = said(document, "command")
    assert code == 1 and not command["ok"] and command["result"] == "fail", command
    assert "--tool-call-parser mine: vLLM 0.16.0 registers no tool-call parser of that name" in command["message"]
    assert FAILS in command["message"] and command["message"].endswith("it refuses the launch at start"), command
    assert f"import DemoToolParser from its own module at line 2 (`{written}`)" in command["fix"], command
    assert tools_not_used(document) and not [f for f in said(document, "tree-state") if not f["ok"]], document


@pytest.mark.parametrize(
    ("init", "plugin"),
    [
        (EXPORTS, "from vllm.tool_parsers import DemoToolParser\n"),  # the package binds it (0.11)
        (DYNAMIC, "from vllm.tool_parsers import DemoToolParser\n"),  # a __getattr__ may give it
        (LAZY, "from vllm.tool_parsers.demo_tool_parser import DemoToolParser\n"),  # its own module
        (
            LAZY,
            "try:\n    from vllm.tool_parsers import DemoToolParser\nexcept ImportError:\n"
            "    from vllm.tool_parsers.demo_tool_parser import DemoToolParser\n",
        ),
    ],
)
def test_a_plugin_whose_import_succeeds_or_may_still_needs_the_set(setup, tmp_path, init, plugin):
    code, document = preflight(setup, tmp_path, init, plugin + REGISTERS_MINE)
    (command,) = said(document, "command")
    assert command["result"] == "cannot judge" and "registers it, if vLLM's import of it succeeds" in command["message"]
    failed = [f for f in said(document, "tree-state") if not f["ok"]]
    assert code == 1 and len(failed) == 1 and "tools" in failed[0]["message"], document
    assert not tools_not_used(document), document["notes"]


def test_a_plugin_taking_the_class_as_an_attribute_the_package_lacks_does_not_use_the_set(setup, tmp_path):
    """`parsers.DemoToolParser` where the package binds no such name raises AttributeError: the
    patched parser is not reached that way (0.11's package binds it: needed there, launch32's test)."""
    plugin = "import vllm.tool_parsers as parsers\n" + REGISTERS_MINE + "Base = parsers.DemoToolParser\n"
    code, document = preflight(setup, tmp_path, LAZY, plugin)
    assert code == 0 and tools_not_used(document), document
    code, document = preflight(setup, tmp_path, EXPORTS, plugin)
    assert code == 1 and not tools_not_used(document), document


def test_a_plugin_registering_before_the_failing_import_is_not_said_to_register_nothing(setup, tmp_path):
    """What ran before the failing line stays registered: its name is not refused (cannot judge)."""
    code, document = preflight(setup, tmp_path, LAZY, REGISTERS_MINE + "from vllm.tool_parsers import DemoToolParser\n")
    (command,) = said(document, "command")
    assert code == 0 and command["result"] == "cannot judge" and tools_not_used(document), document


KIMI = "vllm/tool_parsers/kimi_k2_tool_parser.py"


@pytest.mark.release
@pytest.mark.parametrize(
    ("version", "package", "module"),
    [
        ("0.11.0", "vllm.entrypoints.openai.tool_parsers", None),  # binds every parser class
        ("0.12.0", "vllm.entrypoints.openai.tool_parsers", "vllm.entrypoints.openai.tool_parsers.kimi_k2_tool_parser"),
        ("0.16.0", "vllm.tool_parsers", "vllm.tool_parsers.kimi_k2_tool_parser"),
        ("0.34.0", "vllm.tool_parsers", "vllm.tool_parsers.kimi_k2_tool_parser"),
    ],
)
def test_the_releases_parser_packages_define_their_classes_or_not(tmp_path, version, package, module):
    """Read from the real releases: 0.11 binds each parser class in the package's __init__; from 0.12.0
    on, only ToolParser and ToolParserManager (the lazy table names each class's module)."""
    init = package.replace(".", "/") + "/__init__.py"
    parser = init.replace("__init__.py", "kimi_k2_tool_parser.py")
    tree = lay_out_release(version, [init, parser], tmp_path / "tree")
    read = tree_reader(tree)
    unbound = toolparsers.unbound_classes(read, toolparsers.TOOL)
    assert unbound.get((package, "KimiK2ToolParser")) == module and (package, "ToolParserManager") not in unbound
    source = f"from {package} import ToolParserManager\nfrom {package} import KimiK2ToolParser\n"
    (tmp_path / "plugin.py").write_text(source + REGISTERS_MINE)
    launch = ["vllm", "serve", "m", "--enable-auto-tool-choice", "--tool-call-parser", "mine"]
    command = parse([*launch, "--tool-parser-plugin", str(tmp_path / "plugin.py")], version)
    (named,) = toolparsers.given(command.options, version, read=read)
    assert named.plugin is not None and (named.plugin.fails is None) == (module is None), named.plugin
    use = parser_plugin.plugin_use(command, [parser], ["kimi_k2"], read)
    assert use == ((True, f"--tool-parser-plugin {tmp_path}/plugin.py imports KimiK2ToolParser (vLLM's, from "
                   f"{package}.kimi_k2_tool_parser)") if module is None else (False, "")), use  # fmt: skip


def test_a_reasoning_plugin_importing_a_class_its_package_does_not_define_is_refused_too(setup, tmp_path):
    """The reasoning parsers' package, lazy the same way: --reasoning-parser mine is refused (as vLLM
    refuses it, when it builds the engine), the fix naming the class's own module."""
    tree, lib, target, _ = setup
    (tree / "vllm" / "reasoning").mkdir(parents=True)
    (tree / "vllm" / "reasoning" / "__init__.py").write_text(
        "from vllm.reasoning.abs_reasoning_parsers import ReasoningParser, ReasoningParserManager\n"
        '_REASONING_PARSERS_TO_REGISTER = {"demo_r": ("demo_reasoning_parser", "DemoReasoningParser")}\n'
    )
    registers = "@ReasoningParserManager.register_module('mine')\nclass Mine:\n    pass\n"
    for line, fails in (("from vllm.reasoning import DemoReasoningParser\n", True), ("import json\n", False)):
        (tmp_path / "plugin.py").write_text("from vllm.reasoning import ReasoningParserManager\n" + line + registers)
        options = ["--reasoning-parser", "mine", "--reasoning-parser-plugin", str(tmp_path / "plugin.py")]
        done = run_cli_read_only(
            "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--",
            "vllm", "serve", str(target), *options,
        )  # fmt: skip
        (command,) = said(json.loads(done.stdout), "command")
        assert command["result"] == ("fail" if fails else "cannot judge"), command
        if fails:
            assert (
                "its line 2 imports DemoReasoningParser from vllm.reasoning, which defines no such name"
                in (command["message"])
                and "`from vllm.reasoning.demo_reasoning_parser import DemoReasoningParser`" in command["fix"]
            ), command
