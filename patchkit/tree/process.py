"""A worker's process: started in its own session, fed its request, waited for until it exits
(never until the end of its output), killed with its process group at the timeout or an interrupt.
Only a command that runs a worker loads this module (and subprocess, select, selectors)."""

from __future__ import annotations

import os
import select
import selectors
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import IO, cast


class TimedOut(Exception):
    """A worker past its time limit (its process group killed)."""


def run(
    command: list[str],
    stdin: str,
    timeout: float,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    *,
    stdout: bool = False,
) -> tuple[int, str]:
    """(exit status, error output) of a worker process (with `stdout`: its output instead); at the
    timeout (TimedOut raised) or an interrupt, its whole process group is killed. Every wait is
    bounded: the answer is the worker's exit, never the end of its output, which a process it
    started (a vLLM plugin's helper, a daemon in a session of its own) may hold open for ever."""
    status, out, errors = _run(command, stdin, timeout, env, cwd, stdout=stdout, stderr=not stdout)
    return status, out if stdout else errors


def run_with_errors(command: list[str], stdin: str, timeout: float) -> tuple[int, str, str]:
    """(exit status, output, the end of its error output) of a script, as `run` waits for it: a
    script that crashes says why on its error output's last line."""
    return _run(command, stdin, timeout, None, None, stdout=True, stderr=True)


def _run(
    command: list[str],
    stdin: str,
    timeout: float,
    env: dict[str, str] | None,
    cwd: str | None,
    *,
    stdout: bool,
    stderr: bool,
) -> tuple[int, str, str]:
    process = subprocess.Popen(
        command,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE if stdout else subprocess.DEVNULL,
        stderr=subprocess.PIPE if stderr else subprocess.DEVNULL,
        cwd=cwd or os.path.abspath(os.sep),  # a vllm/ in our cwd must not shadow the target's
        start_new_session=True,  # a timeout kills its children too
        env=env,
    )
    assert process.stdin is not None
    out, errors = _Output(keep_head=True), _Output(keep_head=False)
    outputs = {pipe: kept for pipe, kept in ((process.stdout, out), (process.stderr, errors)) if pipe is not None}
    try:
        _exchange(process, stdin.encode("utf-8"), outputs, time.monotonic() + timeout)
    except TimedOut:
        _kill_group(process)
        raise
    except BaseException:  # an interrupt (Ctrl-C, SIGTERM): no worker outlives patchkit
        _kill_group(process)
        raise
    finally:
        _close(process.stdin, *outputs)
    return process.returncode, out.text(), errors.text()


OUTPUT_LIMIT = 16 << 20  # a script's output kept (its answer); of error output, only the end
ERROR_TAIL = 64 << 10
POLL = 0.2  # seconds between two looks at a worker that neither writes nor exits
IDLE = 0.005  # the same where nothing tells its exit (no pidfd, its output ended): a short nap
DRAIN = 1 << 20  # what a worker that exited left in its pipe, read without waiting


class _Output:
    """What a worker wrote, bounded: the start (an answer on stdout) and its last ERROR_TAIL bytes (a
    verdict on its last line, after a flood), or only the end (error output)."""

    def __init__(self, *, keep_head: bool) -> None:
        self.keep_head, self.data, self.tail = keep_head, bytearray(), bytearray()

    def add(self, chunk: bytes) -> None:
        if self.keep_head:
            room = max(OUTPUT_LIMIT - len(self.data), 0)
            self.data += chunk[:room]
            self.tail += chunk[room:]
            del self.tail[:-ERROR_TAIL]
        else:
            self.data += chunk
            del self.data[:-ERROR_TAIL]

    def text(self) -> str:
        """The output kept; past OUTPUT_LIMIT, its end from a line's start follows the head on a line of its own."""
        tail = self.tail[self.tail.find(b"\n") + 1 :] if len(self.tail) == ERROR_TAIL else self.tail
        data = self.data + (b"\n" + tail if self.tail else b"")
        return data.decode("utf-8", "replace")


def _exchange(
    process: subprocess.Popen[bytes], request: bytes, outputs: dict[IO[bytes], _Output], deadline: float
) -> None:
    """Write `request` to the worker's stdin and keep what it writes on `outputs` until it exits
    (then what is already in the pipes, without waiting); TimedOut past `deadline`."""
    assert process.stdin is not None
    pending = memoryview(request)
    exit_watch = _exit_watch(process)
    with selectors.DefaultSelector() as selector, _closing(exit_watch):
        for output in outputs:
            selector.register(output, selectors.EVENT_READ)
        if exit_watch is not None:  # readable once the worker exits: no polling
            selector.register(exit_watch, selectors.EVENT_READ)
        if pending:
            selector.register(process.stdin, selectors.EVENT_WRITE)
        else:
            process.stdin.close()
        while not _exited(process):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimedOut
            ready = selector.select(min(remaining, POLL)) if selector.get_map() else _sleep(min(remaining, IDLE))
            for key, _ in ready:
                if key.fileobj == exit_watch:
                    continue  # its exit: seen at the loop's head
                if key.fileobj is process.stdin:
                    pending = _write_some(process.stdin, pending)
                    if not pending:
                        selector.unregister(process.stdin)
                        process.stdin.close()
                elif not _read_some(pipe := cast("IO[bytes]", key.fileobj), outputs[pipe]):  # its end: exit awaited
                    selector.unregister(pipe)
    for output, kept in outputs.items():
        _drain(output, kept)
    process.wait()  # it exited: reaped at once


def _exit_watch(process: subprocess.Popen[bytes]) -> int | None:
    """A descriptor readable once the worker exits (Linux's pidfd), or None where there is none."""
    try:
        return os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        return None


@contextmanager
def _closing(descriptor: int | None) -> Iterator[None]:
    try:
        yield
    finally:
        if descriptor is not None:
            os.close(descriptor)


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the worker exited, seen without reaping it: its process group (the leftover children
    of a plugin) is then killed while its id is surely still the worker's."""
    try:
        seen = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:  # reaped already
        return True
    if seen is None:
        return False
    with suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)  # what it left behind in its own session
    return True


def _sleep(seconds: float) -> list[tuple[selectors.SelectorKey, int]]:
    time.sleep(seconds)
    return []


def _write_some(stdin: IO[bytes], pending: memoryview) -> memoryview:
    """The request's rest after one write that cannot block (at most PIPE_BUF bytes to a writable pipe)."""
    try:
        written = os.write(stdin.fileno(), pending[: select.PIPE_BUF])
    except BrokenPipeError:  # the worker stopped reading: its exit says what happened
        return pending[:0]
    return pending[written:]


def _read_some(output: IO[bytes], kept: _Output) -> bool:
    """One read of a readable pipe into `kept`; False at its end."""
    chunk = os.read(output.fileno(), 65536)
    kept.add(chunk)
    return bool(chunk)


def _drain(output: IO[bytes], kept: _Output) -> None:
    """What the exited worker left in the pipe, read without blocking: another process holding its
    write end (a helper a plugin started) is never waited for."""
    os.set_blocking(output.fileno(), False)
    left = DRAIN
    with suppress(BlockingIOError, OSError):
        while left > 0:
            chunk = os.read(output.fileno(), min(65536, left))
            if not chunk:
                break
            kept.add(chunk)
            left -= len(chunk)


def _close(*pipes: IO[bytes] | None) -> None:
    for pipe in pipes:
        if pipe is not None:
            with suppress(OSError):
                pipe.close()


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the worker and its process group, and reap it (a process SIGKILL ends: a bounded wait)."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except OSError:
        process.kill()
    process.wait()
