"""Opt-in (`make test-vllm`): the --tool-server entries patchkit refuses are exactly those whose URL
vLLM's MCP client cannot connect with: httpx (the venv's) refuses the URL vLLM builds, or its port
is one no connection uses (0, over 65535)."""

from __future__ import annotations

import json
import os
import textwrap

import pytest
from packaging.version import Version
from vllm_overlay import ask_vllm

from patchkit.launch.command import parse
from patchkit.launch.late_files import tool_server_findings

pytestmark = pytest.mark.skipif(
    not os.environ.get("VLLM_PYTHON"), reason="needs a venv with vLLM: run `make test-vllm`"
)

ENTRIES = [
    "localhost:8000", "x:abc", "::1:8000", "127.0.0.1:99999", "h:0", "h:", "[::1]:8000", "u:p@h:1",
    "h:8000/mcp", "h:+80", "[::1]x", "h:65535", "h:65536", "[::1]", "host", "h:-1", "h:1:2", "[::1]:0",
]  # fmt: skip

ASK = textwrap.dedent("""\
    import json, sys
    import httpx

    def usable(entry):
        try:
            url = httpx.URL(f"http://{entry}/sse")
        except Exception:
            return False
        return url.port is None or 1 <= url.port <= 65535

    print(json.dumps([usable(e) for e in json.loads(sys.argv[1])]))
""")


def test_refused_entries_are_those_httpx_cannot_connect_with():
    usable = ask_vllm(ASK, json.dumps(ENTRIES))
    assert isinstance(usable, list)
    disagreements = []
    for entry, fine in zip(ENTRIES, usable, strict=True):
        command = parse(["vllm", "serve", "m", "--tool-server", entry], "0.16.0")
        found, _notes = tool_server_findings(command, "command", Version("0.16.0"))
        disagreements += [(entry, fine)] if bool(found) == fine else []
    assert disagreements == []
