"""behaviour: the set's behaviour test (set.toml `behaviour`), run by `verify` on the files it judges.

The test is a script the set ships: `python SCRIPT FILE... --json [--installed] [--vllm-version V]`
judges what the files do (the tool-call sets: streamed calls equal the non-streamed ones at every
split), prints one JSON document (ok, runs, failed, failures: each with its split and what was lost;
error) and exits 0 (pass), 1 (fail) or 2 (cannot judge). patchkit passes every Python file the
set's series change (the script skips those it does not judge).

With --python on an environment where vLLM imports, the files on disk are judged in that interpreter
as the modules they are (--installed: vLLM's real classes); where vLLM's classes do not load there,
or on a directory target, in the interpreter running patchkit with the script's stand-ins: the files
on disk, or (nothing written yet) a scratch copy of the planned contents. One result per set: a short
line (the first failing split and what was lost), the first failures below it for a person.

A verdict with vLLM's classes (an import of vLLM: seconds) is remembered (base/remembered.py,
sealed) under a key over the interpreter, the set's scripts, the judged files and the installed
vLLM's RECORD, and believed while the other files the script says it read (`read`) are unchanged.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from packaging.version import Version

from patchkit.base import fsutil, hints, remembered
from patchkit.base.errors import ended_how, killed_fix
from patchkit.base.fsutil import atomic_write, load_json_text
from patchkit.base.hashing import sha256
from patchkit.base.locks import seconds_from_env
from patchkit.checks import ERROR, WARNING, CheckContext, CheckResult
from patchkit.tree.target import WorkerFailed, flooded, run_script, vllm_metadata_dirs
from patchkit.tree.version import release_version

NAME = "behaviour"
VERSION_KEYS = "behaviour-version-keys"  # the remembered answers of `SCRIPT --version-keys`
TIMEOUT_ENV = "PATCHKIT_BEHAVIOUR_TIMEOUT"
DEFAULT_TIMEOUT = 300.0
SHORT = 80 - len(f"{NAME}: ")  # the finding's line fits 80 columns
SHOWN_FAILURES = 3
RECORD_LIMIT = 8 << 20  # vLLM's RECORD is about 0.5 MB
FILE_LIMIT = 64 << 20
ERROR_LINE = 160  # of a crashed script's last error line, what its finding shows


@dataclass(frozen=True)
class Judged:
    """What one run of the script said (validated: it is untrusted output)."""

    status: int
    ok: bool
    runs: int
    failed: int
    failures: list[dict[str, str]]
    error: str | None
    loaded: str
    read: list[str] = field(default_factory=list)  # the other files the verdict depends on


class BehaviourCheck:
    name = NAME

    def run(self, ctx: CheckContext) -> list[CheckResult]:
        script = ctx.patch_set.behaviour if ctx.patch_set is not None else None
        files = [path for path in ctx.paths if path.endswith(".py") and ctx.read(path) is not None]
        if script is None or not files:
            return []
        if ctx.on_disk and ctx.root is not None:
            before = _contents(ctx.root, files)
            judged = judge(ctx, script, ctx.root, files)
            return [_wrote_into(script, ctx.root, before) or judged]
        with tempfile.TemporaryDirectory(prefix="patchkit-behaviour-") as scratch:
            for path in files:  # the planned contents, where the script can read them
                content = ctx.read(path)
                assert content is not None
                atomic_write(Path(scratch) / path, content)
            return [judge(ctx, script, Path(scratch), files)]


CHECK = BehaviourCheck()


def judge(ctx: CheckContext, script: Path, root: Path, files: list[str]) -> CheckResult:
    """The one result of the set's test on `files` under `root`: vLLM's classes where asked and they
    load, else the stand-ins."""
    paths = [str(root / path) for path in files]
    version = ["--vllm-version", str(release_version(ctx.version))] if ctx.version else []
    not_loaded = ""
    if ctx.on_disk and ctx.python is not None and ctx.import_probe:
        key = _installed_key(ctx.python, script, root, files, version)
        recalled = _recalled(key)
        if recalled is not None:
            return result(recalled, "vLLM's classes; remembered", root)
        installed = _run(ctx.python, script, [*paths, "--installed", *version], isolated=False)
        if isinstance(installed, Judged) and installed.status != 2:
            _remember(key, installed)
            return result(installed, "vLLM's classes", root)
        not_loaded = _within(str(installed.error) if isinstance(installed, Judged) else installed, root)
    judged = _run(sys.executable, script, [*paths, *version], isolated=True)
    return result(judged, "stand-ins for vLLM's classes", root, not_loaded=not_loaded)


def _contents(root: Path, files: list[str]) -> dict[str, str | None]:
    """The judged files' digests (None: unreadable), to see whether the test wrote into them."""
    found: dict[str, str | None] = {}
    for path in files:
        try:
            found[path] = _digest(root / path)
        except OSError:
            found[path] = None
    return found


def _wrote_into(script: Path, root: Path, before: dict[str, str | None]) -> CheckResult | None:
    """A test that changed the tree's own files it judged: the tree is no longer as patched (the
    guard refuses it next), so verify fails, naming the file; None when every file is as it was."""
    changed = [path for path, digest in _contents(root, list(before)).items() if digest != before[path]]
    if not changed:
        return None
    why = (
        f"{script.name} changed {changed[0]} while judging it (a behaviour test may write only outside the"
        f" tree, docs/checks.md): {hints.command('status')} says how to restore it"
    )
    return CheckResult(
        NAME, changed[0], False, fit(f"{script.name} wrote into the file it judged"), ERROR, fit(why, 76 * 5)
    )


def version_keys(script: Path, versions: list[Version]) -> dict[Version, str]:
    """The key under which the set's test judges each release (`SCRIPT --version-keys V...`: what
    it reads of --vllm-version, e.g. the chat server's end-of-stream top-up): releases with the same
    key and the same files get the same verdict. A script that does not say (a set's own test that
    knows no such option, a failure) keys each release by itself: no verdict is shared."""
    own = {version: f"own {version}" for version in versions}
    if len(set(versions)) < 2:
        return own
    keys = _said_version_keys(script, sorted({str(release_version(v)) for v in versions}))
    if keys is None:
        return own
    said = {version: keys.get(str(release_version(version))) for version in versions}
    return {version: f"said {key}" if isinstance(key, str) else own[version] for version, key in said.items()}


def _said_version_keys(script: Path, asked: list[str]) -> dict[str, object] | None:
    """The script's {version: key} (its JSON: the caller takes the keys that are text), remembered (sealed) under the set's scripts and the versions: a
    pure function of them, so a warm `verify --all` starts no interpreter for it."""
    try:
        inputs = [
            remembered.code_of(__name__),
            asked,
            *[(p.relative_to(script.parent).as_posix(), _digest(p)) for p in _set_files(script.parent)],
        ]
    except OSError:
        return None
    key = remembered.key_of(inputs)
    recalled = remembered.recall(VERSION_KEYS, key)
    if isinstance(recalled, dict):
        return recalled
    try:
        status, out, _ = run_script(
            sys.executable, script, ["--version-keys", *asked], timeout=_timeout(), isolated=True
        )
        lines = out.strip().splitlines()
        document = load_json_text(lines[-1] if status == 0 and lines else "")
    except (WorkerFailed, ValueError):
        return None
    keys = document.get("version_keys") if isinstance(document, dict) else None
    if not isinstance(keys, dict):
        return None
    remembered.remember(VERSION_KEYS, key, keys)
    return keys


def _installed_key(python: str, script: Path, root: Path, files: list[str], version: list[str]) -> str | None:
    """The key of a verdict with vLLM's classes (an import of vLLM: seconds): the interpreter, the
    set's scripts, the judged files and the installed vLLM's RECORD (its other files as shipped).
    None: no RECORD to vouch for them (a source checkout): judged every time."""
    records = [d / "RECORD" for d in vllm_metadata_dirs(root) if (d / "RECORD").exists()]
    if len(records) != 1:
        return None
    try:
        inputs = [
            python,
            os.path.realpath(python),
            version,
            remembered.code_of(__name__),
            sha256(fsutil.read_regular(records[0], RECORD_LIMIT)),
            *[(p.relative_to(script.parent).as_posix(), _digest(p)) for p in _set_files(script.parent)],
            *[(path, _digest(root / path)) for path in files],
        ]
    except OSError:
        return None
    return remembered.key_of(inputs)


def _set_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*.py") if "__pycache__" not in p.parts)


def _digest(path: Path) -> str | None:
    return sha256(fsutil.read_regular(path, FILE_LIMIT))


def _recalled(key: str | None) -> Judged | None:
    """The remembered verdict, while every other file it read (the tree's serving code) is as it was."""
    if key is None:
        return None
    entry = remembered.recall(NAME, key)
    if not isinstance(entry, dict):
        return None
    try:
        read = entry["read"]
        if not all(_digest(Path(path)) == digest for path, digest in read.items()):
            return None
        return Judged(**entry["judged"])
    except (KeyError, TypeError, AttributeError, OSError):
        return None


def _remember(key: str | None, judged: Judged) -> None:
    if key is None:
        return
    try:
        read = {path: _digest(Path(path)) for path in judged.read}
    except OSError:
        return
    remembered.remember(NAME, key, {"judged": asdict(judged), "read": read})


def _run(python: str, script: Path, args: list[str], *, isolated: bool) -> Judged | str:
    """The script's verdict, or why there is none."""
    try:
        status, out, errors = run_script(python, script, [*args, "--json"], timeout=_timeout(), isolated=isolated)
    except WorkerFailed as failed:
        return failed.message
    lines = out.strip().splitlines()
    try:
        document = load_json_text(lines[-1] if lines else "")
    except ValueError:
        flood = " (its output passed what patchkit keeps, and its last line was cut)" if flooded(out) else ""
        if status < 0:
            return f"{script.name} {ended_how(status)}: {killed_fix(status)}"
        return f"{script.name} exited {status} with no JSON verdict on its last line{flood}{_last_error(errors)}"
    try:
        return _validated(status, document)
    except ValueError as exc:
        return f"{script.name} exited {status}: {exc}"


def _last_error(errors: str) -> str:
    """The last line of a script's error output (a crash's exception), bounded: why it gave no verdict."""
    lines = [line for line in errors.splitlines() if line.strip()]
    return f"; it said: {fit(lines[-1], ERROR_LINE)}" if lines else ""


def _timeout() -> float:
    return seconds_from_env(TIMEOUT_ENV, DEFAULT_TIMEOUT)


def _validated(status: int, document: object) -> Judged:
    if not isinstance(document, dict) or status not in (0, 1, 2):
        raise ValueError("its verdict is no JSON object, or the exit status is not 0, 1 or 2")
    runs, failed = document.get("runs"), document.get("failed")
    failures = document.get("failures") or []
    error = document.get("error")
    if not isinstance(runs, int) or not isinstance(failed, int) or not isinstance(failures, list):
        raise ValueError("runs, failed and failures are malformed")
    failures = [_failure(i, f) for i, f in enumerate(failures, 1)]
    if error is not None and not isinstance(error, str):
        raise ValueError("error is malformed")
    if (status == 0) != (document.get("ok") is True) or (status == 2) != (error is not None):
        raise ValueError("its verdict says otherwise")
    if status != 2 and runs < 1:
        raise ValueError("it judged nothing (no run)")
    if status != 2 and not (0 <= failed <= runs and (failed == 0) == (status == 0)):
        raise ValueError(f"its verdict contradicts itself ({failed}/{runs} failed, exit {status})")
    read = document.get("read") or []
    if not isinstance(read, list) or not all(isinstance(path, str) and os.path.isabs(path) for path in read):
        raise ValueError("read is malformed")
    return Judged(status, status == 0, runs, failed, failures, error, str(document.get("loaded", "")), read)


def _failure(number: int, failure: object) -> dict[str, str]:
    """One failure of a verdict as text: a JSON object of strings, numbers, true/false or null
    (`"top_up": false` is natural JSON); anything else is malformed, its field named."""
    if not isinstance(failure, dict):
        raise ValueError(f"failure {number} is a {type(failure).__name__}, not an object")
    said = {}
    for key, value in failure.items():
        if isinstance(value, (dict, list)):
            raise ValueError(f"failure {number}'s {fit(str(key), 40)!r} is a {type(value).__name__}, not a value")
        said[str(key)] = value if isinstance(value, str) else json.dumps(value)
    return said


def result(judged: Judged | str, how: str, root: Path, *, not_loaded: str = "") -> CheckResult:
    """The finding: one short line; below it for a person, the first failures and (`not_loaded`:
    --python asked for vLLM's classes, the stand-ins judged) why vLLM's classes were not used."""
    fell_back = [fit(f"vLLM's classes did not load: {not_loaded}", 76 * 3)] if not_loaded else []
    if isinstance(judged, str) or judged.status == 2:
        why = _within(judged if isinstance(judged, str) else str(judged.error), root)
        return CheckResult(
            NAME, None, False, fit(f"not judged: {why}"), WARNING, "\n".join([fit(why, 76 * 3), *fell_back])
        )
    if judged.ok:
        said = "stand-ins; vLLM's classes did not load" if not_loaded else how
        return CheckResult(
            NAME, None, True, fit(f"0 of {judged.runs} runs differ ({said})"), excerpt="\n".join(fell_back)
        )
    failures = sorted(judged.failures, key=_tokens_per_delta)
    where = f"; {_split(failures[0])}: {_lost(failures[0])}" if failures else ""
    excerpt = "\n".join([*(fit(_described(f), 76) for f in failures[:SHOWN_FAILURES]), *fell_back])
    return CheckResult(NAME, None, False, fit(f"{judged.failed}/{judged.runs} runs differ{where}"), ERROR, excerpt)


def _within(error: str, root: Path) -> str:
    """The script's error with the files named as in the tree ("cannot load /tmp/x/vllm/a/b.py: E"
    -> "b.py does not load: E"): the reason, not a scratch path, fits the line."""
    error = error.replace(f"{root}/", "")
    return re.sub(r"^cannot load (\S+?): ", lambda found: f"{Path(found[1]).name} does not load: ", error)


def _tokens_per_delta(failure: dict[str, str]) -> int:
    """The split's tokens per delta, for the smallest split that fails first (others: after)."""
    count = failure.get("split", "").split(" ", 1)[0]
    return int(count) if count.isdigit() else sys.maxsize


def _split(failure: dict[str, str]) -> str:
    return failure.get("split", "?").replace("token(s)", "tokens" if _tokens_per_delta(failure) > 1 else "token")


def _lost(failure: dict[str, str]) -> str:
    """What was lost, without the calls' names (the line is short; the names are below it)."""
    return re.sub(r" \([^()]*\)", "", failure.get("lost", "?").split("; ")[0])


def _described(failure: dict[str, str]) -> str:
    return f"{failure.get('parser', '?')} [{failure.get('case', '?')}] {_split(failure)}: {_lost(failure)}"


def fit(text: str, width: int = SHORT) -> str:
    """One line of at most `width` characters."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "\u2026"
