"""Another distribution's vllm.general_plugins entry point named as the guard's (patchkit_guard),
which vLLM's plugin loader finds after the guard's, displaces it: vLLM keeps its plugins in a dict by
name (vllm/plugins/__init__.py: `plugins[plugin.name] = func`), so it calls that one and never the
guard. status, verify and preflight fail it, naming that distribution and the fix; one found before
the guard's (PYTHONPATH, or earlier in the site's listing) is replaced by the guard, and passes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_server import run_python_code
from helpers import MODEL, PLUGINS_LOADED, examples, run_cli, run_cli_writing
from hypothesis import given, settings
from hypothesis import strategies as st

from patchkit.distinfo.entry_points import _values_of, parse_entry_points
from patchkit.engine.guard import ENTRY_POINT_GROUP as GROUP
from patchkit.engine.guard import launch_verdict

# vLLM 0.16.0's load_plugins_by_group and load_general_plugins, on the site as the launch's Python
# adds it (site.addsitedir: its .pth files processed), after the directories named next (as
# PYTHONPATH's); what it called is printed
LOAD_AS_VLLM = f"""
import site, sys
sys.path[:0] = sys.argv[2:]
site.addsitedir(sys.argv[1])
{PLUGINS_LOADED}
for name, func in plugins.items():
    print(name, func.__module__)
    func()
"""


def other_plugin(where: Path, name: str = "zzz_plugin", value: str = "zzz_mod:noop") -> Path:
    """A distribution in `where` declaring a general plugin called patchkit_guard."""
    info = where / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\npatchkit_guard = {value}\n")
    (where / "zzz_mod.py").write_text("def noop():\n    print('zzz ran')\n")
    return info


@pytest.fixture
def applied(tree, open_library, tmp_path) -> Path:
    done = run_cli_writing("apply", "--no-import", "--target", tree, "--patches", open_library)
    assert done.returncode == 0, done.stderr
    (tree / MODEL).write_text((tree / MODEL).read_text() + "# drift\n")  # the guard refuses it, where it runs
    return tree


def loaded(site: Path, *first: Path) -> tuple[int, str]:
    done = run_python_code(LOAD_AS_VLLM, [str(site), *map(str, first)], dict(os.environ), 60)
    return done.returncode, done.stdout + done.stderr


def said(verb: str, tree: Path, library: Path, *launch: str):
    no_import = () if verb == "status" else ("--no-import",)
    done = run_cli(verb, *no_import, "--target", tree, "--patches", library, *launch)
    return done.returncode, " ".join((done.stdout + done.stderr).split())


def test_a_plugin_of_the_guards_name_later_on_the_path_is_said_with_its_fix(applied, open_library, tmp_path):
    extra = tmp_path / "extra"
    info = other_plugin(extra)
    (applied / "zzz_extra.pth").write_text(f"{extra}\n")
    patched = (applied / MODEL).read_text().removesuffix("# drift\n")
    code, out = loaded(applied)
    assert code == 0 and "zzz ran" in out  # vLLM would run zzz's, and never the guard (which refuses this tree)
    (applied / MODEL).write_text(patched)  # as apply left it: only the displaced guard is wrong
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}))
    for verb, launch in (("status", ()), ("verify", ()), ("preflight", ("--", "vllm", "serve", str(model)))):
        code, text = said(verb, applied, open_library, *launch)
        assert code == 1, (verb, text)
        assert "vLLM never runs the launch guard" in text and f"{info}/entry_points.txt" in text, (verb, text)
        assert f"uninstall the distribution of {info}" in text, (verb, text)
    (applied / "zzz_extra.pth").unlink()
    (applied / MODEL).write_text(patched + "# drift\n")
    code, out = loaded(applied)
    assert code != 0  # the guard runs again, and refuses the drifted tree
    assert not any("entry_points.txt" in p for p in launch_verdict(applied).problems)


def test_a_plugin_of_the_guards_name_first_on_the_path_is_replaced_by_the_guard(applied, tmp_path):
    first = tmp_path / "first"
    other_plugin(first)
    problems = launch_verdict(applied).problems
    assert not any("entry_points.txt" in p for p in problems)
    code, out = loaded(applied, first)
    assert code != 0 and "zzz ran" not in out  # the guard ran, and refused


@pytest.mark.parametrize("name", ["aaa_plugin", "zzz_plugin"])
def test_one_beside_the_guard_is_judged_in_the_order_the_loader_finds_it(applied, name):
    info = other_plugin(applied, name)
    code, out = loaded(applied)
    displaced = [p for p in launch_verdict(applied).problems if "entry_points.txt" in p]
    assert ("zzz ran" in out) == bool(displaced), (out, displaced)
    if displaced:
        assert code == 0 and str(info) in displaced[0]
    else:
        assert code != 0


def test_one_that_names_the_guards_own_check_displaces_nothing(applied, tmp_path):
    extra = tmp_path / "extra"
    other_plugin(extra, value="patchkit_guard:check")
    (applied / "zzz_extra.pth").write_text(f"{extra}\n")
    assert not any("entry_points.txt" in p for p in launch_verdict(applied).problems)
    assert loaded(applied)[0] != 0  # the guard's check, whichever entry point named it


LINE = (
    st.sampled_from(
        [
            "[vllm.general_plugins]",
            "[console_scripts]",
            "[ vllm.general_plugins ]",
            "[[vllm.general_plugins]]",
            "#x",
            "",
        ]
    )
    | st.builds(
        "{}{}={}{}".format,
        st.sampled_from(["", " "]),
        st.sampled_from(["patchkit_guard", "other", "patchkit_guard ", "x=patchkit_guard"]),
        st.sampled_from(["zzz:noop", " patchkit_guard:check ", "a = b", ""]),
        st.sampled_from(["", "  "]),
    )
    | st.sampled_from(["patchkit_guard", "no equals sign"])
)


# importlib's Sectioned cuts lines with str.splitlines, as _values_of does: \x0c, \x85, \u2028 too
ENDINGS = ["\n", "\r\n", "\r", "\x0c", "\x85", "\u2028", "\x1c", "\x0b"]


@settings(max_examples=examples(300), deadline=None)
@given(lines=st.lists(LINE, max_size=8), ending=st.sampled_from(ENDINGS))
def test_the_entry_points_are_read_as_importlib_reads_them(lines, ending):
    text = ending.join(lines)
    try:
        wanted = [p.value for p in parse_entry_points(text).select(group=GROUP, name="patchkit_guard")]
    except (ValueError, TypeError):  # importlib raises: so does the reading
        with pytest.raises(ValueError):
            _values_of(text, GROUP, "patchkit_guard")
        return
    assert _values_of(text, GROUP, "patchkit_guard") == wanted
