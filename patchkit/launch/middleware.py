"""--middleware, judged without vLLM (the static path: --no-import, `run`): vLLM 0.16.0's build_app,
once the model has loaded, splits each value at its last dot, imports the module and takes the
name from it, and a value without a dot or a module the launch cannot import ends the launch there.
The launch's own Python is asked, with its environment, directory and sys.path[0], whether it finds
each module, without importing it (nothing of the user's runs): a top-level module it does not find
fails; a submodule is looked for in its package's directories, and one not found there cannot be
judged (the package's own code may provide it). vLLM's validation imports each one as build_app does."""

from __future__ import annotations

import json

from patchkit.base.errors import TargetError
from patchkit.launch.command import LaunchCommand
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.tree.target import ask_python

AFTER_LOAD = "vLLM refuses the launch once the model has loaded"
# run with -S by ask_python: the site start-up the launch runs, then the launch's sys.path[0]; each
# module looked for as the import system would, its packages never imported
_FIND = """
import importlib.machinery, importlib.util, json, site, sys
if sys.path and sys.path[0] == "":  # -c's own entry (none in safe-path mode): the launch's in its place
    del sys.path[0]
site.main()
asked = json.loads(sys.stdin.read())
if asked["first"] is not None:
    sys.path.insert(0, asked["first"])
said = {}
for name in asked["modules"]:
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except Exception:
        said[name] = ["unknown", parts[0]]
        continue
    if spec is None:
        said[name] = ["absent", parts[0]]
        continue
    for i in range(1, len(parts)):
        where = spec.submodule_search_locations
        spec = None if where is None else importlib.machinery.PathFinder.find_spec(".".join(parts[:i + 1]), list(where))
        if spec is None:
            said[name] = ["unknown", ".".join(parts[:i + 1])]
            break
    else:
        said[name] = ["found", name]
sys.stdout.write(json.dumps(said))
"""


def middleware_findings(command: LaunchCommand, check: str) -> list[Finding]:
    """`check` findings for the --middleware values vLLM's build_app would refuse (failed), or that
    cannot be told without importing them (cannot judge); none for a module found."""
    given = command.options.get("middleware")
    values = [str(v) for v in given] if isinstance(given, list) else [] if given is None else [str(given)]
    found, modules = [], []
    for value in values:
        module = value.rpartition(".")[0]
        if "." not in value:
            message = (
                f"--middleware {value}: no dot: vLLM splits it into a module and a name at the last dot: {AFTER_LOAD}"
            )
            found.append(Finding(check, False, message, "give it as MODULE.NAME"))
        elif not module or "" in module.split("."):
            message = f"--middleware {value}: '{module}' names no module: {AFTER_LOAD}"
            found.append(Finding(check, False, message, "give it as MODULE.NAME"))
        else:
            modules.append((value, module))
    return found + (_looked_up(command, check, modules) if modules else [])


def _looked_up(command: LaunchCommand, check: str, modules: list[tuple[str, str]]) -> list[Finding]:
    asked = json.dumps({"first": command.first_path(), "modules": sorted({m for _, m in modules})})
    try:
        python, options = command.launch_python()
        said = json.loads(
            ask_python(python, options, _FIND, env=command.environ, cwd=command.working_directory(), stdin=asked)
        )
    except (TargetError, ValueError) as exc:  # WorkerFailed is a TargetError
        why = exc.message if isinstance(exc, TargetError) else "no answer"
        reason = f"--middleware: the launch's Python was not asked whether it imports {modules[0][1]} ({why})"
        return [
            cannot_judge(
                check, reason, "run preflight with --python PATH, without --no-import: vLLM's validation imports it"
            )
        ]
    found = []
    for value, module in modules:
        verdict, part = said.get(module, ["unknown", module])
        if verdict == "absent":
            message = f"--middleware {value}: no module {part} in the launch's Python: {AFTER_LOAD}"
            fix = f"install {part} where the launch imports it (its venv, or its PYTHONPATH)"
            found.append(Finding(check, False, message, fix))
        elif verdict != "found":
            reason = f"--middleware {value}: {part} is not found without importing its package, which may provide it"
            found.append(
                cannot_judge(
                    check, reason, "run preflight with --python PATH, without --no-import: vLLM's validation imports it"
                )
            )
    return found
