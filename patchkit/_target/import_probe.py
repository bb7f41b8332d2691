"""The import probe: import vllm and the patched modules, then run the set's probe script.

It rewrites its answer after every step, so that when it hangs patchkit can say on which step. A
failure is the patches' fault ("patch_fault") when the innermost vllm frame that raised is a patched
file (or the set's probe script raised) and the error is not a missing dependency (a non-vllm
module, a compiled extension or shared library that does not load): those are the environment's.
What patchkit makes of the answer: patchkit/checks/probe.py.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import os
import runpy
import sys
import time
import traceback
from typing import Any, Callable


def norm(path: str) -> str:
    return os.path.normcase(os.path.realpath(path))


class Probe:
    """request: {"root", "modules", "probe", "version", "files"}; the answer is saved to `answer_path`."""

    def __init__(self, request: dict[str, Any], answer_path: str) -> None:
        self.request = request
        self.answer_path = answer_path
        self.report: dict[str, Any] = {"done": False, "modules": {}}
        self.package_dir = norm(os.path.join(request["root"], "vllm"))
        self.patched = {norm(p) for p in request["files"]}

    def save(self, **changes: Any) -> None:
        self.report.update(changes)
        with open(self.answer_path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(self.report, f)
        os.replace(self.answer_path + ".tmp", self.answer_path)

    def run(self) -> None:
        outcome, _ = self.attempt("importing vllm", self.import_vllm)
        self.save(vllm=outcome)
        if outcome["ok"]:
            for name in self.request["modules"]:
                import_it = functools.partial(self.import_patched, name)
                outcome, _ = self.attempt("importing " + name, import_it, module=name)
                self.report["modules"][name] = outcome
            script = self.request["probe"]
            if script and all(m["ok"] for m in self.report["modules"].values()):
                outcome, results = self.attempt("running " + os.path.basename(script), self.run_script, own_code=True)
                if outcome["ok"]:
                    outcome["results"] = results
                self.save(probe=outcome)
        self.save(done=True, step="done")

    def attempt(
        self, step: str, action: Callable[[], Any], own_code: bool = False, module: str | None = None
    ) -> tuple[dict[str, Any], Any]:
        """`module`: the patched module this step imports, saved with the step so that patchkit can
        name it if the process ends (os._exit, a signal) before the step does."""
        self.report.pop("module", None)
        self.save(step=step, **({"module": module} if module else {}))
        started = time.perf_counter()
        try:
            value = action()
        except BaseException as exc:
            return self.failure(exc, started, own_code), None
        return {"ok": True, "seconds": time.perf_counter() - started}, value

    def failure(self, exc: BaseException, started: float, own_code: bool) -> dict[str, Any]:
        frames = [
            f for f in traceback.extract_tb(exc.__traceback__) if norm(f.filename).startswith(self.package_dir + os.sep)
        ]
        where = ""
        if frames:
            shown = os.path.relpath(norm(frames[-1].filename), os.path.dirname(self.package_dir))
            where = f" (at {shown}:{frames[-1].lineno})"
        raised_by_patch = (
            own_code
            or isinstance(exc, ImportedElsewhere)
            or (bool(frames) and norm(frames[-1].filename) in self.patched)
        )
        message = (f"{type(exc).__name__}: {exc}")[:400] + where
        return {
            "ok": False,
            "error": message,
            "patch_fault": raised_by_patch and not environmental(exc),
            "seconds": time.perf_counter() - started,
        }

    def import_vllm(self) -> None:
        spec = importlib.util.find_spec("vllm")
        if spec is None or norm(next(iter(spec.submodule_search_locations or [""]))) != self.package_dir:
            sys.path.insert(0, self.request["root"])  # --target DIR --python X: the tree, with X's dependencies
        module = importlib.import_module("vllm")
        location = os.path.dirname(module.__file__ or "")
        if norm(location) != self.package_dir:
            raise ImportError(f"this interpreter imports vllm from {location}, not from the target")
        self.refuse_other_directories(module)

    def refuse_other_directories(self, vllm: Any) -> None:
        """vllm.__path__ must hold the tree's directory alone: a module found in another one (put
        there by a .pth, a plugin, or vllm/__init__.py itself) is imported instead of the tree's."""
        extra = []
        for entry in list(getattr(vllm, "__path__", None) or []):
            if isinstance(entry, str) and norm(entry) != self.package_dir and entry not in extra:
                extra.append(entry)
            elif not isinstance(entry, str):
                extra.append(repr(entry))
        if extra:
            raise ImportedElsewhere(
                f"vllm.__path__ holds {', '.join(extra)} beside the tree's {self.package_dir}: "
                "a module there is imported in place of the tree's"
            )

    def import_patched(self, name: str) -> None:
        """Import a patched module and check it is the tree's file: a module imported from elsewhere
        (a `__path__` or `sys.modules` entry set up before it) passing would say the patch runs."""
        module = importlib.import_module(name)
        stem = os.path.join(self.request["root"], *name.split("."))
        expected = [norm(stem + ".py"), norm(os.path.join(stem, "__init__.py"))]
        found = getattr(module, "__file__", None)
        imported = norm(found) if found else "(no file)"
        if imported not in expected:
            tree_file = next((p for p in expected if p in self.patched), expected[0])
            raise ImportedElsewhere(f"{name} is imported from {imported}, not from {tree_file}")

    def run_script(self) -> list[list[str | bool]]:
        namespace = runpy.run_path(self.request["probe"], run_name="__patchkit_probe__")
        return [
            [str(subject), bool(ok), str(message)]
            for subject, ok, message in namespace["probe"](self.request["version"])
        ]


class ImportedElsewhere(Exception):
    """A patched module Python imports from another file than the tree's: the patch never runs."""


def environmental(exc: BaseException) -> bool:
    """Whether the failure is the environment's: a missing dependency, not the patched code."""
    if isinstance(exc, OSError):
        return True
    if isinstance(exc, ModuleNotFoundError):
        return (exc.name or "").split(".")[0] != "vllm"
    if isinstance(exc, ImportError):
        return not (exc.path or "").endswith(".py")
    return False


def _unshadow() -> None:
    """Run by path, this directory is sys.path[0]: drop it, so that its modules shadow nothing of vLLM's."""
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == here:
        del sys.path[0]


if __name__ == "__main__":
    _unshadow()
    Probe(json.load(sys.stdin), sys.argv[1]).run()
    sys.stdout.flush()
    os._exit(0)  # no interpreter teardown: vLLM's atexit hooks and threads are not ours to wait for
