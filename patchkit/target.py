"""Where vLLM lives: a directory that contains the `vllm/` package, and the Python that runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from patchkit.errors import TargetError

PACKAGE = "vllm"

# Runs inside the target interpreter. find_spec on a top-level name and importlib.metadata
# read the import system's finders and dist-info files: vllm itself is never imported.
_PROBE = r"""
import importlib.metadata, importlib.util, json, sys
out = {"python": sys.executable, "python_version": list(sys.version_info[:3])}
try:
    spec = importlib.util.find_spec("vllm")
except Exception as exc:
    spec = None
    out["error"] = repr(exc)
if spec is not None and spec.submodule_search_locations:
    out["package_dir"] = list(spec.submodule_search_locations)[0]
try:
    dist = importlib.metadata.distribution("vllm")
    out["version"] = dist.version
    out["dist_root"] = str(dist.locate_file(""))
except importlib.metadata.PackageNotFoundError:
    pass
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Target:
    root: Path  # the directory that contains vllm/
    found_by: str  # how the user pointed at it, for status output
    python: str | None = None  # the interpreter that will run this vLLM, when known
    installed_version: str | None = None  # what that interpreter's metadata says

    @property
    def package_dir(self) -> Path:
        return self.root / PACKAGE


def from_directory(directory: str | os.PathLike) -> Target:
    root = Path(directory).resolve()
    if not root.exists():
        raise TargetError(f"target directory {directory} does not exist")
    if not root.is_dir():
        raise TargetError(f"target {directory} is not a directory")
    if root.name == PACKAGE and (root / "__init__.py").is_file() and not (root / PACKAGE).is_dir():
        root = root.parent  # the user pointed at the package itself
    if not (root / PACKAGE).is_dir():
        raise TargetError(
            f"no {PACKAGE}/ package in {root}",
            hint="--target takes the directory that contains vllm/ (site-packages, "
            "an unpacked wheel or a source checkout)",
        )
    return Target(root=root, found_by=f"--target {directory}")


def from_interpreter(python: str | None) -> Target:
    """Ask an interpreter where vllm is, without importing it. None: the one running patchkit."""
    info = _probe(python)
    package_dir = info.get("package_dir")
    if not package_dir:
        where = python or sys.executable
        raise TargetError(
            f"vLLM is not installed for {where}",
            hint="point patchkit at it with --python /path/to/venv/bin/python or --target /path/to/site-packages",
        )
    found_by = f"--python {python}" if python else f"the current interpreter ({sys.executable})"
    return Target(
        root=Path(package_dir).resolve().parent,
        found_by=found_by,
        python=info["python"],
        installed_version=info.get("version"),
    )


def _probe(python: str | None) -> dict:
    if python is None:
        namespace: dict = {}
        import contextlib
        import io

        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(_PROBE, namespace)
        return json.loads(buffer.getvalue())
    try:
        done = subprocess.run(
            [python, "-c", _PROBE], capture_output=True, text=True, timeout=60, cwd=os.path.abspath(os.sep)
        )  # a vllm/ in our cwd must not shadow
    except FileNotFoundError as exc:
        raise TargetError(f"interpreter {python} not found") from exc
    except PermissionError as exc:
        raise TargetError(f"interpreter {python} is not executable") from exc
    except subprocess.TimeoutExpired as exc:
        raise TargetError(f"interpreter {python} did not answer within 60 s") from exc
    if done.returncode != 0:
        raise TargetError(f"interpreter {python} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def resolve(target_dir: str | None, python: str | None) -> Target:
    if target_dir and python:
        # The interpreter still judges syntax; the directory says where the files are.
        interpreter = _probe(python)["python"]
        return Target(root=from_directory(target_dir).root, found_by=f"--target {target_dir}", python=interpreter)
    if target_dir:
        return from_directory(target_dir)
    return from_interpreter(python)
