"""A fork server for `python -m patchkit` in the tests: one interpreter that has imported patchkit forks a
child per command, so a test pays a fork instead of an interpreter start-up and patchkit's imports.

The child is a real process run as `python -m patchkit` runs: its own pid, its stdin, stdout and stderr the
test's pipes, the test's environment and working directory, `sys.argv` and `sys.path[0]` as `-m` sets them,
and the interpreter's own exit (SystemExit, an uncaught exception's traceback, atexit, the flush of stdout,
death by a signal). What differs from a fresh interpreter is what is read once, before
the command runs: a command whose environment differs from the server's in a variable the interpreter's
start-up reads (`PYTHON*`, the locale) or the server's imports read (`warm_imports` records them) runs in a
real subprocess; but for a PYTHONPATH whose directories hold no module the server imported (nor a
sitecustomize): the fork puts them on sys.path where the interpreter would, so what the command imports finds
them as it would. Only the modules' teardown at exit is skipped (`run_and_exit`). The server starts with the
session's environment, never a test's, so no test's monkeypatching reaches it.

The same server runs `python -c CODE ARGS` (run_python_code: how the tests load the launch guard as vLLM
does) from an interpreter that imported only importlib.metadata, with the command's start-up environment.

    python tests/cli_server.py SOCKET [code]   # serve on SOCKET (the tests start it: helpers.run_cli)
"""

from __future__ import annotations

import array
import atexit
import gc
import importlib
import io
import json
import locale
import os
import pkgutil
import runpy
import selectors
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator, MutableMapping
from contextlib import suppress
from pathlib import Path
from typing import NoReturn

FDS = 3  # stdin, stdout, stderr
_LENGTH = struct.Struct("!I")
_STATUS = struct.Struct("!qq")  # (pid, 0) when it starts; (0, wait status) when it ends
_LOCALE = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE")
# What a fresh interpreter's site imports from a PYTHONPATH directory at start-up, imported by the server or not
_RUN_AT_START = ("sitecustomize", "usercustomize")


def start_up_environment(env: dict[str, str]) -> dict[str, str]:
    """The variables an interpreter reads once at start-up (its I/O encoding, flags, paths)."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON") or k in _LOCALE}


# --- the client (the tests' side) -----------------------------------------------------------------

_SESSION_ENV = dict(os.environ)  # as the session started, before any test's monkeypatch
SESSION_ENV = _SESSION_ENV
_server: _Server | None = None
# run_python_code's servers, by the start-up environment they were started with (another user's: its HOME)
_code_servers: dict[tuple[tuple[str, str], ...], _Server] = {}


class _Server:
    """The server process of this test session (one per xdist worker), started on first use."""

    def __init__(self, env: dict[str, str] = _SESSION_ENV, mode: str = "patchkit", user: int | None = None) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="pk-cli-"))  # short: a unix socket's path is at most 107 bytes
        self.socket = str(self.home / "s")
        self.env = env
        with (self.home / "server.log").open("wb") as log:
            if user is not None:  # its socket and answers are written there
                os.chown(self.home, user, user)
            self.process = subprocess.Popen(
                [*as_user(user), sys.executable, __file__, self.socket, mode],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 60
        while not os.path.exists(self.socket):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the CLI fork server did not start: {(self.home / 'server.log').read_text()}")
            time.sleep(0.01)
        self.imports_read = set(json.loads(Path(self.socket + ".read").read_text()))
        started = json.loads(Path(self.socket + ".started").read_text())
        self.imported = set(started["modules"]) | set(_RUN_AT_START)
        self.sys_path = set(started["path"])
        atexit.register(self.stop)

    def read_once(self, env: dict[str, str]) -> dict[str, str] | None:
        """What in `env` the command would read before it runs: at the interpreter's start-up, or at the
        import of a module the server imported (under the server's environment). None: all of it."""
        if ALL in self.imports_read:
            return None
        return {**start_up_environment(env), **{k: env[k] for k in self.imports_read if k in env}}

    def path_entries(self, env: dict[str, str], cwd: str) -> list[str] | None:
        """The sys.path entries `env`'s PYTHONPATH adds, as the interpreter makes them (absolute from `cwd`,
        the first of each kept), where the fork can add them: none names a directory of the server's path or
        holds a module the server imported (which the command would import from there). Else None."""
        if "PYTHONPATH" in _SESSION_ENV or {"PYTHONPATH", ALL} & self.imports_read:
            return None
        given = env["PYTHONPATH"].split(os.pathsep) if env["PYTHONPATH"] else []
        entries = list(dict.fromkeys(os.path.abspath(os.path.join(cwd, entry)) for entry in given))
        if self.sys_path.intersection(entries):  # the interpreter would keep its first place, not add it
            return None
        for entry in entries:
            try:
                names = os.listdir(entry)
            except FileNotFoundError:
                continue  # nothing there to shadow at the start; what appears later is found as a fresh one finds it
            except OSError:  # a zip file, a directory it cannot read: left to a fresh interpreter
                return None
            if any(name.split(".", 1)[0] in self.imported for name in names):
                return None
        return entries

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        shutil.rmtree(self.home, ignore_errors=True)


def run_patchkit(args: list[str], env: dict[str, str], cwd: Path | str | None, timeout: float):
    """`python -m patchkit ARGS` with `env` in `cwd`, its output captured as text: a fork of the server, or
    a real subprocess where the interpreter's start-up would differ. A subprocess.CompletedProcess."""
    argv = [sys.executable, "-m", "patchkit", *args]
    path = _fork_path(env, cwd)
    if path is None:
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    return _forked(argv, env, cwd, timeout, path)[1]


def run_patchkit_on(args: list[str], env: dict[str, str], fds: list[int], read: Callable[[], None]) -> int | None:
    """`python -m patchkit ARGS` with `env` in this directory as a fork of the server, its stdin, stdout and
    stderr the caller's `fds` (a terminal's), closed here once handed over; `read()` runs while it runs and
    returns when its output ended. Its exit code; None where a fork would start otherwise (`fds` left open)."""
    path = _fork_path(env, None)
    if path is None:
        return None
    assert _server is not None
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(_server.socket)
        body = json.dumps({"args": args, "env": env, "cwd": os.getcwd(), "path": path, "code": None}).encode()
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        connection.sendmsg([_LENGTH.pack(len(body)), body], rights)
        for fd in set(fds):
            os.close(fd)  # the command's own copies alone keep a terminal open: its end is the reader's EOF
        _read_exactly(connection, _STATUS.size)
        read()
        _, status = _STATUS.unpack(_read_exactly(connection, _STATUS.size))
    return os.waitstatus_to_exitcode(status)


class Running:
    """A command forked from the server that goes on running (start_patchkit): a pidfd to signal it by (never
    another process that took its pid once the server reaped it), and the connection its end comes on."""

    def __init__(self, pidfd: int, connection: socket.socket) -> None:
        self.pidfd, self.connection = pidfd, connection

    def signal(self, number: int) -> bool:
        """Send it `number`; False where it has ended."""
        try:
            signal.pidfd_send_signal(self.pidfd, number)
        except ProcessLookupError:
            return False
        return True

    def ended(self, wait: bool = True) -> int | None:
        """Its exit code (-N: killed by signal N), once it has ended (`wait`: waiting for that); else None."""
        if not wait and not self._readable():
            return None
        _, status = _STATUS.unpack(_read_exactly(self.connection, _STATUS.size))
        os.close(self.pidfd)
        self.connection.close()
        return os.waitstatus_to_exitcode(status)

    def _readable(self) -> bool:
        with selectors.DefaultSelector() as selector:
            selector.register(self.connection, selectors.EVENT_READ)
            return bool(selector.select(0))


def start_patchkit(args: list[str], env: dict[str, str], output: int) -> Running | None:
    """`python -m patchkit ARGS` with `env` in this directory as a fork of the server, started and left
    running: its stdout and stderr the file `output` (one offset, as `>out 2>&1`), SIGINT, SIGTERM and SIGHUP
    as a terminal's process has them. None where a fork would start otherwise."""
    path = _fork_path(env, None)
    if path is None:
        return None
    assert _server is not None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(_server.socket)
    request = {"args": args, "env": env, "cwd": os.getcwd(), "path": path, "code": None, "as_a_terminals": True}
    body = json.dumps(request).encode()
    rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, output, output]))]
    connection.sendmsg([_LENGTH.pack(len(body)), body], rights)
    header, ancillary, _, _ = connection.recvmsg(_STATUS.size, socket.CMSG_SPACE(array.array("i").itemsize))
    assert len(header) == _STATUS.size, "the CLI fork server went away"
    pidfds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            pidfds.frombytes(data[: len(data) - len(data) % pidfds.itemsize])
    return Running(pidfds[0], connection)


def run_python_code(
    code: str, args: list[str], env: dict[str, str], timeout: float, user: int | None = None
) -> subprocess.CompletedProcess:
    """`python -c CODE ARGS` with `env` in this directory, its output captured as text: a fork of a server
    that imported importlib.metadata alone, started with the command's start-up environment and HOME (which
    site reads for the user's site-packages). `user`: as that user (and group), from a server that user
    started (`setpriv`), so the interpreter is the one they start (this one's home may be unreadable to
    them: a venv's python falls back to the system's); the server is never forked as another user."""
    argv = [sys.executable, "-c", code, *args]
    start = {**start_up_environment(env), "HOME": env.get("HOME", "")}
    key = (*sorted(start.items()), ("", "" if user is None else str(user)))
    server = _code_server(key, env, user)
    if server is None or server.read_once(env) != server.read_once(server.env):
        return subprocess.run([*as_user(user), *argv], capture_output=True, text=True, env=env, timeout=timeout)
    return _forked(argv, env, None, timeout, [], server=server, code=code)[1]


def as_user(user: int | None) -> list[str]:
    """The command prefix that runs a command as `user` (uid and gid, no other group): none for this one."""
    return [] if user is None else ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups"]


def _code_server(key: tuple[tuple[str, str], ...], env: dict[str, str], user: int | None = None) -> _Server | None:
    if not hasattr(os, "pidfd_open"):
        return None
    if key not in _code_servers:
        _code_servers[key] = _Server(env, "code", user)
    return _code_servers[key]


def run_patchkit_with_pid(
    args: list[str], env: dict[str, str], cwd: Path | str | None, timeout: float
) -> tuple[int, subprocess.CompletedProcess]:
    """run_patchkit, and the pid of the process that ran the command (what an exec keeps)."""
    argv = [sys.executable, "-m", "patchkit", *args]
    path = _fork_path(env, cwd)
    return _fresh(argv, env, cwd, timeout) if path is None else _forked(argv, env, cwd, timeout, path)


def forked_as_the_session(env: dict[str, str], cwd: Path | str | None) -> bool:
    """Whether run_patchkit forks a command with `env` from the server as it is: no start-up of its own, no
    PYTHONPATH entry to add, and nothing the fork reads again (READ_AGAIN) other than the session's: what
    the server's imports read, they read as `env` says."""
    again = any(env.get(name) != _SESSION_ENV.get(name) for name in READ_AGAIN)
    return not again and _fork_path(env, cwd) == []


def _fork_path(env: dict[str, str], cwd: Path | str | None) -> list[str] | None:
    """The entries a fork of the server (started on first use) puts after sys.path[0] to start as a command
    with `env` would start ([] but for its PYTHONPATH); None where it would start otherwise: a fresh one.
    Where there are no pidfds (not Linux), the server cannot see its commands end: every one is fresh."""
    global _server
    if not hasattr(os, "pidfd_open"):
        return None
    if _server is None:
        _server = _Server()
    path: list[str] | None = []
    if env.get("PYTHONPATH") != _SESSION_ENV.get("PYTHONPATH"):
        path = _server.path_entries(env, os.path.abspath(cwd or os.getcwd()))
        env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    if path is None or _server.read_once(env) != _server.read_once(_SESSION_ENV):
        return None
    return path


def _forked(
    argv: list[str],
    env: dict[str, str],
    cwd: Path | str | None,
    timeout: float,
    path: list[str],
    server: _Server | None = None,
    code: str | None = None,
) -> tuple[int, subprocess.CompletedProcess]:
    """`argv` (python -m patchkit ..., or python -c `code` ... on a code server) as a fork of the server,
    `path` after its sys.path[0]: (its pid, its CompletedProcess)."""
    server = server or _server
    assert server is not None
    args = argv[3:]
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.connect(server.socket)
        request = {"args": args, "env": env, "cwd": os.path.abspath(cwd or os.getcwd()), "path": path}
        body = json.dumps({**request, "code": code}).encode()
        connection.sendmsg(
            [_LENGTH.pack(len(body)), body],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [0, out_write, err_write]))],
        )
        os.close(out_write)
        os.close(err_write)
        pid, _ = _STATUS.unpack(_read_exactly(connection, _STATUS.size))
        try:
            out, err = _read_both(out_read, err_read, time.monotonic() + timeout)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            raise subprocess.TimeoutExpired(argv, timeout) from None
        _, status = _STATUS.unpack(_read_exactly(connection, _STATUS.size))
    return pid, subprocess.CompletedProcess(argv, os.waitstatus_to_exitcode(status), _text(out), _text(err))


def _fresh(
    argv: list[str], env: dict[str, str], cwd: Path | str | None, timeout: float
) -> tuple[int, subprocess.CompletedProcess]:
    """`argv` in a fresh interpreter: (its pid, what subprocess.run would return)."""
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd) as process:
        try:
            out, err = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    return process.pid, subprocess.CompletedProcess(argv, process.returncode, out, err)


def _read_exactly(connection: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = connection.recv(size - len(data))
        if not chunk:
            raise RuntimeError("the CLI fork server went away")
        data += chunk
    return data


def _read_both(out_read: int, err_read: int, deadline: float) -> tuple[bytes, bytes]:
    """Both pipes to their end (as Popen.communicate reads them), closed after."""
    chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
    with selectors.DefaultSelector() as selector:
        for fd in chunks:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("patchkit", 0)
            for key, _ in selector.select(left):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    selector.unregister(key.fd)
    for fd in chunks:
        os.close(fd)
    return b"".join(chunks[out_read]), b"".join(chunks[err_read])


def _text(data: bytes) -> str:
    """As subprocess's text mode decodes: the locale's encoding, universal newlines."""
    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


# --- the server ---------------------------------------------------------------------------------


def serve(path: str) -> None:
    """Accept commands on the unix socket `path` until the test session that started us is gone. Each
    command is one fork of this process; its end is seen on its pidfd and its wait status sent back."""
    parent = os.getppid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # the client connects once the path exists: listening by then
    running: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (the command's pid, its client)
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        while os.getppid() == parent:
            for key, _ in selector.select(1.0):
                if key.fileobj is not listener:
                    _ended(key.fd, running, selector)
                    continue
                connection, _ = listener.accept()
                if _started(connection, running, selector, listener):
                    return  # in the command's process
    for _, connection in running.values():
        connection.close()


def _started(
    connection: socket.socket,
    running: dict[int, tuple[int, socket.socket]],
    selector: selectors.BaseSelector,
    listener: socket.socket,
) -> bool:
    """Fork the command `connection` asks for and tell the client its pid. True in the command's
    process, set up to run it (the server's sockets and pidfds closed); False in the server."""
    request, fds = _receive(connection)
    pid = os.fork()
    if pid == 0:
        selector.close()
        listener.close()
        for pidfd, (_, other) in running.items():
            os.close(pidfd)
            other.close()
        connection.close()
        _become_the_command(request, fds)
        return True
    for fd in fds:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    running[pidfd] = (pid, connection)
    selector.register(pidfd, selectors.EVENT_READ)
    with suppress(OSError):  # a client gone: its command still runs to its end and is waited for
        if "as_a_terminals" in request:  # start_patchkit's client signals it by its pidfd
            connection.sendmsg(
                [_STATUS.pack(pid, 0)], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [pidfd]))]
            )
        else:
            connection.sendall(_STATUS.pack(pid, 0))
    return False


def _ended(pidfd: int, running: dict[int, tuple[int, socket.socket]], selector: selectors.BaseSelector) -> None:
    """A command's process ended: waited for (its CPU time counts in the session's: time -v, rusage),
    its wait status sent to its client."""
    selector.unregister(pidfd)
    os.close(pidfd)
    pid, connection = running.pop(pidfd)
    _, status = os.waitpid(pid, 0)
    with suppress(OSError), connection:  # a client gone (its timeout) needs no answer
        connection.sendall(_STATUS.pack(0, status))


def _receive(connection: socket.socket) -> tuple[dict, list[int]]:
    header, ancillary, _, _ = connection.recvmsg(_LENGTH.size, socket.CMSG_SPACE(FDS * array.array("i").itemsize))
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    (length,) = _LENGTH.unpack(header)
    body = b""
    while len(body) < length:
        body += connection.recv(length - len(body))
    return json.loads(body), list(fds)


def _become_the_command(request: dict, fds: list[int]) -> None:
    """This process as `python -m patchkit ARGS` (or `python -c CODE ARGS`) would start: fds 0-2, environment,
    cwd, argv."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    _fresh_standard_streams()
    if "as_a_terminals" in request:  # a CI runner's background job or `nohup` may have started us with these ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    if request["code"] is not None:
        sys.path[0] = ""  # -c puts the working directory first, as ''
        sys.argv = ["-c", *request["args"]]
        sys.modules["__main__"] = types.ModuleType("__main__")  # -c runs the code in a __main__ of its own
        sys.modules["__main__"].__dict__["__code__"] = request["code"]
        return
    sys.path[0] = os.getcwd()  # -m puts the working directory first
    sys.path[1:1] = request["path"]  # then PYTHONPATH's entries
    sys.argv = ["-m", *request["args"]]  # runpy makes argv[0] patchkit/__main__.py, as -m does
    transaction = sys.modules["patchkit.engine.transaction"]  # imported in warm_imports, where reads are seen
    transaction._faults = transaction._Faults()  # READ_AGAIN


def _fresh_standard_streams() -> None:
    """sys.stdin, stdout and stderr made anew on fds 0-2, as the interpreter's start-up makes them (their
    buffering and seekability are the new files'); encoding and errors as the server's, which started with
    the command's start-up environment."""
    unbuffered = sys.stdout.write_through  # -u or PYTHONUNBUFFERED
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        old = getattr(sys, name)
        binary = open(fd, "rb" if fd == 0 else "wb", buffering=0 if unbuffered and fd else -1, closefd=False)  # noqa: SIM115
        raw = getattr(binary, "raw", binary)
        raw.name = f"<{name}>"
        stream = io.TextIOWrapper(
            binary,
            encoding=old.encoding,
            errors=old.errors,
            newline="\n",
            line_buffering=not unbuffered and (fd == 2 or raw.isatty()),
            write_through=unbuffered,
        )
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def run_and_exit(code_to_run: str | None = None) -> NoReturn:
    """Run patchkit as `python -m patchkit` runs it, and end as the interpreter ends: SystemExit's code
    (a message printed: 1), an uncaught exception's traceback (1), KeyboardInterrupt by SIGINT, then
    threads joined, atexit, stdout flushed (a failed flush: 120). Only the modules' teardown is skipped:
    after a fork it would copy every page of the server's heap (half the child's CPU) to free it."""
    code = 0
    interrupted = False
    try:
        if code_to_run is None:
            runpy.run_module("patchkit", run_name="__main__", alter_sys=True)
        else:
            exec(compile(code_to_run, "<string>", "exec"), sys.modules["__main__"].__dict__)
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except BaseException as error:
        interrupted = isinstance(error, KeyboardInterrupt)
        if code_to_run is not None and error.__traceback__ is not None:  # python -c's starts in the code
            error.with_traceback(error.__traceback__.tb_next)
        sys.excepthook(type(error), error, error.__traceback__)
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's wait for non-daemon threads
    atexit._run_exitfuncs()
    code = _flush_as_at_exit(code)
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)


def _exit_code(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _flush_as_at_exit(code: int) -> int:
    """stdout, then stderr, flushed as Py_Finalize flushes them: stdout failing is exit 120."""
    try:
        sys.stdout.flush()
    except Exception as error:
        with suppress(Exception):
            print(f"Exception ignored in: {sys.stdout!r}", file=sys.stderr)
            traceback.print_exception(error, file=sys.stderr)
        code = 120
    with suppress(Exception):
        sys.stderr.flush()
    return code


# What patchkit imports inside functions (the `# lazy:` imports) and rich's modules that its output loads.
THIRD_PARTY = (
    "email.parser",
    "filelock",
    "importlib.metadata",
    "logging",
    "pypi_simple",
    "requests",
    "requests.adapters",
    "rich.box",
    "rich.console",
    "rich.pretty",
    "rich.progress",
    "rich.syntax",
    "rich.table",
    "rich.text",
    "xml.etree.ElementTree",
    "yaml",
)


# Not imported in the server, nor what imports them (patchkit.maintainer): GitPython runs `git version` at its
# import, pip's modules compute their directories from the environment, Ray is optional.
NOT_WARMED = ("git", "pip", "ray")
ALL = "*"  # the whole environment was read (iterated, copied)
# Read at import by patchkit.engine.transaction (its test-only fault plan), and read again in each command's
# process (_become_the_command), as crash_trials' forked trials do.
READ_AGAIN = ("PATCHKIT_FAULT_AFTER", "PATCHKIT_FAULT_MODE")


class _EnvironmentReads(MutableMapping[str, str]):
    """os.environ while the server imports: which variables the imports read. Kept by a module that bound
    os.environ itself, so it passes everything on."""

    def __init__(self, real: MutableMapping[str, str]) -> None:
        self.real = real
        self.read: set[str] = set()

    def __getitem__(self, key: str) -> str:
        self.read.add(key)
        return self.real[key]

    def __setitem__(self, key: str, value: str) -> None:
        self.real[key] = value

    def __delitem__(self, key: str) -> None:
        del self.real[key]

    def __iter__(self) -> Iterator[str]:
        self.read.add(ALL)
        return iter(self.real)

    def __len__(self) -> int:
        return len(self.real)

    def copy(self) -> dict[str, str]:
        self.read.add(ALL)
        return dict(self.real)


def warm_imports() -> set[str]:
    """Import what a command imports, once, in the server (not the optional Ray, nor what runs as __main__).
    The environment variables those imports read: a command whose own differ is not forked."""
    reads = _EnvironmentReads(os.environ)
    os.environ = reads  # type: ignore[assignment]  # noqa: B003  # os.getenv reads it too
    sys.modules.update(dict.fromkeys(NOT_WARMED))  # None: their import fails, and so the importer's
    try:
        _import_all()
    finally:
        os.environ = reads.real  # type: ignore[assignment]  # noqa: B003
        for name in NOT_WARMED:
            del sys.modules[name]
    return reads.read - set(READ_AGAIN)


def _import_all() -> None:
    for module in pkgutil.walk_packages(importlib.import_module("patchkit").__path__, "patchkit."):
        if not module.name.startswith(("patchkit.fleet", "patchkit._target", "patchkit.__main__")):
            with suppress(ImportError):  # NOT_WARMED: the command imports what it needs
                importlib.import_module(module.name)
    for name in THIRD_PARTY:
        with suppress(ImportError):
            importlib.import_module(name)
    gc.freeze()  # the children's collections leave these objects alone: fewer pages copied after the fork


def warm_code_imports() -> set[str]:
    """What `python -c` loading plugins as vLLM does imports first (importlib.metadata: half its CPU), and the
    environment variables that import read."""
    reads = _EnvironmentReads(os.environ)
    os.environ = reads  # type: ignore[assignment]  # noqa: B003
    try:
        importlib.import_module("importlib.metadata")
    finally:
        os.environ = reads.real  # type: ignore[assignment]  # noqa: B003
    gc.freeze()
    return reads.read


if __name__ == "__main__":
    sys.path[0] = os.getcwd()  # not tests/: what -m puts first
    mode = sys.argv[2]
    read = warm_code_imports() if mode == "code" else warm_imports()
    Path(sys.argv[1] + ".read").write_text(json.dumps(sorted(read)))
    started = {"modules": sorted({name.split(".")[0] for name in sys.modules}), "path": sys.path[1:]}
    Path(sys.argv[1] + ".started").write_text(json.dumps(started))
    serve(sys.argv[1])
    if sys.argv[0] == "-m":  # the command's process
        run_and_exit()
    if sys.argv[0] == "-c":
        run_and_exit(sys.modules["__main__"].__dict__.pop("__code__"))
