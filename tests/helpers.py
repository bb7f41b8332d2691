"""What the tests share: small vLLM-shaped trees, patches and libraries they write themselves, and the CLI
runner. Fixtures live in conftest.py; tests import these from here."""

from __future__ import annotations

import base64
import copy
import fcntl
import hashlib
import importlib.util
import json
import os
import pty
import py_compile
import re
import shlex
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import termios
import textwrap
import types
import venv
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from cli_server import (
    SESSION_ENV,
    THIRD_PARTY,
    forked_as_the_session,
    run_patchkit,
    run_patchkit_on,
    run_python_code,
    start_up_environment,
)
from click.testing import CliRunner
from hypothesis import settings
from hypothesis import strategies as st
from packaging.version import Version

from patchkit import fetch
from patchkit.base import signals
from patchkit.base.errors import FetchError
from patchkit.cli import percommand
from patchkit.cli.main import cli, run_in_process
from patchkit.fetch import release_tree
from patchkit.fetch.cache import load_state, save_state
from patchkit.releases.files import lay_out

T = TypeVar("T")

SPEC_PY = textwrap.dedent('''\
    """A stand-in for a config module."""
    import os

    SUPPORTED = [
        "llama",
        "qwen",
    ]


    def accepts(model_type: str) -> bool:
        return any(name in model_type for name in SUPPORTED)
    ''')

MODEL_PY = textwrap.dedent("""\
    from .interfaces import SupportsLoRA, SupportsPP


    class Model(SupportsLoRA, SupportsPP):
        def forward(self, x):
            return x
    """)
# The files write_tree writes by default, and the model file as a patch most often changes it.
SPEC = "vllm/config/spec.py"
MODEL = "vllm/models/model.py"
EAGLE_MODEL = MODEL_PY.replace("SupportsPP):", "SupportsPP):  # eagle\n")

# The toy set `gated`, eagle3's shape: a whitelist (its gate, read when vLLM builds its config) and a
# model class that must support what the whitelist admits (its contract.toml: CONTRACT).
GATED_SPEC = "vllm/config/gate.py"
GATED_MODEL = "vllm/models/big.py"
GATED_STOCK_SPEC = textwrap.dedent("""\
    def verify(model_type):
        supported = ["llama", "qwen"]
        if not any(entry in model_type for entry in supported):
            raise ValueError(model_type)
    """)
GATED_STOCK_MODEL = textwrap.dedent("""\
    from .interfaces import SupportsLoRA


    class BigForCausalLM(SupportsLoRA):
        pass
    """)
GATED_WIDE_SPEC = GATED_STOCK_SPEC.replace('"qwen"]', '"qwen", "bigmodel"]')
GATED_EAGLE_MODEL = GATED_STOCK_MODEL.replace("import SupportsLoRA", "import SupportsEagle3, SupportsLoRA").replace(
    "(SupportsLoRA)", "(SupportsLoRA, SupportsEagle3)"
)
GATED_CONTRACT = textwrap.dedent(f"""\
    gates = ["{GATED_SPEC}"]

    [[contract]]
    file = "{GATED_SPEC}"
    kind = "model-types"
    function = "verify"
    variable = "supported"
    model_types = ["bigmodel"]

    [[contract]]
    file = "{GATED_MODEL}"
    kind = "base"
    class = "BigForCausalLM"
    base = "SupportsEagle3"
    """)


# The releases the eagle3 set patches (its set.toml's `supported` up to `upstream`): what the
# release-tier tests fetch and prove it on.
SUPPORTED_RELEASES = [
    "0.11.0",
    "0.11.1",
    "0.11.2",
    "0.12.0",
    "0.13.0",
    "0.14.0",
    "0.14.1",
    "0.15.0",
    "0.15.1",
    "0.16.0",
    "0.17.0",
    "0.17.1",
]


def write_tree(root: Path, version: str = "0.16.0", files: dict[str, str | bytes] | None = None) -> Path:
    """A site-packages-like directory: vllm/ plus vllm-VERSION.dist-info/METADATA."""
    files = files if files is not None else {SPEC: SPEC_PY, MODEL: MODEL_PY}
    (root / "vllm").mkdir(parents=True, exist_ok=True)
    (root / "vllm" / "__init__.py").write_text("")
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    dist = root / f"vllm-{version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return root


def mark_staged(tree: Path, txid: str, *paths: str) -> None:
    """The marker (.patchkit/staged.json) a commit writes once it has staged `paths` (their
    identities as they are now) and before it replaces a file: a hand-made journal of a crash
    after that point needs it, as a planted journal lacks it. Its seal covers the journal there (as a
    commit's covers its own) when that journal's id is `txid`."""
    from patchkit.store import journal as store_journal

    staged = {path: store_journal.file_identity(os.lstat(tree / path)) for path in paths}
    there = tree / ".patchkit" / "journal.json"
    journal = json.loads(there.read_text()) if there.exists() else {}
    store_journal.mark_staged(tree, {**journal, "id": txid}, staged, tick=lambda: None)


def record_created(tree: Path, paths: list[str], *, their_bytes: bool = False) -> None:
    """The applied tree's record (.patchkit/state.json), naming each of `paths` as a file its first
    entry created, with a digest no file has (`their_bytes`: a path's own where it is a file)."""
    state = tree / ".patchkit" / "state.json"
    data = json.loads(state.read_text())
    for path in paths:
        there = their_bytes and (tree / path).is_file()
        after = hashlib.sha256((tree / path).read_bytes()).hexdigest() if there else "ab" * 32
        data["entries"][0]["files"][path] = {"after": after, "before": None, "mode": 0o644}
    state.write_text(json.dumps(data))


def _git(cwd: Path, *args: str) -> bytes:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True).stdout


# make_patch's diffs in this process, by the files they were made from: git writes the same diff for the
# same files and edits, and a test makes the same few diffs over and over (four git runs each)
_DIFFS: dict[str, bytes] = {}


def make_patch(
    tmp: Path, tree: Path, edits: dict[str, str | bytes | None], header: str = "Description: test\n"
) -> bytes:
    """The diff git writes for `edits` (None deletes) on a copy of `tree`; `tree` is untouched."""
    wanted = {rel: content.encode() if isinstance(content, str) else content for rel, content in edits.items()}
    try:
        key = _files_git_sees(tree / "vllm") + repr(sorted(wanted.items(), key=lambda item: item[0]))
    except OSError:  # a file the copy below cannot read either: let it say so
        return header.encode() + b"---\n" + _git_diff(tmp, tree, wanted)
    if key not in _DIFFS:
        _DIFFS[key] = _git_diff(tmp, tree, wanted)
    return header.encode() + b"---\n" + _DIFFS[key]


def _files_git_sees(root: Path) -> str:
    """Each file under `root` as shutil.copytree copies it (symlinks followed): path, mode, sha256."""
    files = []
    for folder, _, names in os.walk(root, followlinks=True):
        for name in names:
            path = Path(folder, name)
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            files.append((path.relative_to(root).as_posix(), path.stat().st_mode, digest))
    return repr(sorted(files))


def write_edits(work: Path, edits: dict[str, bytes | None]) -> None:
    """Each edit written under `work` (None deletes the file)."""
    for rel, content in edits.items():
        path = work / rel
        if content is None:
            path.unlink()
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)


def _git_diff(tmp: Path, tree: Path, edits: dict[str, bytes | None]) -> bytes:
    """The stock files staged, the edits in the work tree (new files staged as intended): `git diff` of the
    two is the diff a commit of each would give, in four git runs, not five, and no hook templates copied."""
    work = Path(tempfile.mkdtemp(dir=tmp))
    shutil.copytree(tree / "vllm", work / "vllm")
    _git(work, "init", "-q", "--template=")
    _git(work, "add", "-A")
    write_edits(work, edits)
    _git(work, "add", "--intent-to-add", "--ignore-removal", ".")
    diff = _git(work, "diff", "--no-renames", "--no-color")
    shutil.rmtree(work)
    return diff


def write_library(
    root: Path,
    series: dict[str, list[bytes]],
    *,
    versions: dict[str, str] | None = None,
    upstream: str | None = ">=0.18.0",
    supported: str | None = ">=0.11.0",
    name: str = "demo",
) -> Path:
    """series: dir -> patch bytes in order; versions: dir -> specifier (default ==dir)."""
    set_dir = root / name
    set_dir.mkdir(parents=True, exist_ok=True)
    lines = [f'name = "{name}"', 'description = "test set"']
    if supported:
        lines.append(f'supported = "{supported}"')
    if upstream:
        lines.append(f'upstream = "{upstream}"')
    for directory, patches in series.items():
        spec = (versions or {}).get(directory, f"=={directory}")
        lines += ["", "[[releases]]", f'versions = "{spec}"', f'dir = "{directory}"']
        (set_dir / directory).mkdir(exist_ok=True)
        names = []
        for i, data in enumerate(patches, 1):
            names.append(f"{i:04d}-change.patch")
            (set_dir / directory / names[-1]).write_bytes(data)
        (set_dir / directory / "series").write_text("\n".join(names) + "\n")
    (set_dir / "set.toml").write_text("\n".join(lines) + "\n")
    return root


# copy_with_bytecode's bytecode of each source it copied, by (path, mtime, size): made once a process
_BYTECODE: dict[tuple[Path, int, int], bytes] = {}


def copy_with_bytecode(source: Path, dest: Path) -> None:
    """`source` (a library's script) copied to `dest` with its mtime, and beside it in __pycache__ the bytecode
    an installed library holds (pip compiles it): a load runs it, as an installed one's does, instead of
    compiling the script again (eagle3's launch.py: ~18 ms of CPU a load where PYTHONDONTWRITEBYTECODE is set).
    The bytecode is checked against `dest`'s mtime and size at each load, as any __pycache__ is."""
    shutil.copy2(source, dest)
    pyc = Path(importlib.util.cache_from_source(str(dest)))
    pyc.parent.mkdir(exist_ok=True)
    made = dest.stat()
    key = (source.resolve(), made.st_mtime_ns, made.st_size)
    if key not in _BYTECODE:
        py_compile.compile(str(dest), cfile=str(pyc), doraise=True)
        _BYTECODE[key] = pyc.read_bytes()
    pyc.write_bytes(_BYTECODE[key])


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under vllm/, for byte-for-byte comparisons."""
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted((root / "vllm").rglob("*")) if p.is_file()}


def patched_spec() -> str:
    """SPEC_PY with "deepseek" added to the supported list: the change most tests patch in."""
    return SPEC_PY.replace('    "qwen",\n', '    "qwen",\n    "deepseek",\n')


def open_ended_library(tree: Path, scratch: Path) -> Path:
    """One open-ended set (no upstream release declared): 0001 adds "deepseek" to the spec list,
    0002 patches the model file; what a release holding both changes is held against."""
    patches = [make_patch(scratch, tree, {SPEC: patched_spec()}), make_patch(scratch, tree, {MODEL: EAGLE_MODEL})]
    return write_library(scratch / "lib", {"0.16.0": patches}, versions={"0.16.0": ">=0.16.0"}, upstream=None)


def stale_pyc_under_prefix(prefix: Path, site: Path, path: str) -> Path:
    """An unchecked-hash .pyc of other bytes than `path`'s under the pycache `prefix`, where Python reads
    it when it imports from `site` as named (no symlink resolved): PREFIX/<directory>/<stem>.<tag>.pyc."""
    mirror = prefix / str(site / path).lstrip("/")
    mirror.parent.mkdir(parents=True, exist_ok=True)
    other = prefix.parent / "other.py"
    other.write_text("STOCK = True\n")
    pyc = mirror.parent / f"{mirror.stem}.{sys.implementation.cache_tag}.pyc"
    mode = py_compile.PycInvalidationMode.UNCHECKED_HASH
    return Path(py_compile.compile(str(other), cfile=str(pyc), doraise=True, invalidation_mode=mode))


def spec_and_model(site: Path) -> dict[str, bytes]:
    """The two files open_ended_library's set patches, as `site` holds them."""
    return {path: (site / path).read_bytes() for path in (SPEC, MODEL)}


def cli_runner():
    """`invoke(*args)`: the patchkit CLI through click's CliRunner, exceptions propagated; each command
    starts from no memo of one run before it, as in a process of its own (cli.percommand)."""
    runner = CliRunner()

    def invoke(*args: object):
        percommand.forget()
        return runner.invoke(cli, [str(a) for a in args], catch_exceptions=False)

    return invoke


CONSECUTIVE = ("0.15.0", "0.15.1")  # two releases whose whole diff the release tests apply


def release_diff(old: Path, new: Path, work: Path) -> bytes:
    """git's own diff of every vllm/**/*.py between two fetched releases, paths a/vllm/... b/vllm/..."""
    # the cache is a shared directory: bytecode another process compiled in it is no release file
    compiled = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(old / "vllm", work / "a" / "vllm", ignore=compiled)
    shutil.copytree(new / "vllm", work / "b" / "vllm", ignore=compiled)
    done = subprocess.run(
        ["git", "diff", "--no-index", "--no-renames", "--no-prefix", "--no-color", "a", "b"],
        cwd=work,
        capture_output=True,
    )
    assert done.returncode == 1, done.stderr  # 1: there are differences
    return done.stdout


def fingerprint(root: Path) -> dict[str, tuple]:
    """Everything under `root` as (kind, content digest or link target, mode): what a sentinel directory
    outside the target holds, compared before and after a command fed hostile state."""
    import hashlib

    seen: dict[str, tuple] = {}
    for path in sorted(root.rglob("*")):
        name = path.relative_to(root).as_posix()
        info = path.lstat()
        if path.is_symlink():
            seen[name] = ("link", os.readlink(path), info.st_mode)
        elif path.is_file():
            seen[name] = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), info.st_mode)
        else:
            seen[name] = ("dir", "", info.st_mode)
    seen["."] = ("dir", "", root.lstat().st_mode)
    return seen


def make_venv(path: Path) -> Path:
    """The venv `python -m venv --without-pip PATH` makes, byte for byte (bin/python a symlink to the base
    interpreter, the same pyvenv.cfg), made here: no interpreter started for it (~40 ms of CPU each)."""
    venv.EnvBuilder(symlinks=True, with_pip=False).create(path)
    return path


def purelib(python: Path) -> Path:
    """The site-packages directory of an interpreter (a venv's own, for one)."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return Path(subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip())


def run_cli(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None):
    """The installed CLI in a process of its own (`python -m patchkit`), as a user runs it: no click runner
    catching what a real run would print. Forked from cli_server's warm interpreter (a real process, its
    exit the interpreter's). Returns the CompletedProcess (text)."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PATCHKIT_DEBUG", None)
    return run_patchkit([str(a) for a in args], env=full_env, cwd=cwd, timeout=300)


def run_cli_in_process(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None):
    """run_cli's command run in this process, through the CLI's own entry point (cli.run_in_process: its click
    group, these arguments, its exit code), its memos forgotten before and after (cli.percommand). Only for a
    test that asserts nothing of the process (CONTRIBUTING: signals, terminals, encodings, start-up, exit
    paths): a fork costs ~15 ms of CPU more. Returns a CompletedProcess (text), as run_cli."""
    argv = [str(a) for a in args]
    environ, here = dict(os.environ), os.getcwd()
    given = start_up_environment({**environ, **(env or {})})
    assert given == start_up_environment(SESSION_ENV), f"a start-up environment of its own: run_cli {argv[:1]}"
    os.environ.update(env or {})
    os.environ.pop("PATCHKIT_DEBUG", None)
    try:
        os.chdir(cwd or here)
        code, out, err = run_in_process(argv)
    finally:
        percommand.forget()
        signals.new_run()  # a fork of this process (a crash trial's) starts with no command's interrupt report
        os.chdir(here)
        os.environ.clear()
        os.environ.update(environ)
    return subprocess.CompletedProcess([sys.executable, "-m", "patchkit", *argv], code, out, err)


# The read-only commands run_cli_read_only may run in this process (CONTRIBUTING).
READ_ONLY_COMMANDS = ("status", "verify", "preflight")


def run_cli_read_only(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None):
    """A read-only command (status, verify, preflight) judged by its output and exit code alone: in this
    process (run_cli_in_process) where run_cli would fork it from the server as it is, else run_cli's process
    (a start-up, a PYTHONPATH or a variable patchkit's imports read of its own is then part of the command)."""
    assert str(args[0]) in READ_ONLY_COMMANDS, f"not a read-only command: {args[0]}"
    plain = forked_as_the_session({**os.environ, **(env or {})}, cwd)
    return (run_cli_in_process if plain else run_cli)(*args, env=env, cwd=cwd)


# The commands that write a tree run_cli_writing may run in this process (CONTRIBUTING): those fleet's node
# agent runs in its own process (cli.run_in_process), and recover, whose rollback of a journal they run first
# there. `run` execs the launch: always a process.
WRITING_COMMANDS = ("apply", "revert", "recover")


def run_cli_writing(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None):
    """apply, revert or recover judged by its exit code, its output and the files it leaves alone: in this process
    (run_cli_in_process) where run_cli would fork it from the server as it is (run_cli_read_only's rule: no
    start-up, PYTHONPATH or fault plan of its own), else run_cli's process. Not for a test of a signal, a
    terminal, a process's limits or its exit: those run_cli."""
    assert str(args[0]) in WRITING_COMMANDS, f"not a command run_cli_writing runs: {args[0]}"
    plain = forked_as_the_session({**os.environ, **(env or {})}, cwd)
    return (run_cli_in_process if plain else run_cli)(*args, env=env, cwd=cwd)


def run_cli_judged(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None):
    """A command judged by its exit code, its output and the files it leaves alone: status, verify and
    preflight as run_cli_read_only, apply, revert and recover as run_cli_writing, any other as run_cli."""
    if str(args[0]) in READ_ONLY_COMMANDS:
        return run_cli_read_only(*args, env=env, cwd=cwd)
    return (run_cli_writing if str(args[0]) in WRITING_COMMANDS else run_cli)(*args, env=env, cwd=cwd)


def warm_pycache_prefix(prefix: Path) -> Path:
    """`prefix` made a pycache prefix holding the bytecode of what patchkit's commands import (the standard
    library's, patchkit's, its dependencies'), as a first run under it leaves it where bytecode is written.
    Under an empty prefix with PYTHONDONTWRITEBYTECODE set (this machine) every fresh command compiled ~160
    modules from source: 0.6 s of CPU, 0.1 s warm. Hard links of one template a process; none of the
    target's files are there (the tests plant those)."""
    shutil.copytree(_pycache_template(), prefix, copy_function=os.link)
    return prefix


_WARM_PREFIX = """
import importlib, pkgutil, sys
import click, patchkit
names = [m.name for p in (patchkit, click) for m in pkgutil.walk_packages(p.__path__, p.__name__ + ".")]
for name in [*names, *sys.argv[1:]]:
    if not name.startswith(("patchkit.fleet", "patchkit.__main__")):
        try:
            importlib.import_module(name)
        except Exception:  # click._winconsole elsewhere than Windows; what is not installed
            pass
"""


# Where the template lies: the session's temporary root (conftest.py), shared by its xdist workers.
PYCACHE_TEMPLATE: Path | None = None


def _pycache_template() -> Path:
    """Made once a session, by the first worker to need it (the others wait on its lock)."""
    root = PYCACHE_TEMPLATE or Path(tempfile.gettempdir()) / f"patchkit-pycache-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "made").exists():
            shutil.rmtree(root / "pfx", ignore_errors=True)  # a worker's that died half-way
            env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
            env["PYTHONPYCACHEPREFIX"] = str(root / "pfx")
            for argv in (["-m", "patchkit", "--version"], ["-c", _WARM_PREFIX, *THIRD_PARTY]):
                subprocess.run([sys.executable, *argv], env=env, check=True, capture_output=True, timeout=120)
            (root / "made").touch()
    return root / "pfx"


# make test-fast loads this Hypothesis profile (conftest.py): each property is tried on a share of its
# examples, make test on all of them.
FAST_PROFILE = "fast"
FAST_SHARE = 4


def examples(full: int) -> int:
    """A property's example count: `full` under make test; a FAST_SHARE-th of it (10 at least) under the
    fast profile, the same property on fewer inputs. Read at the test's import, once the profile is loaded."""
    if settings.get_current_profile_name() != FAST_PROFILE:
        return full
    return max(full // FAST_SHARE, min(full, 10))


def sweep_trials(trials: Sequence[T]) -> Sequence[T]:
    """A sweep's trials (crash steps, plans, amounts): every one under make test; under the fast profile
    every FAST_SHARE-th from the first, and the last, as `examples` shares a property's inputs: the same
    checks on each trial run, fewer of them. Read when the sweep runs."""
    if settings.get_current_profile_name() != FAST_PROFILE or len(trials) <= 2:
        return trials
    shared = list(trials[::FAST_SHARE])
    return shared if shared[-1] == trials[-1] else [*shared, trials[-1]]


def sweep_count(full: int) -> int:
    """How many of a sweep's trials a test expects an outcome of: `full` under make test, a FAST_SHARE-th
    of it under the fast profile (sweep_trials)."""
    return full if settings.get_current_profile_name() != FAST_PROFILE else full // FAST_SHARE


def assert_clean_failure(done, code: int) -> None:
    """A refusal as the docs promise it: the exit code asked for, one message, no traceback, never
    the internal-error code."""
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    assert "internal error" not in output, output
    assert done.returncode == code, output


_HUNK_HEADER_SYNTAX = re.compile(rb"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@", re.MULTILINE)


@st.composite
def hunk_header_mutation(draw, raw: bytes) -> bytes:
    """`raw` with one hunk header's syntax spoiled or respelled, its numbers and its "@@ -" kept: a
    header git calls corrupt, or one it reads as before. git refuses the diff exactly when patchkit must."""
    headers = list(_HUNK_HEADER_SYNTAX.finditer(raw))
    if not headers:
        return raw
    match = draw(st.sampled_from(headers))
    head = match.group()
    kind = draw(st.sampled_from(["insert", "delete", "section"]))
    if kind == "insert":
        at = draw(st.integers(4, len(head)))
        head = head[:at] + draw(st.sampled_from([b"+", b"-", b",", b" ", b"@", b"x", b"\t", b"\r"])) + head[at:]
    elif kind == "delete":
        # a digit or a comma gone would change the numbers, not the syntax
        at = draw(st.sampled_from([i for i in range(4, len(head)) if head[i : i + 1] not in b"0123456789,"]))
        head = head[:at] + head[at + 1 :]
    else:
        head += b" def section_heading():"
    return raw[: match.start()] + head + raw[match.end() :]


# vLLM's loader (vllm/plugins/__init__.py): entry_points(group=...), load() each (one that fails
# to load is logged and left out) into `plugins`; the scripts below then call each.
PLUGINS_LOADED = """
from importlib.metadata import entry_points
plugins = {}
for ep in entry_points(group="vllm.general_plugins"):
    try:
        plugins[ep.name] = ep.load()
    except Exception as exc:
        print("Failed to load plugin", ep.name, exc, file=sys.stderr)
"""
LOAD_LIKE_VLLM = f"""
import sys
sys.path.insert(0, sys.argv[1])
{PLUGINS_LOADED}
for func in plugins.values():
    func()
print(sorted(plugins))
"""


def load_plugins_like_vllm(site: Path, **env: str) -> subprocess.CompletedProcess:
    """The general plugins installed in `site` (the launch guard) as vLLM runs them: discovered by
    entry point, in an interpreter of its own that writes bytecode (forked by cli_server from one that
    imported importlib.metadata alone, as python -c would start). A refusal is a non-zero exit."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONDONTWRITEBYTECODE")}
    return run_python_code(LOAD_LIKE_VLLM, [str(site)], {**clean, **env}, 60)


NOBODY = 65534


def load_plugins_as_another_user(site: Path) -> subprocess.CompletedProcess | None:
    """load_plugins_like_vllm run as another user (nobody), as a container built as root runs vLLM
    as a user: None where this process cannot change user. Forked by cli_server from an interpreter
    that user started (setpriv), as their `python -c` starts. `site` lies in the open_tmp_path fixture's
    directory, whose parents that user can search, so that only the tree's own modes decide what it
    reads (never chmod pytest's tmp_path for it: a pytest session starting meanwhile closes it again)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return None
    closed = [str(parent) for parent in site.parents if not parent.stat().st_mode & stat.S_IXOTH]
    assert not closed, f"another user cannot reach {site} past {closed}: build it in open_tmp_path"
    clean = {k: v for k, v in os.environ.items() if k not in ("PATCHKIT_GUARD", "PYTHONDONTWRITEBYTECODE")}
    return run_python_code(LOAD_LIKE_VLLM, [str(site)], {**clean, "HOME": "/nonexistent"}, 60, user=NOBODY)


def record_rows(site: Path, dist: str, *, whole_site: bool = False) -> str:
    """RECORD's text as pip writes it for vllm/ and `dist` (`whole_site`: every file under `site`)."""
    rows = []
    files = site.rglob("*") if whole_site else [*(site / "vllm").rglob("*"), *(site / dist).rglob("*")]
    for path in sorted(files):
        rel = path.relative_to(site).as_posix()
        if path.is_file() and rel != f"{dist}/RECORD":
            data = path.read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{rel},sha256={digest},{len(data)}")
    return "\n".join([*rows, f"{dist}/RECORD,,"]) + "\n"


def pip_install(site: Path, version: str, files: dict[str, str], dist_files: dict[str, bytes] | None = None) -> None:
    """What `pip install vllm==VERSION` leaves over a vLLM already there: the old distribution's
    files gone, the new one's written, with a true RECORD. .patchkit/ and the guard are no files of
    vLLM's: pip leaves them."""
    shutil.rmtree(site / "vllm", ignore_errors=True)
    for old in site.glob("vllm-*.dist-info"):
        shutil.rmtree(old)
    write_tree(site, version, files)
    dist = f"vllm-{version}.dist-info"
    for name, data in (dist_files or {}).items():
        (site / dist / name).parent.mkdir(parents=True, exist_ok=True)
        (site / dist / name).write_bytes(data)
    (site / dist / "RECORD").write_text(record_rows(site, dist))


def lay_out_release(version: str, paths: list[str], dest: Path) -> Path:
    """The release's dist-info and exactly `paths`, fetched into the cache and laid out at dest. The
    cache's tree holds whatever earlier fetches asked for (`fetch --all` included), so a test that
    lays it out whole depends on which ran first."""
    lay_out(release_tree(version, paths), str(dest), paths)
    return dest


LIBRARY = Path(__file__).resolve().parent.parent / "patches"


def behaviour_harness(set_name: str) -> types.ModuleType:
    """A draft set's behaviour.py, loaded in this process. The parser files it loads get `vllm.*`
    from its stand-ins; conftest takes those away after each test."""
    path = LIBRARY / set_name / "behaviour.py"
    spec = importlib.util.spec_from_file_location(f"behaviour_of_{set_name.replace('-', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def forget_behaviour_stand_ins(meta_path: list, dont_write_bytecode: bool) -> None:
    """Undo what a behaviour harness did to this process: its vllm.* finder and stand-in modules,
    the `regex` alias of `re`, no bytecode."""
    sys.meta_path[:] = meta_path
    for name, module in list(sys.modules.items()):  # and the packages besides vLLM it stood in for
        if name == "vllm" or name.startswith(("vllm.", "behaviour_")) or type(module).__name__ == "_StandInModule":
            del sys.modules[name]
    if sys.modules.get("regex") is re:
        del sys.modules["regex"]
    sys.dont_write_bytecode = dont_write_bytecode


def default_signals() -> None:
    """A child's signals as a terminal gives them (a subprocess's preexec_fn): a CI runner's
    background job or nohup starts the tests with SIGINT or SIGHUP ignored, which a child inherits,
    and patchkit rightly keeps an ignored signal ignored."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


# Small vLLM wheels (test_wheel and the Dockerfile's test build them).
OFFLINE = {"PIP_NO_INDEX": "1", "PIP_CONFIG_FILE": os.devnull}  # pip asks no index: the cache alone answers


def pip_env(cache: Path, index: str = "", find_links: str = "") -> dict[str, str]:
    """A `wheel` run's environment: patchkit's cache `cache`, pip reading `index` alone (none: no index)
    and `find_links`, never the machine's pip.conf, extra index or find-links."""
    return {
        "PATCHKIT_CACHE_DIR": str(cache),
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": index,
        "PIP_EXTRA_INDEX_URL": "",
        "PIP_FIND_LINKS": find_links,
        "PIP_NO_INDEX": "" if index else "1",
    }


TAGS = "cp38-abi3-manylinux_2_31_x86_64"
STOCK_FILES = {
    "vllm/__init__.py": b'__version__ = "0.16.0"\n',
    "vllm/config/spec.py": SPEC_PY.encode(),
    "vllm/models/model.py": MODEL_PY.encode(),
    "vllm/_C.abi3.so": bytes(range(256)) * 64,  # stored, as binaries often are
    "vllm/entrypoints/cli.py": b"def main():\n    print('vllm')\n",
}


def record_hash(data: bytes) -> str:
    """A RECORD row's hash, computed here rather than by patchkit.distinfo.record (the tests' own oracle)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_wheel(
    where: Path,
    version: str = "0.16.0",
    files: dict[str, bytes] | None = None,
    *,
    record: dict[str, str | None] | None = None,
    extra: list[tuple[zipfile.ZipInfo, bytes]] = (),  # type: ignore[assignment]
    streamed: bool = False,
    published: bool = True,
) -> Path:
    """A vLLM wheel: `files`, a dist-info (METADATA, WHEEL, entry_points.txt) and a true RECORD
    (`record` overrides rows: path -> hash, None leaves the row out), plus `extra` members as given
    (not in RECORD). `published`: the release cache of the test's own cache (TEST_CACHE) holds it
    as the release's published wheel of that name (publish_wheel)."""
    files = dict(STOCK_FILES if files is None else files)
    dist = f"vllm-{version}.dist-info"
    files[f"{dist}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\nSummary: test\n\nA long description.\nVersion: 9\n"
    ).encode()
    files[f"{dist}/WHEEL"] = f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {TAGS}\n".encode()
    files[f"{dist}/entry_points.txt"] = b"[console_scripts]\nvllm = vllm.entrypoints.cli:main\n"
    hashes = {p: (record or {}).get(p, record_hash(d)) for p, d in files.items()}
    rows = [f"{p},{hashes[p]},{len(d)}" for p, d in files.items() if hashes[p] is not None]
    files[f"{dist}/RECORD"] = ("\n".join([*rows, f"{dist}/RECORD,,"]) + "\n").encode()
    where.mkdir(parents=True, exist_ok=True)
    path = where / f"vllm-{version}-{TAGS}.whl"
    with path.open("wb") as sink, zipfile.ZipFile(_Stream(sink) if streamed else sink, "w") as zf:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, (2026, 1, 2, 3, 4, 6))
            info.external_attr = 0o100644 << 16
            info.compress_type = zipfile.ZIP_STORED if name.endswith(".so") else zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=streamed) as member:  # zip64 extras in the local headers
                member.write(data)
        for info, data in extra:
            zf.writestr(info, data)
    if published and TEST_CACHE is not None:
        publish_wheel(path, TEST_CACHE)
    return path


# The cache of the running test when it is its own (conftest sets it; None for `release` tests,
# which use the real cache): write_wheel publishes its wheels there.
TEST_CACHE: Path | None = None


def publish_wheel(wheel: Path, cache: Path) -> None:
    """`cache`'s release cache holds `wheel` as its release's published wheel of that name, as
    `patchkit fetch` leaves it: release.json (the file's sha256, its member list, the sha256 of its
    RECORD) and the dist-info's METADATA and RECORD, taken out of the wheel. A wheel without them
    is not published."""
    version = str(Version(wheel.name.split("-")[1]))
    dist = f"vllm-{version}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        names = sorted(i.filename for i in zf.infolist() if not i.is_dir())
        if f"{dist}/RECORD" not in names or f"{dist}/METADATA" not in names:
            return
        kept = {n: zf.read(n) for n in (f"{dist}/METADATA", f"{dist}/RECORD")}
    root = cache / "releases" / version
    if root.exists():
        shutil.rmtree(root)
    for name, data in kept.items():
        (root / "tree" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "tree" / name).write_bytes(data)
    state = {
        "schema": 2,
        "project": "vllm",
        "version": version,
        "wheel": wheel.name,
        "url": f"https://files.example/{wheel.name}",
        "index": "https://pypi.org/simple/",
        "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "members": [n for n in names if _plain_member(n)],
        "dist_info": dist,
        "present": sorted(kept),
        "absent": [],
        "record_sha256": hashlib.sha256(kept[f"{dist}/RECORD"]).hexdigest(),
    }
    save_state(root, state)  # sealed with this user's key, as a fetch leaves it


def _plain_member(name: str) -> bool:
    parts = name.split("/")
    return (
        not name.startswith("/")
        and "\\" not in name
        and "\0" not in name
        and all(p not in ("", ".", "..") for p in parts)
    )


class _Stream:
    """A file zipfile cannot seek in: it writes each member with a data descriptor after its data."""

    def __init__(self, sink):
        self.write, self.flush = sink.write, sink.flush


class Releases:
    """Fake stock releases (each with its RECORD), served as patchkit.fetch.release_tree serves them."""

    def __init__(self, root: Path, monkeypatch):
        self.root = root
        self.trees: dict[str, Path] = {}
        monkeypatch.setattr(fetch, "release_tree", self.release_tree)
        monkeypatch.setattr(fetch, "available_versions", lambda: sorted(Version(v) for v in self.trees))

    def add(self, version: str, files: dict[str, str]) -> Path:
        tree = write_tree(self.root / version, version, files)
        rows = [
            f"{p.relative_to(tree).as_posix()},{record_hash(p.read_bytes())},{p.stat().st_size}"
            for p in sorted(tree.rglob("*"))
            if p.is_file()
        ]
        (tree / f"vllm-{version}.dist-info" / "RECORD").write_text("\n".join(rows) + "\n")
        self.trees[version] = tree
        return tree

    def release_tree(self, version, paths=(), *, all_python=False, progress=None, recheck_index=False):
        if version not in self.trees:
            raise FetchError(f"no vLLM {version} on the (fake) index")
        return self.trees[version]


def verify(library: Path, version: str, fmt: str = "json"):
    """`patchkit verify` of `library` on one release (served by Releases), in process."""
    return cli_runner()("verify", "--patches", library, "--vllm-version", version, "--format", fmt)


def release_of(result) -> dict:
    """The one release's entry of a JSON verify result."""
    return json.loads(result.stdout)["releases"][0]


def on_a_terminal(
    args: list[object], *, width: int | None = None, stdout_terminal: bool = True, drop_env: tuple[str, ...] = ()
) -> tuple[int, bytes]:
    """`python -m patchkit ARGS` with stderr a pseudo-terminal (`width` columns wide when given) and
    stdout the same terminal or nothing: its exit code and the bytes it drew. Forked from cli_server's warm
    interpreter where a fresh one would start the same (a fresh start costs ~130 ms of CPU more)."""
    main, child = pty.openpty()
    if width is not None:
        fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, width, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in drop_env}
    drawn = bytearray()
    stdin = os.open(os.devnull, os.O_RDONLY)
    stdout = child if stdout_terminal else os.open(os.devnull, os.O_WRONLY)
    code = run_patchkit_on([str(a) for a in args], env, [stdin, stdout, child], lambda: _read_terminal(main, drawn))
    if code is None:
        for fd in {stdin, stdout} - {child}:
            os.close(fd)
        process = subprocess.Popen(
            [sys.executable, "-m", "patchkit", *map(str, args)],
            stdin=subprocess.DEVNULL,
            stdout=child if stdout_terminal else subprocess.DEVNULL,
            stderr=child,
            env=env,
        )
        os.close(child)
        _read_terminal(main, drawn)
        code = process.wait(timeout=300)
    os.close(main)
    return code, bytes(drawn)


def _read_terminal(main: int, drawn: bytearray) -> None:
    """What is drawn on the terminal whose master side is `main`, until every process closed it."""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        drawn += chunk


def terminal_screen(drawn: bytes) -> str:
    """What a terminal shows of `drawn`: styles and cursor moves dropped, and of a line a live line
    (a spinner) redrew with a carriage return, its last drawing only (the pty's \\r\\n ends a line)."""
    text = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", drawn.decode())
    return "\n".join(line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.split("\n"))


def file_member(name: str) -> zipfile.ZipInfo:
    """A zip member header for a plain 0644 file (a wheel's extra members)."""
    info = zipfile.ZipInfo(name, (2026, 1, 2, 3, 4, 6))
    info.external_attr = 0o100644 << 16
    return info


def spec_library(tmp_path: Path) -> Path:
    """A library whose 0.16.0 series adds "deepseek" to spec.py's list."""
    tree = write_tree(tmp_path / "stock")
    return write_library(
        tmp_path / "lib", {"0.16.0": [make_patch(tmp_path, tree, {"vllm/config/spec.py": patched_spec()})]}
    )


# A set's behaviour test of the tests' own, speaking checks/behaviour.py's protocol as the tool-call
# sets' behaviour.py does: DemoParser fails while BROKEN = True; it leaves a mark where it ran.
BEHAVIOUR_JUDGE = """\
import json, pathlib, sys
files = [pathlib.Path(a) for a in sys.argv[1:] if a.endswith(".py")]
pathlib.Path(__file__).with_name("ran").write_text(" ".join(sys.argv[1:]))
judged = [f for f in files if "class DemoParser" in f.read_text()]
broken = [f for f in judged if "BROKEN = True" in f.read_text()]
failures = [
    {"parser": "DemoParser", "case": "one call", "split": "2 token(s) per delta", "top_up": "bare",
     "lost": "call 0 (get_weather) lost"}
    for f in broken
]
document = {"ok": not broken, "error": None, "loaded": "stand-ins", "runs": 8 * len(judged),
            "failed": 3 * len(broken), "judged": {}, "skipped": [], "failures": failures}
print(json.dumps(document))
sys.exit(1 if broken else 0)
"""

# a judge that finds every file it is given broken: the change is in, the behaviour is not
FAILING_JUDGE = BEHAVIOUR_JUDGE.replace('"BROKEN = True" in f.read_text()', "True")
PARSER = "vllm/tool_parsers/demo_parser.py"
PARSER_STOCK = "class DemoParser:\n    BROKEN = True\n"
PARSER_FIXED = "class DemoParser:\n    BROKEN = False\n"


def judged_library(scratch: Path, judge: str = BEHAVIOUR_JUDGE) -> Path:
    """An open-ended set fixing DemoParser (PARSER_STOCK -> PARSER_FIXED) with a behaviour test: `judge`."""
    stock = write_tree(scratch / "stock", "0.16.0", {PARSER: PARSER_STOCK})
    patch = make_patch(scratch, stock, {PARSER: PARSER_FIXED})
    root = write_library(scratch / "judged", {"0.16.0": [patch]}, versions={"0.16.0": ">=0.16.0"}, upstream=None)
    (root / "demo" / "judge.py").write_text(judge)
    manifest = root / "demo" / "set.toml"
    manifest.write_text('behaviour = "judge.py"\n' + manifest.read_text())
    return root


def install(wheel: Path, prefix: Path) -> Path:
    """The wheel installed with `installer` (RECORD validated first); returns site-packages."""
    from installer import install as install_wheel
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    site = prefix / "site-packages"
    scheme = {key: str(prefix / key) for key in ("platlib", "purelib", "headers", "scripts", "data")}
    scheme["platlib"] = scheme["purelib"] = str(site)
    with WheelFile.open(wheel) as source:
        source.validate_record(validate_contents=True)
        destination = SchemeDictionaryDestination(scheme, interpreter="/usr/bin/python3", script_kind="posix")
        install_wheel(source, destination, {})
    return site


def stock_files_fetched(files: dict[str, bytes]) -> None:
    """The test cache's release entry holds these stock files, as `patchkit fetch` leaves them."""
    assert TEST_CACHE is not None
    root = TEST_CACHE / "releases" / "0.16.0"
    state = load_state(root, "0.16.0")
    assert state is not None
    for path, data in files.items():
        (root / "tree" / path).parent.mkdir(parents=True, exist_ok=True)
        (root / "tree" / path).write_bytes(data)
    state["present"] = sorted(set(state["present"]) | set(files))
    save_state(root, state)


class FakeIndex:
    """Stock trees per version, served the way patchkit.fetch serves them; every fetch is logged."""

    def __init__(self, root: Path, monkeypatch):
        self.root = root
        self.trees: dict[str, Path] = {}
        self.fetched: list[tuple[str, tuple[str, ...]]] = []
        monkeypatch.setattr(fetch, "release_tree", self.release_tree)
        monkeypatch.setattr(fetch, "available_versions", lambda: sorted(Version(v) for v in self.trees))

    def add(self, version: str, spec: str | bytes = SPEC_PY) -> Path:
        tree = write_tree(self.root / version, version, {"vllm/config/spec.py": spec})
        _write_record(tree, version)
        self.trees[version] = tree
        return tree

    def release_tree(self, version, paths=(), *, all_python=False, progress=None, recheck_index=False):
        self.fetched.append((version, tuple(paths)))
        if version not in self.trees:
            raise FetchError(f"no wheel for vllm=={version} on the index")
        return self.trees[version]


def _write_record(tree: Path, version: str) -> None:
    """A wheel RECORD for the tree, as the fetcher leaves it beside METADATA."""
    rows = [
        f"{p.relative_to(tree).as_posix()},{record_hash(p.read_bytes())},{p.stat().st_size}"
        for p in sorted(tree.rglob("*"))
        if p.is_file()
    ]
    (tree / f"vllm-{version}.dist-info" / "RECORD").write_text("\n".join(rows) + "\n")


# --------------------------------------------------------------------------- records mutated at every place


def json_values(edges: list[object], text_size: int = 6) -> st.SearchStrategy[object]:
    """Any JSON value of up to six leaves: `edges` (their strings as keys too), short text, integers."""
    values = st.sampled_from(edges)
    return st.recursive(
        values | st.text(max_size=text_size) | st.integers(),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(st.text(max_size=6) | values.filter(lambda v: isinstance(v, str)), inner, max_size=3)
        ),
        max_leaves=6,
    )


def places_in(value: object, at: tuple = ()) -> list[tuple]:
    """Every place in a record a mutation can put a value (each key's value, each list item) or a key."""
    found = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            found += places_in(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += places_in(item, (*at, index))
    return found


def mutated(record: object, place: tuple, value: object, *, as_key: bool, drop: bool) -> object:
    """A copy of `record` with `value` at `place` (the whole of it at ()): in place of what is there,
    or as the key there (`as_key`: a string in a dict); or (`drop`) with that key gone."""
    if not place:
        return value
    record = copy.deepcopy(record)
    parent = record
    for step in place[:-1]:
        parent = parent[step]
    last = place[-1]
    if drop and isinstance(parent, dict):
        del parent[last]
    elif as_key and isinstance(parent, dict) and isinstance(value, str):
        parent[value] = parent.pop(last)
    else:
        parent[last] = value
    return record


def double_ctrl_c_in_the_lock(monkeypatch) -> list[int]:
    """A Ctrl-C once filelock has locked the file, a second in the release its rollback of that take
    runs: filelock 4 raises the two together as one BaseExceptionGroup ("lock acquisition cleanup
    failed"). The signals sent (a filelock that rolls nothing back never sends the second)."""
    from filelock import FileLock

    real_acquire, real_release = FileLock._acquire, FileLock._release
    sent: list[int] = []

    def acquire(self):
        real_acquire(self)
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)

    def release(self):
        if len(sent) == 1:
            sent.append(2)
            os.kill(os.getpid(), signal.SIGINT)
        real_release(self)

    monkeypatch.setattr(FileLock, "_acquire", acquire)
    monkeypatch.setattr(FileLock, "_release", release)
    return sent


def patchkit_faulted(*args: object, fault: str = "") -> subprocess.CompletedProcess:
    """`python -m patchkit ARGS` in a process of its own, which the fault ends (os._exit: a SIGKILL)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PATCHKIT_FAULT")} | OFFLINE
    if fault:
        env |= {"PATCHKIT_FAULT_AFTER": fault, "PATCHKIT_FAULT_MODE": "exit"}
    return run_patchkit([str(a) for a in args], env, None, 120)


def crash_after_the_first_replace(tree: Path, command: list[object], first: str, written: bytes) -> None:
    """Run `command` on `tree` with a fault at the first step that leaves `first` holding `written`
    with the journal still there (the commit cut short right after that replace); found by bisection
    on copies (every later step leaves it written too, as the fault rolls nothing back)."""
    keep = tree.parent / f"{tree.name}-before"
    shutil.copytree(tree, keep, symlinks=True)

    def replaced(step: int) -> bool:
        shutil.rmtree(tree)
        shutil.copytree(keep, tree, symlinks=True)
        died = patchkit_faulted(*command, fault=str(step))
        assert died.returncode in (0, 70), died.stdout + died.stderr  # 0: the command has fewer steps
        return died.returncode == 0 or (tree / first).read_bytes() == written

    low, high = 1, 64
    assert replaced(high)
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if replaced(middle) else (middle + 1, high)
    assert replaced(low) and (tree / ".patchkit/journal.json").exists()  # it died, right after that replace


# The words that open a hint's way on for a crash that was the user's own command (the other way is for
# a journal that is none of patchkit's); the way ends at the words that open the other.
_WAY_FOR_A_CRASH = ("If one was", "if an apply or revert of yours was cut short here")
_OTHER_WAY = ("; if not,", ". If not,")


def hint_commands(said: str) -> list[str]:
    """The commands a refusal's hint names, in order, for a crash that was the user's (where the hint
    names two ways on); the whole hint's where it names one."""
    hint = " ".join(said.split()).partition("hint: ")[2]
    for words in _WAY_FOR_A_CRASH:
        if words in hint:
            hint = hint.split(words, 1)[1]
    for words in _OTHER_WAY:
        hint = hint.split(words, 1)[0]
    return re.findall(r"`([^`]+)`", hint)


def follow_hints(
    refused: subprocess.CompletedProcess,
    *ran: str,
    steps: int = 8,
    by_hand: Callable[[str], bool] | None = None,
    before_fetch: Callable[[], None] | None = None,
) -> tuple[subprocess.CompletedProcess, list[str]]:
    """Follow `refused`'s hint as a user does: each command it names run as written, in order
    (patchkit's by patchkit_faulted, any other by bash); where one is refused, its own hint next. `ran`:
    the commands already run, the one refused last. Fails on a circle: a refusal that names a command
    run before it other than itself (a "then run it again" follows a step that changes the tree), or
    one refused again with the very words it was refused with before; and on a refusal that names no
    command, or a chain past `steps`. `by_hand`: does what a command the test cannot run does (a pip
    install, say), True when it did. `before_fetch`: run once before the first `patchkit fetch` (the
    index answers once the hint says to fetch). Returns the last patchkit command's result and every
    command run."""
    run, done = list(ran), refused
    refusals = {ran[-1]: " ".join(refused.stderr.split())} if ran else {}
    todo = _next_steps(refused, run)
    while todo:
        line = todo.pop(0)
        assert len(run) < steps, run
        run.append(line)
        words = shlex.split(line)
        if words[0] != "patchkit":
            if by_hand is None or not by_hand(line):
                subprocess.run(["bash", "-c", line], check=True)
            continue
        if words[1] == "fetch" and before_fetch is not None:
            before_fetch()
            before_fetch = None
        done = patchkit_faulted(*words[1:])
        if done.returncode == 2:
            said = " ".join(done.stderr.split())
            assert refusals.get(line) != said, f"a circle: {line} refused again as before, after {run}:\n{said}"
            refusals[line] = said
            todo = _next_steps(done, run)
    return done, run


def _next_steps(refused: subprocess.CompletedProcess, run: list[str]) -> list[str]:
    named = hint_commands(refused.stderr)
    assert named, f"refused, naming no command:\n{refused.stderr}"
    again = [line for line in named if line in run[:-1] and line != run[-1]]
    assert not again, f"a circle: {again} named again, after {run}:\n{refused.stderr}"
    return named
