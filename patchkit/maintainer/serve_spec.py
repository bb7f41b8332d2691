"""Maintainers: record the launch parser specs (patchkit/launch/specs/serve-VERSION.json) from vLLM's
real parsers. Each release's Python files are fetched (patchkit's fetcher) and imported in a vLLM
interpreter (torch and vLLM's dependencies come from there; the release's own files shadow its vLLM),
where patchkit/_target/serve_spec.py reads the parser objects vLLM builds.

    python -m patchkit.maintainer.serve_spec --python .cache/vllm-venv-0.16.0/bin/python 0.15.0 0.16.0 ...
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import tempfile
from pathlib import Path

from patchkit import fetch
from patchkit.base import notes
from patchkit.base.errors import TargetError
from patchkit.base.fsutil import json_text

# What this module has to say reaches stderr through patchkit.cli.ui (which owns every output).
_log = logging.getLogger(__name__)

SCRIPT = Path(__file__).resolve().parent.parent / "_target" / "serve_spec.py"
SPECS = Path(__file__).resolve().parent.parent / "launch" / "specs"
TIMEOUT = 600


def record(version: str, python: str) -> Path:
    tree = fetch.release_tree(version, all_python=True)
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "spec.json"
        env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1", "VLLM_LOGGING_LEVEL": "ERROR"}
        subprocess.run([python, str(SCRIPT), str(out)], input=b"{}", env=env, cwd=scratch, check=True, timeout=TIMEOUT)
        data = json.loads(out.read_text(encoding="utf-8"))
    if str(data["vllm"]).split("+")[0] != version:
        raise TargetError(f"{version}: the parser read is vLLM {data['vllm']}'s, not this release's")
    data["vllm"] = version
    path = SPECS / f"serve-{version}.json"
    path.write_text(json_text(data, path.name, indent=1) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", required=True, help="an interpreter with vLLM (and torch) installed")
    parser.add_argument("versions", nargs="+")
    args = parser.parse_args(argv)
    logging.basicConfig(format="%(message)s")  # each recorded spec's path, a line on stderr
    notes.listen(_log.warning)  # and the fetcher's notes with them
    for version in args.versions:
        _log.warning("%s", record(fetch.normalize_version(version), os.path.abspath(args.python)))


if __name__ == "__main__":
    main()
