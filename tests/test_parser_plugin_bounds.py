"""A --tool-parser-plugin's own modules looked for on the launch's sys.path, bounded: each place listed
once, a fixed budget of filesystem questions, then "cannot judge" naming what was not followed (never
"not used" for a module patchkit did not look for). Also its messages of a deep expression."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import run_cli_read_only
from launch_fixtures import eagle3_and_tools  # noqa: F401  (the fixture `setup`)

from patchkit.launch import observed, parser_plugin
from patchkit.launch.command import parse

PATCHED = ["vllm/tool_parsers/demo_tool_parser.py"]
UNBOUNDED = 200_000  # far more questions than the rule may ask: main's loop asks 200 million here


@pytest.fixture(name="asked")
def counted_questions(monkeypatch) -> list[int]:
    """The count of the filesystem questions asked through observed (raises past UNBOUNDED)."""
    count = [0]

    def counting(ask):
        def counted(*args):
            count[0] += 1
            assert count[0] <= UNBOUNDED, "the plugin's modules looked for without a bound"
            return ask(*args)

        return counted

    for kind, ask in list(observed._ASKED.items()):
        monkeypatch.setitem(observed._ASKED, kind, counting(ask))
    return count


def plugin_use(tmp_path: Path, source: str, pythonpath: list[Path]) -> tuple[bool | None, str] | None:
    plugin = tmp_path / "plugin.py"
    plugin.write_text(source)
    env = ["env", f"PYTHONPATH={os.pathsep.join(map(str, pythonpath))}"] if pythonpath else []
    launch = [*env, "/nowhere/vllm", "serve", "m", "--enable-auto-tool-choice", "--tool-call-parser", "mine"]
    command = parse([*launch, "--tool-parser-plugin", str(plugin)], "0.16.0")
    return parser_plugin.plugin_use(command, PATCHED, ["demo"], lambda path: None)


def many_imports(count: int) -> str:
    return "".join(f"import mod{i}\n" for i in range(count))


@pytest.mark.parametrize(("entries", "planted"), [(10_000, 9_998), (30_000, 29_998)])
def test_a_plugin_of_many_imports_and_a_long_pythonpath_is_looked_at_within_a_budget(tmp_path, asked, entries, planted):
    """review44a T9: 10,000 imports x 10,000 PYTHONPATH entries were 200 million stats. Now each place
    is listed once, within parser_plugin.QUESTIONS: a module of the user's in the (planted+1)th entry
    is found, or the rule says which modules it did not look for: never "not used"."""
    places = [tmp_path / f"d{i}" for i in range(entries)]
    places[planted].mkdir()
    (places[planted] / "mod4321.py").write_text("from vllm.tool_parsers.demo_tool_parser import parse\n")
    use = plugin_use(tmp_path, many_imports(10_000), places)
    assert use is not None and use[0] is None, use
    assert asked[0] <= parser_plugin.QUESTIONS + 10, asked[0]
    found = f"imports mod4321, a module of the user's patchkit does not follow ({places[planted]}/mod4321.py)"
    not_followed = "imports modules (mod0, mod1, mod10 +9,997 more) patchkit did not look for past "
    assert found in use[1] or not_followed in use[1], use[1]
    if entries > parser_plugin.QUESTIONS:  # past the budget: said so, naming how far it looked
        assert not_followed in use[1] and f" of the {entries:,} places the launch's Python" in use[1], use[1]


def test_a_plugin_of_many_imports_and_no_module_of_the_users_is_not_used(tmp_path, asked):
    """Within the budget, nothing found: the imports fail or come from the site: not used (one listing a place)."""
    places = [tmp_path / f"d{i}" for i in range(100)]
    places[50].mkdir()
    (places[50] / "unrelated.py").write_text("")
    assert plugin_use(tmp_path, many_imports(10_000), places) == (False, "")
    assert asked[0] <= 110, asked[0]


@pytest.mark.parametrize(
    ("made", "unjudged"),
    [
        ({"mine/__init__.py": ""}, True),  # a package
        ({"mine/helper.py": ""}, True),  # a namespace package's portion
        ({"mine.cpython-399-x86_64-linux-gnu.so": ""}, True),  # an extension of another Python's ABI
        ({"mine.pyc": ""}, True),
        ({"mine": ""}, False),  # a file without a suffix: nothing Python imports
        ({"minefield.py": "", "other/mine.py": ""}, False),
    ],
)
def test_what_a_listed_place_holds_of_the_plugins_modules(tmp_path, made, unjudged):
    place = tmp_path / "own"
    for name, text in made.items():
        (place / name).parent.mkdir(parents=True, exist_ok=True)
        (place / name).write_text(text)
    use = plugin_use(tmp_path, "import json\nimport mine.parsers\n", [place])
    assert use is not None and (use[0] is None) == unjudged and (use[0] is False) != unjudged, use
    if unjudged:
        assert "imports mine, a module of the user's patchkit does not follow" in use[1], use


def test_a_place_too_large_to_list_has_each_module_asked_for_by_name(tmp_path, monkeypatch, asked):
    monkeypatch.setattr(parser_plugin, "LISTED", 5)
    place = tmp_path / "big"
    place.mkdir()
    for i in range(10):
        (place / f"other{i}.py").write_text("")
    assert plugin_use(tmp_path, "import mine\n", [place]) == (False, "")
    (place / "mine.py").write_text("")
    use = plugin_use(tmp_path, "import mine\n", [place])
    assert use is not None and use[0] is None and f"({place}/mine.py)" in use[1], use


def test_an_archive_on_pythonpath_leaves_the_plugins_modules_unjudged(tmp_path):
    """Python's zipimport reads a file on sys.path; patchkit does not: cannot judge, not "not used"."""
    (tmp_path / "lib.zip").write_bytes(b"PK\x05\x06" + b"\x00" * 18)
    use = plugin_use(tmp_path, "import mine\n", [tmp_path / "lib.zip"])
    assert use is not None and use[0] is None and "an archive patchkit does not read" in use[1], use
    assert plugin_use(tmp_path, "import json\n", [tmp_path / "lib.zip"]) == (False, "")  # the stdlib's first


DEEP = "+".join(["a"] * 900)  # parsed, but deeper than ast.unparse's recursion


@pytest.mark.parametrize(
    ("plugin", "said"),
    [
        (
            f"from vllm.tool_parsers import ToolParserManager\nBase = ToolParserManager.get_tool_parser({DEEP})\n",
            "looks a tool parser up by a name it computes (the expression on its line 2, nested too deep to show)",
        ),
        (f"import vllm.tool_parsers as parsers\nBase = ({DEEP}).DemoToolParser\n", "the tools series is not applied"),
    ],
)
def test_a_plugin_of_a_deep_expression_is_judged_without_a_crash(setup, tmp_path, plugin, said):
    """The plugin's expression shown in the message: one Python parses but cannot unparse (recursion)
    is shown cut, never a crash (exit 70)."""
    tree, lib, target, _ = setup
    (tmp_path / "deep.py").write_text(plugin)
    launch = ["vllm", "serve", str(target), "--enable-auto-tool-choice", "--tool-call-parser", "mine"]
    done = run_cli_read_only(
        "preflight", "--target", tree, "--patches", lib, "--no-import", "--format", "json", "--",
        *launch, "--tool-parser-plugin", str(tmp_path / "deep.py"),
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr
    tree_state = [f for f in json.loads(done.stdout)["findings"] if f["check"] == "tree-state"]
    assert len(tree_state) == 1 and said in tree_state[0]["message"], tree_state
