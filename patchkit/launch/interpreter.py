"""Which Python a launch's `vllm` script runs, read as the kernel and `env` would start it, never
guessed: what cannot be told is a TargetError naming why (exit 4), not another interpreter.

The kernel takes a `#!` line's interpreter up to the first blank and passes the rest as ONE argument
(so `#!/usr/bin/env python3 -u` asks env for a program named "python3 -u"); `env -S` splits that
argument, and env then reads its own options and VAR=VALUE words before the program's name.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from patchkit.base.errors import TargetError, quoted
from patchkit.launch.values import read_head

SCRIPT_HEAD = 4096  # a console script's first lines: the interpreter pip wrote
KERNEL_SHEBANG = 256  # what the kernel reads of a #! line (BINPRM_BUF_SIZE): the rest is cut
_SHEBANG = re.compile(r"[ \t]*(?P<interpreter>[^ \t]*)[ \t]*(?P<argument>.*?)[ \t]*$")
# compiled on first use (re keeps it): start-up compiles none a run does not use
_ASSIGNMENT = r"^[A-Za-z_][A-Za-z0-9_]*="
# a cluster of Python's own options: flags without a value, then perhaps -W, -X or -m with its value
_PYTHON_CLUSTER = r"(?s)-(?P<flags>[bBdEIOPqRsSuv]*)(?:(?P<valued>[WXm])(?P<value>.*))?"
PIP_WRAPPER = b"'''exec' "  # the second line of pip's /bin/sh wrapper
HASH_PYCS = "--check-hash-based-pycs"  # Python's one long option with a value (no environment variable sets it)
HASH_MODES = ("default", "always", "never")
_ENV_CLEARS = ("-i", "-", "--ignore-environment")
_ENV_UNSETS = ("-u", "--unset")
HINT = "give --python /path/to/venv/bin/python (the interpreter that runs vLLM for this launch)"


def exec_search(program: str, path: str | None) -> str | None:
    """The file execvp (glibc's, which env and `run` use) starts for `program` under the launch's PATH
    `path` (None: no PATH at all, `env -i`: glibc's default /bin:/usr/bin): a name with a slash as it
    is, else each entry in turn, an empty one (`PATH=`, `PATH=:/x`) the working directory, as
    shutil.which does not; the first regular file executable by us (execvp passes over the others)."""
    entries = [""] if "/" in program else (os.defpath if path is None else path).split(os.pathsep)
    for entry in entries:
        candidate = os.path.join(entry, program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def cannot_tell(script: object, why: str) -> TargetError:
    return TargetError(f"patchkit cannot tell which Python runs {script}: {why}", hint=HINT)


def script_interpreter(script: Path, path: str | None = None) -> str:
    """The Python `script` runs (script_python)."""
    return script_python(script, path)[0]


def script_python(script: Path, path: str | None = None) -> tuple[str, list[str]]:
    """(the Python `script` runs, the interpreter options it runs it with): its shebang's interpreter
    (`env`'s program looked up on the launch's PATH `path`, None: it has none) and what follows it, or, for the `/bin/sh` wrapper pip
    writes when the venv's path cannot be a shebang, what its `exec` line names. TargetError when
    that is not a Python, or its options are not ones patchkit can pass on (python_options);
    RefusedByPython when Python would refuse them."""
    program, words = _script_words(script, path)
    return program, python_options(script, words)


def _script_words(script: Path, path: str | None) -> tuple[str, list[str]]:
    lines = read_head(script, SCRIPT_HEAD).split(b"\n")
    if not lines[0].startswith(b"#!"):
        raise cannot_tell(script, "it is not a script with a #! line (or not a regular file)")
    shebang = _kernel_reads(script, lines[0])
    match = _SHEBANG.match(shebang)
    interpreter, argument = (match["interpreter"], match["argument"]) if match else ("", "")
    if Path(interpreter).name == "env":
        program, options = _env_program(script, argument, path)
    elif Path(interpreter).name == "sh" and len(lines) > 1 and lines[1].startswith(PIP_WRAPPER):
        program, options = _pip_wrapper_program(script, lines[1])
    else:
        program, options = interpreter, [argument] if argument else []
    if not Path(program).name.startswith(("python", "pypy")):
        shown = quoted(shebang.strip())
        raise cannot_tell(script, f"its first line `#!{shown}` runs {quoted(program) or 'nothing'}, not a Python")
    return program, options


def _kernel_reads(script: Path, line: bytes) -> str:
    """What the kernel starts of a #! line: its first KERNEL_SHEBANG bytes, the rest cut; an interpreter
    whose name does not end within them is refused (exec fails: ENOEXEC), and so is it here."""
    if len(line) >= KERNEL_SHEBANG:
        kept = line[:KERNEL_SHEBANG]
        if not any(blank in kept[2:].lstrip(b" \t") for blank in (b" ", b"\t")):
            size = f"{'at least ' * (len(line) >= SCRIPT_HEAD)}{len(line):,} bytes"
            raise RefusedByPython(
                f"the kernel refuses to start {script}: its first line (#!) is {size} long, and the interpreter it "
                f"names does not end within the {KERNEL_SHEBANG} bytes the kernel reads, so vLLM never starts",
                hint="make its first line `#!` and the interpreter's path alone (as pip writes it: "
                "`#!/path/to/venv/bin/python`), or launch with `python -m vllm.entrypoints.cli.main`",
            )
        line = kept
    return line[2:].decode(errors="surrogateescape")


def python_options(script: Path, words: list[str]) -> list[str]:
    """`words`, the options a script's Python runs with before the script itself, read as Python reads
    them (read_python_options): its flag clusters (`-E`, `-sE`), its -X values (`-Xpycache_prefix=DIR`)
    and its --check-hash-based-pycs MODE (two words: env -S, pip's wrapper), passed on to each
    interpreter patchkit asks (-W's values are not: they change no import); anything else (`-m`,
    `-c`, a blank inside a word) cannot be told. RefusedByPython for a --check-hash-based-pycs Python
    refuses: in one word (a plain #! line passes all it holds as one: an unknown option), or without
    a mode next (it would take the script's path as the mode)."""
    modes: list[str] = []
    flags, xoptions, rest = read_python_options(words, modes)
    if rest and rest[0].startswith(HASH_PYCS):
        raise _refused(script, rest[0], _at(rest, 1))
    if rest:
        raise cannot_tell(
            script, f"its Python runs with the option {quoted(repr(rest[0]))}, which patchkit does not pass on"
        )
    return [*flags, *(f"-X{x}" for x in xoptions), *([HASH_PYCS, modes[-1]] if modes else [])]


def read_python_options(args: list[str], hash_pycs: list[str]) -> tuple[list[str], list[str], list[str]]:
    """A Python's own options (a `python` launch's, a script's #! line's) read as Python reads them: a
    cluster of flags, which may end in -W, -X or -m with its value attached or next. (Its flag
    clusters, each `-` and letters: -E, -sP...; its -X values, one of which may set where bytecode is
    read from; the rest, from `-m MODULE` on, or from the first word Python would not read as an
    option, or from an option that lacks its value.) -W changes no import and is not kept;
    `--check-hash-based-pycs MODE` is appended to `hash_pycs` (the last one counts)."""
    flags: list[str] = []
    xoptions: list[str] = []
    index = 0
    while index < len(args):
        if args[index] == HASH_PYCS and _at(args, index + 1) in HASH_MODES:
            hash_pycs.append(args[index + 1])
            index += 2  # its one long option with a value (exact, the value next: as CPython's getopt)
            continue
        cluster = re.compile(_PYTHON_CLUSTER).fullmatch(args[index])
        if cluster is None or not (cluster["flags"] or cluster["valued"]):
            break
        if cluster["flags"]:
            flags.append(f"-{cluster['flags']}")
        if cluster["valued"] is None:
            index += 1
            continue
        value, index = (cluster["value"], index + 1) if cluster["value"] else (_at(args, index + 1), index + 2)
        if value is None:
            return flags, xoptions, args[index - 2 :]  # the option that lacks its value, on
        if cluster["valued"] == "m":
            return flags, xoptions, ["-m", value, *args[index:]]
        xoptions += [value] if cluster["valued"] == "X" else []
    return flags, xoptions, args[index:]


def _at(args: list[str], index: int) -> str | None:
    return args[index] if index < len(args) else None


def _refused(script: Path, word: str, after: str | None) -> RefusedByPython:
    if word != HASH_PYCS:  # the kernel passes a #! line's options as one word
        why = f"its #! line gives Python {quoted(repr(word))} as one word, an option Python does not know"
    else:
        why = f"its Python takes {quoted(repr(after or 'the script path'))} as the mode of {HASH_PYCS}, not one of {', '.join(HASH_MODES)}"
    fix = f"drop it, or give it as two words through `#!/usr/bin/env -S /path/to/venv/bin/python {HASH_PYCS} MODE`"
    return RefusedByPython(f"Python refuses to start {script}: {why}, so vLLM never starts", hint=fix)


class RefusedByPython(TargetError):
    """A `vllm` script whose interpreter line Python (or the kernel) refuses: the launch fails at once, a finding."""


def _env_program(script: Path, argument: str, path: str | None) -> tuple[str, list[str]]:
    """The program `env ARGUMENT` starts, and its options: ARGUMENT is one word unless it is `-S ...`."""
    split = re.match(r"^(?:-S|--split-string(?:=|\s))(?P<rest>.*)$", argument, re.S)
    if split is None:
        if not argument or argument.startswith("-") or any(c.isspace() for c in argument):
            raise cannot_tell(script, f"`env {quoted(argument)}` starts no program by that one name")
        return _on_path(script, argument, path), []
    if "$" in split["rest"] or "\\" in split["rest"]:
        raise cannot_tell(script, "its `env -S` line expands variables or escapes")
    try:
        words = shlex.split(split["rest"])
    except ValueError as exc:
        raise cannot_tell(script, f"its `env -S` line cannot be split: {exc}") from None
    return _after_env_options(script, words, path)


def _after_env_options(script: Path, words: list[str], path: str | None) -> tuple[str, list[str]]:
    """env's own options and VAR=VALUE words skipped: the program (its PATH as env leaves it) and the
    words after it."""
    index = 0
    while index < len(words):
        word = words[index]
        if word in _ENV_CLEARS:
            path = None  # no PATH left: execvp's default
        elif word in _ENV_UNSETS:
            index += 1
            path = None if words[index : index + 1] == ["PATH"] else path
        elif word.startswith(("-u", "--unset=")):
            path = None if word in ("-uPATH", "--unset=PATH") else path
        elif word == "--":
            index += 1
            break
        elif re.compile(_ASSIGNMENT).match(word):
            if word.startswith("PATH="):
                path = word.removeprefix("PATH=")
        elif word.startswith("-"):
            raise cannot_tell(script, f"its `env -S` line has the option {quoted(word)}")
        else:
            break
        index += 1
    if index >= len(words):
        raise cannot_tell(script, "its `env -S` line names no program")
    return _on_path(script, words[index], path), words[index + 1 :]


def _on_path(script: Path, program: str, path: str | None) -> str:
    if "/" in program:
        return program
    found = exec_search(program, path)
    if found is None:
        raise cannot_tell(script, f"its `env` runs {quoted(program)}, which is not on the launch's PATH")
    return found


def _pip_wrapper_program(script: Path, line: bytes) -> tuple[str, list[str]]:
    try:
        wrapped = shlex.split(line.decode(errors="surrogateescape"))
    except ValueError:
        raise cannot_tell(script, "its /bin/sh wrapper's exec line cannot be read") from None
    if len(wrapped) < 2 or wrapped[0] != "exec":
        raise cannot_tell(script, "its /bin/sh wrapper's exec line names no program")
    ends = wrapped.index("$0") if "$0" in wrapped else len(wrapped)  # its options: the words before the script
    return wrapped[1], wrapped[2:ends]
