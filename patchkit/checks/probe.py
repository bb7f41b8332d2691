"""probe: import the patched modules in the interpreter that runs vLLM, then run the set's probe.

Only where that is meaningful: the target is an interpreter (not a bare directory) and the files
are on disk (after `apply` wrote them, or `verify` on an applied tree). The import runs in a
subprocess of that interpreter (patchkit/_target/import_probe.py) with a timeout
(PATCHKIT_PROBE_TIMEOUT, default 120 s), with -B so it leaves no bytecode behind in the target. A
vLLM that does not import there at all (no torch, missing CUDA libraries...) is a warning: the
patches were not import-tested. A patched module whose import ends the process (os._exit, a signal)
is an error naming it: the probe saves the module it imports before each import.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from patchkit.base.enums import CheckLevel
from patchkit.base.errors import ended_how, killed_fix
from patchkit.base.locks import seconds_from_env
from patchkit.base.values import FrozenValue, frozen
from patchkit.checks import ERROR, WARNING, CheckContext, CheckResult
from patchkit.tree.target import WorkerFailed, run_worker
from patchkit.tree.version import release_version

TIMEOUT_ENV = "PATCHKIT_PROBE_TIMEOUT"
DEFAULT_TIMEOUT = 120.0


class ProbeCheck:
    name = "probe"

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        # Read even before the files are written, so that a bad value stops apply before it writes.
        can_run = ctx.import_probe and ctx.python is not None and ctx.root is not None
        timeout = probe_timeout() if can_run else DEFAULT_TIMEOUT
        reason = self.skip_reason(ctx)
        if reason:
            return [self.skipped(reason)]
        assert ctx.python is not None  # skip_reason: without an interpreter, no probe
        modules = patched_modules(ctx)
        script = ctx.patch_set.probe if ctx.patch_set is not None else None
        if not modules and script is None:
            return []
        request = probe_request(ctx, modules, script)
        started = time.perf_counter()
        report, problem = run_import_probe(ctx.python, request, timeout)
        elapsed = time.perf_counter() - started
        if problem:
            path = modules.get(problem.module or "") if problem.patch_fault else None
            message = f"{problem.message} ({elapsed:.1f} s with {ctx.python})"
            return [CheckResult(self.name, path, False, message, ERROR if problem.patch_fault else WARNING)]
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

    def results(
        self, report: dict[str, Any], modules: dict[str, str], python: str, elapsed: float
    ) -> list[CheckResult]:
        vllm = report["vllm"]
        if not vllm["ok"]:
            error = str(vllm["error"])
            elsewhere = error.startswith(IMPORTED_ELSEWHERE)  # vllm.__path__ holds other directories
            what = (
                error.removeprefix(IMPORTED_ELSEWHERE) if elsewhere else f"vLLM does not import with {python}: {error}"
            )
            return [
                CheckResult(
                    self.name,
                    None,
                    False,
                    f"{what}; the patched modules were not import-tested ({elapsed:.1f} s)",
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
IMPORTED_ELSEWHERE = "ImportedElsewhere: "  # the worker's error for a module, or vllm.__path__, not the tree's


def probe_request(ctx: CheckContext, modules: dict[str, str], script: Path | None) -> dict[str, Any]:
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


def _level(outcome: dict[str, Any]) -> CheckLevel:
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
    return seconds_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT)


@frozen
class ProbeProblem(FrozenValue):
    """Why the probe gave no full report. `module`: the patched module it was importing when its
    process ended (None: another step); `patch_fault`: that module (or the set's probe script)
    ended the process itself, an error rather than a warning."""

    message: str
    module: str | None = None
    patch_fault: bool = False


def run_import_probe(
    python: str, request: dict[str, Any], timeout: float
) -> tuple[dict[str, Any], ProbeProblem | None]:
    """Run patchkit/_target/import_probe.py in `python`: (its report, None), or (partial report, why
    it gave no full one). Its own session, from /, killed with its children at the timeout."""
    try:
        report = run_worker(python, "import_probe", request, timeout=timeout, in_process=False, isolated=False)
    except WorkerFailed as failed:
        report = failed.partial
        if report.get("done"):  # finished; a straggling child held its stderr open
            return report, None
        step = report.get("step", "starting")
        if failed.timed_out:
            why = f"did not finish within {timeout:g} s (while {step}); set {TIMEOUT_ENV} to wait longer"
            return report, ProbeProblem(why)
        if failed.status is None:
            return report, ProbeProblem(failed.message)
        if failed.status == -signal.SIGKILL:  # no module's doing: memory ran out, or another process
            return report, ProbeProblem(
                f"the probe {ended_how(failed.status)} (while {step}): {killed_fix(failed.status)}"
            )
        return report, ended(report, request, f"{ended_how(failed.status)} (while {step}): {failed.stderr}")
    if not report.get("done"):  # something exited the process early, with status 0
        return report, ended(report, request, f"exited early, with status 0 (while {report.get('step', 'starting')})")
    return report, None


def ended(report: dict[str, Any], request: dict[str, Any], how: str) -> ProbeProblem:
    """The probe's process ended by itself: a patched module's import (or the set's probe script) that
    does so is the patches' fault; during `import vllm` it is the environment's, as any failure there."""
    module = report.get("module")
    if module in request["modules"]:
        return ProbeProblem(f"the patched module {module} ended the probe process: it {how}", module, True)
    if module is None and report.get("step", "").startswith("running "):
        return ProbeProblem(f"the set's probe script ended the probe process: it {how}", None, True)
    return ProbeProblem(f"the probe {how}")
