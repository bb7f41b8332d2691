"""Opt-in (`make test-vllm`): a --tool-parser-plugin that imports a parser class from the parsers'
package: the real vLLM's ToolParserManager.import_tool_parser loads it or logs its ImportError, and
patchkit's static read of the tree says the same (its name refused, or left to the plugin)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from vllm_overlay import TINY_LLAMA, ask_vllm, preflight_findings

VLLM_PYTHON = os.environ.get("VLLM_PYTHON")

pytestmark = pytest.mark.skipif(not VLLM_PYTHON, reason="needs a venv with vLLM: run `make test-vllm`")

IMPORTS = {
    "package": "from vllm.tool_parsers import KimiK2ToolParser",  # 0.12.0 on: the package defines no such name
    "module": "from vllm.tool_parsers.kimi_k2_tool_parser import KimiK2ToolParser",
}
REGISTERED = textwrap.dedent("""\
    import json, sys
    from vllm.tool_parsers import ToolParserManager
    found = {}
    for name, path in json.loads(sys.argv[1]).items():
        ToolParserManager.import_tool_parser(path)  # as api_server's setup_server: a failure is logged
        found[name] = name in ToolParserManager.list_registered()
    print(json.dumps(found))
""")


def test_a_plugin_vllm_fails_to_import_is_refused_and_one_it_loads_is_left_to_it(tmp_path):
    plugins = {}
    for name, line in IMPORTS.items():
        path = tmp_path / f"plugin_{name}.py"
        path.write_text(
            f"from vllm.tool_parsers import ToolParserManager\n{line}\n\n\n"
            f"@ToolParserManager.register_module('mine_{name}')\nclass Mine(KimiK2ToolParser):\n    pass\n"
        )
        plugins[f"mine_{name}"] = str(path)
    registered = ask_vllm(REGISTERED, json.dumps(plugins))
    assert registered == {"mine_package": False, "mine_module": True}, registered
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text(json.dumps(TINY_LLAMA))
    for name, path in plugins.items():
        options = ["--enable-auto-tool-choice", "--tool-call-parser", name, "--tool-parser-plugin", path]
        found = preflight_findings("vllm", "serve", str(tmp_path / "m"), *options)
        (said,) = [f for f in found if f["check"] == "command" and f"--tool-call-parser {name}" in f["message"]]
        assert said["result"] == ("cannot judge" if registered[name] else "fail"), said
        if not registered[name]:
            assert "imports KimiK2ToolParser from vllm.tool_parsers, which defines no such name" in said["message"]
            assert f"`{IMPORTS['module']}`" in said["fix"], said
