"""probe: import the patched modules in the interpreter that runs vLLM, then run the set's probe.

Only where that is meaningful: the target is an interpreter (not a bare directory) and the files
are on disk (after `apply` wrote them, or `verify` on an applied tree). The import runs in a
subprocess of that interpreter with a timeout (PATCHKIT_PROBE_TIMEOUT, default 120 s), with -B so
it leaves no bytecode behind in the target. A vLLM that does not import there at all (no torch,
missing CUDA libraries...) is a warning: the patches were not import-tested.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from patchkit.checks import ERROR, WARNING, CheckContext, CheckResult
from patchkit.errors import BadInput
from patchkit.version import release_version

TIMEOUT_ENV = "PATCHKIT_PROBE_TIMEOUT"
DEFAULT_TIMEOUT = 120.0


class ProbeCheck:
    name = "probe"

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        reason = self.skip_reason(ctx)
        if reason:
            return [self.skipped(reason)]
        modules = patched_modules(ctx)
        script = ctx.patch_set.probe if ctx.patch_set is not None else None
        if not modules and script is None:
            return []
        request = probe_request(ctx, modules, script)
        started = time.perf_counter()
        report, problem = run_driver(ctx.python, request, probe_timeout())
        elapsed = time.perf_counter() - started
        if problem:
            return [CheckResult(self.name, None, False, f"{problem} ({elapsed:.1f} s with {ctx.python})", WARNING)]
        return self.results(report, modules, ctx.python, elapsed)

    @staticmethod
    def skip_reason(ctx: CheckContext) -> str | None:
        if not ctx.import_probe:
            return "not run (--no-import)"
        if ctx.python is None or ctx.root is None:
            return "not run: the target is a directory, not an environment (--python imports the patched modules)"
        if not ctx.on_disk:
            return "not run yet: nothing is written (it runs after apply, and by verify on an applied tree)"
        return None

    def skipped(self, reason: str) -> CheckResult:
        return CheckResult(self.name, None, True, reason, WARNING)

    def results(self, report: dict, modules: dict[str, str], python: str, elapsed: float) -> list[CheckResult]:
        vllm = report["vllm"]
        if not vllm["ok"]:
            return [
                CheckResult(
                    self.name,
                    None,
                    False,
                    f"vLLM does not import with {python}: {vllm['error']}; the patched modules "
                    f"were not import-tested ({elapsed:.1f} s)",
                    _level(vllm),
                )
            ]
        results = [
            CheckResult(
                self.name,
                None,
                True,
                f"import vllm with {python}: {vllm['seconds']:.1f} s (the whole probe: {elapsed:.1f} s)",
            )
        ]
        for module, path in modules.items():
            outcome = report["modules"][module]
            results.append(
                CheckResult(self.name, path, True, f"imports ({outcome['seconds']:.1f} s)")
                if outcome["ok"]
                else CheckResult(self.name, path, False, f"import failed: {outcome['error']}", _level(outcome))
            )
        probe = report.get("probe")
        if probe is None:
            return results
        if not probe["ok"]:
            return [*results, CheckResult(self.name, None, False, f"probe script: {probe['error']}", _level(probe))]
        return results + [
            CheckResult(self.name, None, bool(ok), f"{subject}: {message}") for subject, ok, message in probe["results"]
        ]


CHECK = ProbeCheck()


def probe_request(ctx: CheckContext, modules: dict[str, str], script: Path | None) -> dict:
    """What the worker is asked: the set's probe gets the release the target is judged as
    (version.release_version), so that it needs no version rule of its own."""
    assert ctx.root is not None
    return {
        "root": str(ctx.root),
        "modules": list(modules),
        "probe": str(script) if script else None,
        "version": str(release_version(ctx.version)) if ctx.version else None,
        "files": [str(ctx.root / path) for path in ctx.paths],
    }


def _level(outcome: dict) -> str:
    return ERROR if outcome.get("patch_fault") else WARNING


def patched_modules(ctx: CheckContext) -> dict[str, str]:
    """module name -> path, for each touched Python file that exists (deleted files are not imported)."""
    modules = {}
    for path in ctx.paths:
        name = module_name(path)
        if name and ctx.read(path) is not None:
            modules[name] = path
    return modules


def module_name(path: str) -> str | None:
    """vllm/model_executor/models/deepseek_v2.py -> vllm.model_executor.models.deepseek_v2."""
    if not path.endswith(".py"):
        return None
    parts = path[: -len(".py")].split("/")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts) if parts and all(p.isidentifier() for p in parts) else None


def probe_timeout() -> float:
    text = os.environ.get(TIMEOUT_ENV)
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = -1
    if not 0 < value < float("inf"):
        raise BadInput(f"{TIMEOUT_ENV}={text!r} is not a positive number of seconds")
    return value


def run_driver(python: str, request: dict, timeout: float) -> tuple[dict, str | None]:
    """Run _DRIVER in `python`: (its report, None), or (partial report, why it gave no full one)."""
    with tempfile.TemporaryDirectory(prefix="patchkit-probe-") as scratch:
        report_path = Path(scratch) / "report.json"
        try:
            # cwd /: a vllm/ in our cwd must not shadow; own session: a timeout kills its children too
            process = subprocess.Popen(
                [python, "-B", "-c", _DRIVER, json.dumps(request), str(report_path)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                cwd=os.path.abspath(os.sep),
                start_new_session=True,
            )
        except OSError as exc:
            return {}, f"cannot run {python}: {exc}"
        try:
            _, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            report = _read_report(report_path)
            if report.get("done"):  # finished; a straggling child held the pipe open
                return report, None
            return report, (
                f"did not finish within {timeout:g} s (while {report.get('step', 'starting')}); "
                f"set {TIMEOUT_ENV} to wait longer"
            )
        report = _read_report(report_path)
        if not report.get("done"):
            tail = stderr.decode("utf-8", "replace").strip()[-300:]
            return (
                report,
                f"the probe exited with status {process.returncode} (while "
                f"{report.get('step', 'starting')}): {tail or 'no error output'}",
            )
        return report, None


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        process.kill()
    process.communicate()


def _read_report(path: Path) -> dict:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# Runs inside the target's interpreter, which lacks patchkit. It saves its report after every step,
# so that a timeout can say which step hung. A failure is the patches' fault ("patch_fault") when
# the innermost vllm frame that raised is a patched file (or it is the set's probe that raised) and
# the error is not a missing dependency (a non-vllm module, a compiled extension or shared library
# that does not load): those are the environment's, and only warn.
_DRIVER = r"""
import importlib, importlib.util, json, os, runpy, sys, time, traceback

request = json.loads(sys.argv[1])
report_path = sys.argv[2]
report = {"done": False, "modules": {}}


def norm(path):
    return os.path.normcase(os.path.realpath(path))


package_dir = norm(os.path.join(request["root"], "vllm"))
patched = {norm(p) for p in request["files"]}


def save(**changes):
    report.update(changes)
    with open(report_path + ".tmp", "w") as f:
        json.dump(report, f)
    os.replace(report_path + ".tmp", report_path)


def environmental(exc):
    if isinstance(exc, OSError):
        return True
    if isinstance(exc, ModuleNotFoundError):
        return (exc.name or "").split(".")[0] != "vllm"
    if isinstance(exc, ImportError):
        return not (exc.path or "").endswith(".py")
    return False


def failure(exc, started, own_code):
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if norm(f.filename).startswith(package_dir + os.sep)]
    where = ""
    if frames:
        where = " (at %s:%s)" % (os.path.relpath(norm(frames[-1].filename), os.path.dirname(package_dir)),
                                 frames[-1].lineno)
    raised_by_patch = own_code or (bool(frames) and norm(frames[-1].filename) in patched)
    fault = raised_by_patch and not environmental(exc)
    message = ("%s: %s" % (type(exc).__name__, exc))[:400] + where
    return {"ok": False, "error": message, "patch_fault": fault, "seconds": time.perf_counter() - started}


def attempt(step, action, own_code=False):
    save(step=step)
    started = time.perf_counter()
    try:
        value = action()
    except BaseException as exc:
        return failure(exc, started, own_code), None
    return {"ok": True, "seconds": time.perf_counter() - started}, value


def import_vllm():
    spec = importlib.util.find_spec("vllm")
    if spec is None or norm(list(spec.submodule_search_locations or [""])[0]) != package_dir:
        sys.path.insert(0, request["root"])  # --target DIR --python X: the tree, with X's dependencies
    module = importlib.import_module("vllm")
    if norm(os.path.dirname(module.__file__)) != package_dir:
        raise ImportError("this interpreter imports vllm from %s, not from the target"
                          % os.path.dirname(module.__file__))


def run_probe():
    namespace = runpy.run_path(request["probe"], run_name="__patchkit_probe__")
    results = []
    for subject, ok, message in namespace["probe"](request["version"]):
        results.append([str(subject), bool(ok), str(message)])
    return results


outcome, _ = attempt("importing vllm", import_vllm)
save(vllm=outcome)
if outcome["ok"]:
    for name in request["modules"]:
        outcome, _ = attempt("importing " + name, lambda: importlib.import_module(name))
        report["modules"][name] = outcome
    if request["probe"] and all(m["ok"] for m in report["modules"].values()):
        outcome, results = attempt("running " + os.path.basename(request["probe"]), run_probe, own_code=True)
        if outcome["ok"]:
            outcome["results"] = results
        save(probe=outcome)
save(done=True, step="done")
sys.stdout.flush()
os._exit(0)  # no interpreter teardown: vLLM's atexit hooks and threads are not ours to wait for
"""
