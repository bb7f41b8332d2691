"""The click layer: the command group, exit-code mapping, nothing else."""

from __future__ import annotations

import atexit
import codecs
import gc
import importlib
import io
import os
import stat
import sys
import threading
from collections.abc import Callable, Iterable
from contextlib import redirect_stderr, redirect_stdout, suppress
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, NoReturn, Protocol, TextIO, TypeVar

from patchkit.base.values import FrozenValue, frozen

# A run keeps nearly all its objects to the end, so collecting every 700 allocations walks them
# again and again (~40 ms of a large dry run); every 200,000 (as mypy sets it) it seldom collects.
# Set before click is imported: importing it and the commands is a fifth of those collections. The
# console script's cli.start sets it first; here for a process that imports this module alone (fleet's agents).
GC_THRESHOLD = (200_000, 30, 30)
gc.set_threshold(*GC_THRESHOLD)

import click  # noqa: E402

from patchkit import __version__  # noqa: E402
from patchkit.base import signals  # noqa: E402
from patchkit.base.enums import OutputFormat  # noqa: E402
from patchkit.base.errors import (  # noqa: E402
    BROKEN_PIPE,
    CHECK_FAILED,
    INTERNAL_ERROR,
    INTERRUPTED,
    OK,
    OutputUnwritable,
    PatchkitError,
    exit_code_for,
)
from patchkit.base.options import CHOSEN_FORMAT  # noqa: E402
from patchkit.cli import percommand  # noqa: E402
from patchkit.cli.helpformat import HelpContext  # noqa: E402

if TYPE_CHECKING:  # pragma: no cover
    from patchkit.base.enums import Outcome
    from patchkit.cli.ui.run import Run

T = TypeVar("T")


class CommandResult(Protocol):
    """What a command returns (ApplyResult, PreflightResult...): its outcome, maybe an `error`."""

    @property
    def outcome(self) -> Outcome: ...


EXIT_CODES = (
    ("0", "ok"),
    ("1", "a check failed (conflict, verification failure, drift, partial state)"),
    ("2", "usage or bad input (malformed diff, bad option, unreadable manifest)"),
    ("3", "no patch set for this vLLM version"),
    ("4", "target problem (vLLM not found, not writable, sources unobtainable)"),
    ("70", "internal error (a bug in patchkit: please report it)"),
    ("130", "interrupted (143 SIGTERM, 129 SIGHUP)"),
    ("141", "the reader of the output went away (a closed pipe)"),
)


@frozen
class Listed(FrozenValue):
    """A command as `patchkit --help` lists it, known without importing its module: the module
    is imported when the command runs or its own --help is asked."""

    module: str
    section: str
    help: str  # the first paragraph of the command's docstring, whole (a test holds them equal)


USE, LAUNCH, BUILD, MAINTAIN = "Use", "Launch", "Build and fleets", "Maintain"
SECTIONS = (USE, LAUNCH, BUILD, MAINTAIN)
_COMMANDS = "patchkit.cli.commands."

COMMANDS = {
    "status": Listed(
        _COMMANDS + "status", USE, "Where vLLM is, its version, the patch set chosen and each patch's state."
    ),
    "apply": Listed(
        _COMMANDS + "apply",
        USE,
        "Apply the patch series for the target's vLLM: all files or none, verified, recorded.",
    ),
    "verify": Listed(
        _COMMANDS + "verify",
        USE,
        "Run the checks on the patched files: as they are, or as `apply` would leave them.",
    ),
    "revert": Listed(_COMMANDS + "revert", USE, "Restore the stock files byte-for-byte."),
    "list": Listed(
        _COMMANDS + "listing", USE, "The library: its sets, the releases each covers, each patch's description."
    ),
    "diff": Listed(
        _COMMANDS + "diff", USE, "Print the patch series for the target's vLLM version (highlighted in a terminal)."
    ),
    "recover": Listed(
        _COMMANDS + "recover",
        USE,
        "Roll back a transaction that a crash left unfinished (other commands do this first too).",
    ),
    "fetch": Listed(
        _COMMANDS + "fetch",
        USE,
        "Fetch the stock sources of vllm==VERSION from the package index pip is configured with.",
    ),
    "preflight": Listed(
        _COMMANDS + "preflight",
        LAUNCH,
        "Check a vLLM launch command before anything loads: every fault in one run.",
    ),
    "run": Listed(
        _COMMANDS + "run",
        LAUNCH,
        "Preflight a vLLM launch (static checks), then become it (exec: same PID, signals, exit status).",
    ),
    "wheel": Listed(
        _COMMANDS + "wheel",
        BUILD,
        "Build the patched wheel of a stock vLLM wheel (a file, or vllm==VERSION from the index).",
    ),
    "fleet": Listed(
        _COMMANDS + "fleet", BUILD, "status, apply, verify or revert on every alive node of a Ray cluster."
    ),
    "workspace": Listed(
        _COMMANDS + "workspace",
        MAINTAIN,
        "Make DIR (default ./vllm-VERSION-workspace) a git repository to work on VERSION's series.",
    ),
    "refresh": Listed(
        _COMMANDS + "refresh", MAINTAIN, "Write a workspace's changes back into the library as its release's diffs."
    ),
    "port": Listed(
        _COMMANDS + "port",
        MAINTAIN,
        "Carry the set from release V1 to V2 by a three-way merge per file (`git merge-file`).",
    ),
}


def docs_root() -> str:
    """Where README.md and docs/ are: patchkit/_docs in a wheel (hatch_build.py), else the checkout
    (os.path: pathlib would load urllib into every --help)."""
    package = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    packaged = os.path.join(package, "_docs")
    return packaged if os.path.isdir(packaged) else os.path.dirname(package)


class ShortOptionsFirst(click.Command):
    """A command whose parser takes `-q` as the short option it is at once. click tries it as a
    long option first, and that miss builds a NoSuchOption that imports difflib for its close
    matches (~7 M instructions: 1.5% of a quiet dry run); what is parsed is the same."""

    def make_parser(self, ctx: click.Context) -> Any:
        parser = super().make_parser(ctx)
        process = parser._process_opts

        def process_opts(arg: str, state: Any) -> None:
            if arg[:2] in parser._opt_prefixes or ctx.token_normalize_func or arg.partition("=")[0] in parser._long_opt:
                process(arg, state)
            else:  # what click's _process_opts does once the long match has failed
                parser._match_short_opt(arg, state)

        parser._process_opts = process_opts  # type: ignore[method-assign]
        return parser


class PatchkitGroup(click.Group):
    """Lists the commands from COMMANDS, loading a command's module only when it runs or shows
    its own help (click's lazy group), and turns errors into exit codes. Its help and each
    command's is wrapped at spaces only (HelpContext)."""

    context_class = HelpContext

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context | None, name: str) -> click.Command | None:
        listed = COMMANDS.get(name)
        if listed is None:
            return None
        command: click.Command = importlib.import_module(listed.module).command
        command.context_class = HelpContext
        if type(command) is click.Command:  # not fleet's group: its own commands parse as click does
            command.__class__ = ShortOptionsFirst
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """By section, each command's whole line (wrapped to the terminal, never cut), in one column."""
        width = max(map(len, COMMANDS))
        for section in SECTIONS:
            with formatter.section(section):
                formatter.write_dl(
                    [(name.ljust(width), c.help) for name, c in COMMANDS.items() if c.section == section]
                )

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Exit codes"):
            formatter.write_dl(EXIT_CODES)
        formatter.write_paragraph()  # the path whole, never wrapped: it is copied
        readme = os.path.join(docs_root(), "README.md")
        line = f"Docs: {readme} (and docs/ beside it)"
        if len(line) > formatter.width:  # a terminal would cut it mid-word: the path on a line of its own
            line = f"Docs (README.md, and docs/ beside it):\n  {readme}"
        formatter.write(line + "\n")

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            name, command, rest = super().resolve_command(ctx, args)
        except click.exceptions.NoSuchCommand as exc:  # click offers the group's loaded commands: none here
            raise click.exceptions.NoSuchCommand(exc.command_name, possibilities=COMMANDS, ctx=ctx) from None
        ctx.meta[INVOKED] = (name, command, list(rest))  # a copy: parsing consumes the list
        return name, command, rest

    def invoke(self, ctx: click.Context) -> None:
        """The one exit path: a command returns a result (its outcome, maybe an error to report)
        or raises a PatchkitError; either way its exit code is decided here, and the run's
        machine-readable document (ui.Run) is printed here, whatever the outcome."""
        _replace_what_streams_cannot_encode()
        _guard_output_streams()
        signals.new_run()
        run = _ui().begin_run()
        code = None
        try:
            with signals.handled():  # SIGTERM and SIGHUP roll back and exit as Ctrl-C does
                try:
                    code = _command_exit_code(super().invoke, ctx, run)
                except click.ClickException as exc:  # a usage error click found: it prints it, exit 2
                    usage = _not_taken(exc) if isinstance(exc, click.NoSuchOption) else exc
                    run.failed(usage.format_message(), _usage_hint(usage))
                    _finish(ctx, run, usage.exit_code)
                    raise usage from None
                code = _finish_unless_interrupted(ctx, run, code)
        except KeyboardInterrupt as exc:  # a signal on the way out: a second as the first was caught, or late
            if code is None:  # the run was not shown yet
                _report(run, *signals.interrupted_report())
                code = _finish(ctx, run, getattr(exc, "exit_code", INTERRUPTED))
        if code != OK:
            ctx.exit(code)


def _ui() -> SimpleNamespace:
    """The console and the run's document, loaded once a command runs."""
    # lazy: `--help` never loads the UI
    from patchkit.cli.ui import console, run

    return SimpleNamespace(UI=console.UI, begin_run=run.begin_run, finish_run=run.finish_run)


INVOKED = "patchkit.invoked"  # ctx.meta: the command's name, the command and its arguments


def _command_exit_code(invoke: Callable[[click.Context], Any], ctx: click.Context, run: Run) -> int:
    """Runs the command; its result or error, mapped to an exit code (click's own errors pass)."""
    try:
        return _exit_code(invoke(ctx), run)
    except OutputUnwritable as exc:  # before PatchkitError: reporting it must not write where it failed
        return _output_unwritable(exc, run)
    except PatchkitError as exc:
        return _failed(exc, run)
    except (click.exceptions.Exit, click.ClickException, click.Abort):
        raise
    except KeyboardInterrupt as exc:  # Ctrl-C, SIGTERM or SIGHUP (signals.Interrupted)
        return _interrupted(exc, run)
    except BrokenPipeError:
        return _stdout_gone()
    except Exception as exc:  # a bug: one line for the user, the traceback on request
        wrapped = signals.interrupt_within(exc)
        if wrapped is not None:  # Python wrapped the signal's raise (an import's __set_name__): still the signal
            return _interrupted(wrapped, run)
        if os.environ.get("PATCHKIT_DEBUG"):
            raise
        _report(
            run,
            f"internal error: {type(exc).__name__}: {exc}",
            "this is a patchkit bug; rerun with PATCHKIT_DEBUG=1 for the traceback and report it",
        )
        return INTERNAL_ERROR
    except BaseException as exc:  # a group of a library's holding a signal's raise (a double Ctrl-C)
        grouped = signals.grouped_interrupt(exc)
        if grouped is None:
            raise
        return _interrupted(grouped, run)


def _interrupted(exc: BaseException, run: Run) -> int:
    signals.ignore_more()
    _report(run, *signals.interrupted_report())
    return int(getattr(exc, "exit_code", INTERRUPTED))


def _finish(ctx: click.Context, run: Run, code: int) -> int:
    """The run's document, in the format the command line chose."""
    name = ctx.meta.get(INVOKED, (None,))[0]
    fmt = OutputFormat.JSON if run.document is not None else _chosen_format(ctx)
    try:
        _ui().finish_run(run, fmt=fmt, command=name, exit_code=code)
        sys.stdout.flush()  # here, not at exit where a failure could only be a Python warning
    except BrokenPipeError:
        return _stdout_gone()
    except OutputUnwritable as exc:
        return _output_unwritable(exc, run)
    return code


def _output_unwritable(error: OutputUnwritable, run: Run | None) -> int:
    """Our own output failed (its stream now points at devnull): said on stderr if stderr works,
    with what the run had put in place."""
    try:
        _report(run, error.message, error.hint, note=run.written if run is not None else None)
        sys.stderr.flush()
    except (OutputUnwritable, OSError):  # stderr failed too: the exit code alone says it
        pass
    return error.exit_code


def _finish_unless_interrupted(ctx: click.Context, run: Run, code: int) -> int:
    """_finish; an interrupt while it prints still ends with what the target holds and the signal's code."""
    try:
        return _finish(ctx, run, code)
    except KeyboardInterrupt as exc:
        signals.ignore_more()
        _ui().UI().error(*signals.interrupted_report())
        return getattr(exc, "exit_code", INTERRUPTED)


def _chosen_format(ctx: click.Context) -> str:
    """The command's --format as click reads the command line, resiliently (for a usage error:
    up to the option click could not read); "text" when none or no command."""
    name, command, args = ctx.meta.get(INVOKED, (None, None, []))
    if command is None or not any(p.name == "fmt" for p in command.params):
        return OutputFormat.TEXT
    if CHOSEN_FORMAT in ctx.meta:  # click read it for the command (options.format_option)
        chosen: str = ctx.meta[CHOSEN_FORMAT]
        return chosen
    try:
        with command.make_context(name, list(args), parent=ctx, resilient_parsing=True) as seen:
            return seen.params.get("fmt") or OutputFormat.TEXT
    except click.ClickException:
        return OutputFormat.TEXT


def _not_taken(exc: click.NoSuchOption) -> click.NoSuchOption:
    """An option the command does not take, said with the few commands that take it (imported
    only here, on the way out): `status has no --dry-run option (apply, revert, refresh take it).`"""
    context = exc.ctx
    if context is None or context.parent is None:  # patchkit's own options
        return exc
    said = f"{context.command_path.partition(' ')[2]} has no {exc.option_name} option"
    top_level = context.parent.parent is None  # not `fleet status`: its options are fleet's
    name = context.info_name
    takers = [other for other in COMMANDS if top_level and other != name and exc.option_name in _options_of(other)]
    if 0 < len(takers) <= FEW_TAKERS:  # a short line: which commands it belongs to
        said += f" ({', '.join(takers)} take{'s' if len(takers) == 1 else ''} it)"
    # another command's option, spelled right: a near name of this one's means something else
    # (`fetch --format` is not `--force`)
    possibilities = None if takers else exc.possibilities
    return click.NoSuchOption(exc.option_name, said + ".", possibilities, context)


FEW_TAKERS = 3  # an option more commands take (--format, --patch) is said alone


def _options_of(name: str) -> set[str]:
    command = PatchkitGroup().get_command(None, name)
    return {spelled for p in command.params for spelled in (*p.opts, *p.secondary_opts)} if command else set()


def _usage_hint(exc: click.ClickException) -> str | None:
    context = getattr(exc, "ctx", None)
    return f"`{context.command_path} --help` lists its options" if context is not None else None


def _stdout_gone() -> int:
    """A reader that stopped early (`| head`): end quietly, as rich does, with stdout pointed at
    devnull so that the flush at exit does not fail again."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return BROKEN_PIPE


class _GuardedStream:
    """stdout or stderr, whose write failure (ENOSPC, EIO; not EPIPE: a reader gone, handled apart)
    is an OutputUnwritable (exit 4), never an internal error; the stream then writes to devnull so
    that nothing at exit fails again."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream, self._name = stream, name

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._stream, attribute)

    def write(self, text: str) -> int:
        if isinstance(text, str) and not text:
            return 0  # click probes with an empty write, and would swallow the failure
        return self._guarded(self._stream.write, text)

    def writelines(self, lines: Iterable[str]) -> None:
        return self._guarded(self._stream.writelines, lines)

    def flush(self) -> None:
        return self._guarded(self._stream.flush)

    def _guarded(self, operation: Callable[..., T], *args: object) -> T:
        try:
            return operation(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            _point_at_devnull(self._stream)
            raise OutputUnwritable(
                f"cannot write to {self._name}: {exc.strerror or exc}",
                hint=f"give {self._name} somewhere it can be written (a disk with room, a live terminal)",
            ) from None


def _point_at_devnull(stream: TextIO) -> None:
    with suppress(OSError, ValueError, io.UnsupportedOperation):
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())


def _guard_output_streams() -> None:
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, _GuardedStream):
            setattr(sys, name, _GuardedStream(stream, name))


def _give_closed_streams_a_sink() -> None:
    """Started with stdout or stderr closed (`patchkit status >&-`), Python has None there: write
    to devnull instead, so that what a command prints cannot turn into an internal error."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 - lives as long as the process


ESCAPE_UNENCODABLE = "patchkit-escape"


def _replace_what_streams_cannot_encode() -> None:
    """A path the output encoding cannot hold (PYTHONIOENCODING=ascii, a non-UTF-8 locale, a
    non-UTF-8 file name) is printed escaped (`\\xe9`), as Python's own stderr does, never a crash.
    A stream that writes file-name bytes as they are (surrogateescape) keeps doing so."""
    codecs.register_error(ESCAPE_UNENCODABLE, _surrogateescape_else_backslash)
    for stream in (sys.stdout, sys.stderr):
        errors = getattr(stream, "errors", None)
        if errors in ("strict", "surrogateescape") and hasattr(stream, "reconfigure"):
            # a Ctrl-C inside reconfigure leaves the stream without an encoder: nothing more could
            # be written to it, the interrupt's own line included (exit 4, nothing said)
            with signals.deferred():
                stream.reconfigure(errors="backslashreplace" if errors == "strict" else ESCAPE_UNENCODABLE)


def _surrogateescape_else_backslash(error: UnicodeError) -> tuple[str | bytes, int]:
    """A file name's undecodable bytes (surrogateescape) go out as those bytes; anything else the
    stream cannot encode (`é` on ASCII, a lone surrogate read from a JSON file) as an escape."""
    try:
        return codecs.lookup_error("surrogateescape")(error)
    except UnicodeError:
        return codecs.backslashreplace_errors(error)


def _exit_code(result: CommandResult | None, run: Run) -> int:
    """A command's result: None (nothing to say: ok), or anything with an `outcome` and maybe an `error`."""
    if result is None:
        return OK
    error: PatchkitError | None = getattr(result, "error", None)  # a result's error is a PatchkitError
    if error is None:
        code = exit_code_for(result.outcome)
        # an apply that leaves the launch guard refusing the tree: a check failed, as status says
        return CHECK_FAILED if code == OK and getattr(result, "launch_refused", False) else code
    if getattr(result, "shown", False):  # printed among the result's findings: for the JSON document only
        run.failed(error.message, error.hint)
        return error.exit_code
    return _failed(error, run)


def _failed(error: PatchkitError, run: Run | None) -> int:
    _report(run, error.message, error.hint)
    return error.exit_code


def _report(run: Run | None, message: str, hint: str | None = None, *, note: str | None = None) -> None:
    """The error on stderr (and a note after it), and for the run's document (if a run began)."""
    ui = _ui().UI()
    if run is not None:
        run.failed(message, hint)
    ui.error(message, hint)
    if note:
        ui.note(note)


OWN_DIST = "vllm_patchkit"
RECORD_LIMIT = 16 << 20  # a dist-info RECORD read to see whether it lists patchkit/ (patchkit's own is ~100 KB)


def other_owners(package_dir: str) -> list[str]:
    """The distributions besides vllm-patchkit whose RECORD lists files of `package_dir` (the
    pre-rename `patchkit` installed under it: `pip uninstall patchkit` then deletes this one's
    files). Only `patchkit-*.dist-info` is read: the name that owned the package before."""
    site, package = os.path.split(package_dir)
    try:
        names = sorted(n for n in os.listdir(site) if n.lower().startswith(f"{package}-") and n.endswith(".dist-info"))
    except OSError:
        return []
    lists = f"\n{package}/".encode()
    return [n.removesuffix(".dist-info") for n in names if lists in b"\n" + _record(os.path.join(site, n, "RECORD"))]


def _record(path: str) -> bytes:
    """A RECORD's first RECORD_LIMIT bytes, read without blocking or following a symlink (b"" for
    anything but a regular file): a tree's files are untrusted. Not fsutil: --version loads no more."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, RECORD_LIMIT) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """`patchkit --version`, with a warning while another distribution owns the package too."""
    if not value or ctx.resilient_parsing:
        return
    ui = _ui().UI()
    ui.line(f"patchkit, version {__version__}")
    owners = other_owners(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if owners:
        ui.warn(
            f"{', '.join(owners)} (the pre-rename name) owns patchkit/ too: `pip uninstall patchkit` deletes this",
            "`pip install --force-reinstall --no-deps vllm_patchkit-*.whl`, or with pipx: "
            "`pipx uninstall patchkit && pipx reinstall vllm-patchkit`",
        )
    ctx.exit()


@click.group(cls=PatchkitGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version", is_flag=True, expose_value=False, is_eager=True, callback=_version, help="Show the version and exit."
)
@click.option("-q", "--quiet", is_flag=True, help="Only errors and warnings (as COMMAND -q).")
@click.option("-v", "--verbose", count=True, help="More detail (as COMMAND -v).")
@click.pass_context
def cli(ctx: click.Context, quiet: bool, verbose: int) -> None:
    """Versioned source patches for vLLM: detect, dry-run, apply atomically, verify, revert."""
    # `patchkit -q status` is `patchkit status -q`: the command's own defaults (a command that
    # takes no -v ignores it; what is given after the command still counts)
    given: dict[str, bool | int] = {"quiet": True} if quiet else {}
    given |= {"verbose": verbose} if verbose else {}
    if given:
        ctx.default_map = {name: dict(given) for name in COMMANDS}


_ONE_COMMAND_AT_A_TIME = threading.Lock()


def run_in_process(args: list[str]) -> tuple[int, str, str]:
    """`patchkit ARGS` in this process, as the console script runs it: (exit code, stdout, stderr).
    What fleet's node agent runs each step with. It starts from no memo of a command run before it.
    One at a time in a process: sys.stdout and the per-command memo are the whole process's."""

    stdout, stderr = io.StringIO(), io.StringIO()
    with _ONE_COMMAND_AT_A_TIME, redirect_stdout(stdout), redirect_stderr(stderr):
        percommand.forget()
        try:
            # standalone_mode=False: click returns the code a command exits with, raises its own errors
            code = cli.main(args=args, prog_name="patchkit", standalone_mode=False)
        except click.ClickException as exc:  # a usage error
            exc.show()
            code = exc.exit_code
        except click.Abort:
            code = 1
    return (code if isinstance(code, int) else OK), stdout.getvalue(), stderr.getvalue()


def main() -> None:
    _give_closed_streams_a_sink()
    _guard_output_streams()  # here too: click writes --help and usage errors before any command runs
    signals.hold_until_exit()
    try:
        sys.exit(_run_cli())
    except OutputUnwritable as exc:
        sys.exit(_output_unwritable(exc, None))
    except SystemExit as exc:
        sys.exit(_after_late_signal(exc.code))
    finally:
        # What a command built (a large diff's hunks, a tree's files) is garbage at exit: keep
        # the interpreter's last collection from walking it. Finalizers and atexit still run.
        gc.freeze()


def _run_cli() -> int:
    """click's standalone run, but for a Ctrl-C before the command took over the signals (click's
    parsing, the UI loading): patchkit's one line and 130, not click's "Aborted!" and exit 1."""
    try:
        code = cli.main(prog_name="patchkit", standalone_mode=False)
    except click.ClickException as exc:  # a usage error
        exc.show()
        return exc.exit_code
    except click.Abort as exc:
        if not isinstance(exc.__context__, KeyboardInterrupt):  # an end of input where click read one
            _report(None, "aborted")
            return 1
        return interrupted_before_a_command()
    return code if isinstance(code, int) else OK


def interrupted_before_a_command() -> int:
    """A Ctrl-C before a command took over the signals (click's parsing, the UI loading): patchkit's
    one line, which a second one cannot cut, and 130."""
    signals.ignore_more()
    with suppress(OutputUnwritable, OSError):  # stderr gone: the exit code alone says it
        _report(None, *signals.interrupted_report())
    return INTERRUPTED


def _after_late_signal(code: str | int | None) -> str | int | None:
    """A signal after the command had shown its result (a Ctrl-C in its last moments): said as any
    interrupt is, truthfully (the change is in place), with the signal's exit code. One that
    interrupted the command itself was reported already."""
    late = signals.late_signal()
    if late is None or code in _INTERRUPTED_CODES:
        return code
    try:
        _ui().UI().error(*signals.interrupted_report())
        sys.stderr.flush()
    except (OutputUnwritable, OSError):  # stderr gone: the exit code alone says it
        pass
    return 128 + late


_INTERRUPTED_CODES = frozenset(128 + number for number in signals.HANDLED)


def exit_held(code: object) -> NoReturn:
    """The console script's end, once main() has ended with `code`: what the interpreter's exit
    does (non-daemon threads joined, atexit, stdout flushed: a failed flush is 120), then, with
    the signals still held (signals.late_signal), one last look for one that came meanwhile (a
    second Ctrl-C in the last moments of a revert): said, and 128 + its number. Then the process
    ends at once: the modules' teardown would be a window where a signal is lost unsaid."""
    status = _exit_status(code)
    signals.late_signal()  # held from here, whichever way main() ended
    threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's wait for non-daemon threads
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        status = 120 if status == OK else status
    late = signals.late_signal()
    if late is not None and status not in _INTERRUPTED_CODES:
        with suppress(Exception):  # stderr gone: the exit code alone says it
            _ui().UI().error(*signals.interrupted_report())
        status = 128 + late
    with suppress(OSError, ValueError):
        sys.stderr.flush()
    os._exit(status)


def _exit_status(code: object) -> int:
    """What sys.exit(code) makes the exit status: None 0, an int (modulo 256), else printed and 1."""
    if code is None:
        return OK
    if isinstance(code, int):
        return code & 0xFF
    with suppress(OSError, ValueError):
        print(code, file=sys.stderr)
    return 1


if __name__ == "__main__":  # pragma: no cover
    main()
