"""vLLM's own validation of a launch: its command-line parser (as `vllm serve` or the api_server
builds it: FlexibleArgumentParser's dotted keys, --config, unknown options refused), EngineArgs from
it, then create_engine_config(). No weights are loaded; nothing is downloaded (HF_HUB_OFFLINE).

request: {"arguments": [what follows `vllm serve` or `-m vllm.entrypoints.openai.api_server`],
          "serve": bool, "args": [the same for the engine's parser alone], "cwd": dir,
          "headless": bool (`vllm serve` runs engine cores only: run_headless's create_engine_config, no
          API server, so no --middleware and no front end reading the generation config)}
answer:  {"status": "ok" | "invalid" | "no-vllm", "error": text, "reading": {what vLLM's parser read: READ},
          "cpu": the CPU platform was forced (no accelerator found), "cpu_refused": the error was raised in
          vllm/platforms/cpu.py or blames the platform (the forced platform's own refusal)}
       | {"status": "after-load", "option": "middleware" | "generation-config", "value": text, "stage":
         for --middleware "no-dot" | "import" | "attribute" | "kind", "error": text, "cpu", "reading"}:
         create_engine_config() accepts the command, but what build_app and init_app_state run once the
         model has loaded refuses it (a --middleware that does not import; a generation config vLLM cannot read)
       | {"status": "plugin-failed", "plugin": entry point name or None, "error": text}: a general plugin
         raised (vLLM's own loader runs them first, as 0.16.0's parser does)
       | {"status": "plugin-running", "plugin": name}: left in the answer file by a plugin that hung or
         ended the process while it ran
       | {"status": "memory", "bound": bytes}: the worker hit DATA_BOUND (no verdict)
request {"import_only": true}: only whether vLLM's engine arguments import here: {"status": "ok" | "no-vllm" | "memory", ...}
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import inspect
import io
import json
import os
import re
import sys
import traceback
import types
from typing import Any

try:
    import resource
except ImportError:  # not on this platform: no memory bound
    resource = None  # type: ignore[assignment]

READ = ("model", "speculative_config", "tensor_parallel_size", "trust_remote_code")
GENERAL_PLUGINS = "vllm.general_plugins"  # vllm.plugins.DEFAULT_PLUGINS_GROUP
ANSWER: list[str] = []  # the answer file, when run by path (in-process: none)
# the data (RLIMIT_DATA) the worker may hold when run by path: vLLM 0.16.0's import, create_engine_config()
# and the drafter's meta build hold ~1.6 GiB (CPU platform); a file the launch makes vLLM read at import
# must not fill the machine. Not RLIMIT_AS: CUDA reserves far more address space than it uses.
DATA_BOUND = 8 << 30


def work(request: dict[str, Any]) -> dict[str, Any]:
    # run in the launch's own environment (patchkit passes it whole); offline added: nothing downloaded
    launch_offline = _offline(os.environ)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if request.get("import_only"):  # only whether vLLM's package imports in this environment
        return imported_alone()
    try:
        return _judged(request, launch_offline)
    except MemoryError:  # past DATA_BOUND (run by path): no verdict, and the machine's memory kept
        return {"status": "memory", "bound": DATA_BOUND}


def _judged(request: dict[str, Any], launch_offline: bool) -> dict[str, Any]:
    imported = _engine_args_imported()
    if isinstance(imported, dict):  # vLLM does not import here: skipped, unless the launch's own VLLM_* raise
        return imported
    forced, AsyncEngineArgs = imported
    try:  # first, as 0.16.0's add_cli_args runs them (a plugin may add choices to the parser)
        load_general_plugins(importlib.import_module("vllm.plugins"))
    except PluginFailed as failed:
        return {"status": "plugin-failed", "plugin": failed.name, "error": failed.error}
    except ImportError:  # a vLLM without vllm.plugins: none to run
        pass
    refused = io.StringIO()
    reading = engine_args = None
    try:
        with contextlib.redirect_stderr(refused):
            args = _parsed(AsyncEngineArgs, request)
        reading = {name: _plain(getattr(args, name)) for name in READ if hasattr(args, name)}
        with _model_names_as_launched(launch_offline):
            engine_args = AsyncEngineArgs.from_cli_args(args)
        config = _engine_config(engine_args, bool(request.get("headless")))
    except MemoryError:
        raise
    except Exception as exc:
        cpu_refused = forced and (_raised_in_cpu_platform(exc) or _PLATFORM_WORDS.search(str(exc)) is not None)
        on_cpu = cpu_refused and engine_args is not None
        late = _late_on_cpu(args, engine_args, launch_offline, bool(request.get("headless"))) if on_cpu else None
        if late is not None:  # fails on any platform: the CPU platform's own refusal hides it no more
            return {"status": "after-load", **late, "reading": reading, "cpu": forced}
        return {
            "status": "invalid",
            "error": _error_text(exc),
            "reading": reading,
            "cpu": forced,
            "cpu_refused": cpu_refused,
        }
    except BaseException as exc:  # argparse exits on an argument it refuses: vLLM would refuse it too
        if isinstance(exc, KeyboardInterrupt):
            raise
        said = refused.getvalue().strip().splitlines()
        reason = said[-1] if said else f"status {exc}"
        return {"status": "invalid", "error": f"vLLM's argument parser refused the command: {reason}"}
    late = after_load_refusal(args, config, launch_offline, headless=bool(request.get("headless")))
    if late is not None:
        return {"status": "after-load", **late, "reading": reading, "cpu": forced}
    answer = {"status": "ok", "reading": reading, "cpu": forced}
    drafter = drafter_built(config, answer, request.get("build_within"), forced)
    return answer if drafter is None else {**answer, "drafter": drafter}


# an error of the meta build that blames where it runs (a kernel, a device), not the drafter
_BUILD_PLACE = re.compile(r"(?i:\bmeta\b|\bcuda\b|\bdevice\b|\bgpu\b)")


def drafter_built(config: Any, answer: dict[str, Any], seconds: object, forced: bool) -> dict[str, Any] | None:
    """drafter_build.py's verdict on the launch's drafter (None: none built), within `seconds` (the
    request's build_within; none or 0: not built). The answer file says the build is running while
    it runs (one that hangs or ends the process is named by it)."""
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        return None

    def platform(exc: BaseException) -> bool:  # its first line: torch lists signatures that name devices after it
        line = (str(exc).strip().splitlines() or [""])[0]
        words = _BUILD_PLACE.search(line) is not None or (forced and _PLATFORM_WORDS.search(line) is not None)
        return words or (forced and _raised_in_cpu_platform(exc))

    try:
        path = os.path.join(os.path.dirname(os.path.realpath(__file__)), "drafter_build.py")
        spec = importlib.util.spec_from_file_location("patchkit_drafter_build", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except Exception as exc:  # patchkit's own file, not the launch: said, never a verdict
        return {"status": "cannot", "reason": f"patchkit's drafter build does not load: {_error_text(exc)}"}
    if ANSWER:
        write_answer(ANSWER[0], {**answer, "drafter": {"status": "building"}})
    built: dict[str, Any] | None = module.build(config, float(seconds), _error_text, platform, forced=forced)
    return built


def _engine_config(engine_args: Any, headless: bool) -> Any:
    """create_engine_config() as the launch calls it: run_headless passes headless=True (a release
    whose create_engine_config takes it: 0.11.0 on)."""
    create = engine_args.create_engine_config
    if headless and "headless" in inspect.signature(create).parameters:
        return create(headless=True)
    return create()


# the model classes that read the generation config in the engine (on a headless node too): as
# patchkit/launch/genconfig.py's, which this module (run in the target's Python) cannot import
ENGINE_READERS = ("Llama4", "EagleLlama4", "Gemma4", "DiffusionGemma")


def after_load_refusal(
    args: Any, config: Any, launch_offline: bool, *, headless: bool = False
) -> dict[str, str] | None:
    """What vLLM's server runs once the model has loaded (the generation config: as its front end
    starts), and needs no model, run here: build_app's --middleware imports, then the generation
    config InputProcessor and the serving classes read (ModelConfig.get_diff_sampling_param); the
    first refusal, or None. `headless`: no API server runs, so only a model class of ENGINE_READERS
    reads the generation config."""
    for middleware in (getattr(args, "middleware", None) or []) if not headless else []:
        refused = middleware_refusal(str(middleware))
        if refused is not None:
            return {"option": "middleware", "value": str(middleware), **refused}
    model_config = getattr(config, "model_config", None)
    if model_config is None or not hasattr(model_config, "get_diff_sampling_param"):
        return None
    architectures = getattr(model_config, "architectures", None) or []
    if headless and not any(str(a).startswith(ENGINE_READERS) for a in architectures):
        return None
    value = str(getattr(model_config, "generation_config", "auto"))
    if not launch_offline and _downloadable(value):  # vLLM would fetch it from the hub: not judged offline
        return None
    try:
        # the front end reads the model's own under `vllm` too; the serving classes, under `auto`
        getattr(model_config, "try_get_generation_config", lambda: None)()
        model_config.get_diff_sampling_param()
    except MemoryError:
        raise
    except Exception as exc:
        return {"option": "generation-config", "value": value, "error": _error_text(exc)}
    return None


def _late_on_cpu(args: Any, engine_args: Any, launch_offline: bool, headless: bool) -> dict[str, str] | None:
    """after_load_refusal where the forced CPU platform refused the engine config: the middleware, and
    the generation config with the model's config alone (create_model_config, no platform check)."""
    try:
        config: Any = types.SimpleNamespace(model_config=engine_args.create_model_config())
    except Exception:
        config = None
    return after_load_refusal(args, config, launch_offline, headless=headless)


def middleware_refusal(middleware: str) -> dict[str, str] | None:
    """vLLM 0.16.0 build_app's reading of one --middleware (rsplit at the last dot, import_module,
    getattr, a class or a coroutine function), the stage it fails at and the error; None: it takes it."""
    if "." not in middleware:
        return {"stage": "no-dot", "error": "ValueError: not enough values to unpack (expected 2, got 1)"}
    module_path, object_name = middleware.rsplit(".", 1)
    _in_answer({"status": "middleware-importing", "value": middleware})  # os._exit() there: the file says where
    try:
        module = importlib.import_module(module_path)
    except SystemExit as exc:  # the launch ends there too, with this status
        return {"stage": "exit", "error": repr(exc.code)}
    except MemoryError:
        raise
    except Exception as exc:  # the launch ends there too
        return {"stage": "import", "error": _error_text(exc)}
    finally:
        _in_answer(None)
    try:
        imported = getattr(module, object_name)
    except Exception as exc:
        return {"stage": "attribute", "error": _error_text(exc)}
    if inspect.isclass(imported) or inspect.iscoroutinefunction(imported):
        return None
    return {"stage": "kind", "error": f"ValueError: Invalid middleware {middleware}. Must be a function or a class."}


def _downloadable(value: str) -> bool:
    """Whether vLLM would look a --generation-config value up on the hub: not auto/vllm, no existing
    path, and a repo id huggingface_hub takes."""
    if value in ("auto", "vllm") or os.path.exists(value):
        return False
    try:
        importlib.import_module("huggingface_hub.utils").validate_repo_id(value)
    except Exception:
        return False
    return True


# a refusal that blames the platform ("Sleep mode is not supported on current platform."): on the CPU
# platform forced, it says nothing of the launch's own accelerator
_PLATFORM_WORDS = re.compile(r"(?i:\bplatform\b)|\bCPU\b")


def _raised_in_cpu_platform(exc: BaseException) -> bool:
    """Whether `exc` (or one it was raised from or during) passed through vllm/platforms/cpu.py: the
    CPU platform's own refusal (CpuPlatform.check_and_update_config and its helpers)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        for frame, _ in traceback.walk_tb(current.__traceback__):
            if frame.f_code.co_filename.replace(os.sep, "/").endswith("/vllm/platforms/cpu.py"):
                return True
        current = current.__cause__ or current.__context__
    return False


class PluginFailed(Exception):
    """A general plugin raised: vLLM's launch stops there (its loader calls each plugin unguarded)."""

    def __init__(self, name: str | None, error: str) -> None:
        super().__init__(error)
        self.name, self.error = name, error


def load_general_plugins(plugins: Any) -> None:  # vllm.plugins
    """Run vLLM's general plugins as its load_general_plugins() does (its own loader picks them: the
    launch's VLLM_PLUGINS, a plugin that does not import skipped), naming a plugin that raises or
    exits; each plugin's name is in the answer file while it runs (one that hangs, or ends the
    process, is named by it)."""
    by_group = getattr(plugins, "load_plugins_by_group", None)
    if by_group is None:  # a vllm.plugins without it: its own loader, which names no plugin
        try:
            plugins.load_general_plugins()
        except Exception as exc:
            raise PluginFailed(None, _error_text(exc)) from exc
        return
    plugins.plugins_loaded = True  # as load_general_plugins() marks it: nothing runs twice
    for name, func in by_group(group=getattr(plugins, "DEFAULT_PLUGINS_GROUP", GENERAL_PLUGINS)).items():
        _running(str(name))
        try:
            func()
        except MemoryError:
            raise
        except (Exception, SystemExit) as exc:  # sys.exit() in a plugin: vLLM's process ends there too
            raise PluginFailed(str(name), _error_text(exc)) from exc
    _running(None)


def _running(plugin: str | None) -> None:
    """The general plugin about to run, in the answer file (none: removed) while the worker runs by path."""
    if not ANSWER:
        return
    if plugin is not None:
        write_answer(ANSWER[0], {"status": "plugin-running", "plugin": plugin})
    elif os.path.exists(ANSWER[0]):
        os.unlink(ANSWER[0])


def _in_answer(step: dict[str, str] | None) -> None:
    """What the worker is about to run that may end its process, in the answer file (None: removed)
    while it runs by path."""
    if not ANSWER:
        return
    if step is not None:
        write_answer(ANSWER[0], step)
    elif os.path.exists(ANSWER[0]):
        os.unlink(ANSWER[0])


def _offline(environ: Any) -> bool:
    """huggingface_hub's HF_HUB_OFFLINE as the launch's own environment sets it."""
    value = environ.get("HF_HUB_OFFLINE") or environ.get("TRANSFORMERS_OFFLINE")
    return value is not None and value.upper() in ("1", "ON", "YES", "TRUE")


@contextlib.contextmanager
def _model_names_as_launched(launch_offline: bool) -> Any:
    """EngineArgs built as the launch builds it: online, it keeps a hub id (offline it would take
    the cached snapshot's path, and VLLM_MODEL_REDIRECT_PATH would never apply); nothing is
    fetched while it is built, and the forced offline mode is back for the rest."""
    try:
        constants: Any = importlib.import_module("huggingface_hub.constants")
    except ImportError:
        constants = None
    kept = getattr(constants, "HF_HUB_OFFLINE", None)
    if constants is not None and not launch_offline:
        constants.HF_HUB_OFFLINE = False
    try:
        yield
    finally:
        if constants is not None and kept is not None:
            constants.HF_HUB_OFFLINE = kept


def _plain(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError, RecursionError):
        return repr(value)


def _parsed(AsyncEngineArgs: Any, request: dict[str, Any]) -> Any:
    """The arguments as the launch's own parser reads them: `vllm serve`'s subcommand parser or the
    api_server's, with their checks; else (a vLLM without them) the engine's arguments alone."""
    parser_class = _parser_class()
    cli_args: Any
    serve: Any
    try:
        cli_args = importlib.import_module("vllm.entrypoints.openai.cli_args")
        serve = importlib.import_module("vllm.entrypoints.cli.serve") if request.get("serve") else None
    except Exception:
        cli_args = serve = None
    if request.get("cwd"):  # once vLLM is imported: relative paths (--config, a model) as the launch sees them
        os.chdir(request["cwd"])
    if cli_args is None:
        return AsyncEngineArgs.add_cli_args(parser_class()).parse_known_args(request["args"])[0]
    if serve is None:
        args = cli_args.make_arg_parser(parser_class()).parse_args(request["arguments"])
        cli_args.validate_parsed_serve_args(args)
        return args
    parser = parser_class()
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    [command] = [c for c in serve.cmd_init() if c.name == "serve"]
    command.subparser_init(subparsers)
    args = parser.parse_args(["serve", *request["arguments"]])
    command.validate(args)
    if getattr(args, "model_tag", None) is not None:
        args.model = args.model_tag  # what `vllm serve` does with its positional MODEL
    return args


def _parser_class() -> type[argparse.ArgumentParser]:
    for module in ("vllm.utils.argparse_utils", "vllm.utils"):
        try:
            # vLLM's subclass of argparse's parser
            found: type[argparse.ArgumentParser] | None = getattr(
                importlib.import_module(module), "FlexibleArgumentParser", None
            )
        except ImportError:
            continue
        if found is not None:
            return found
    return argparse.ArgumentParser


def _engine_args_imported() -> tuple[bool, Any] | dict[str, Any]:
    """(whether the CPU platform was forced, vLLM's AsyncEngineArgs), or the answer when vLLM does not
    import: with the launch's VLLM_* settings its package import raises with (vLLM reads some at import)."""
    try:
        importlib.import_module("vllm")
    except MemoryError:
        raise
    except Exception as exc:
        return {"status": "no-vllm", "error": f"{type(exc).__name__}: {exc}", "variables": settings_blamed()}
    try:
        forced = _force_cpu_platform_when_none()  # before the modules that keep vllm.platforms.current_platform
        return forced, importlib.import_module("vllm.engine.arg_utils").AsyncEngineArgs
    except MemoryError:
        raise
    except Exception as exc:
        return {"status": "no-vllm", "error": f"{type(exc).__name__}: {exc}"}


def imported_alone() -> dict[str, Any]:
    """Whether vLLM imports as _engine_args_imported() imports it (a fresh process: nothing twice)."""
    try:
        importlib.import_module("vllm")
        _force_cpu_platform_when_none()
        importlib.import_module("vllm.engine.arg_utils")
    except MemoryError:
        return {"status": "memory", "bound": DATA_BOUND}
    except Exception as exc:
        return {"status": "no-vllm", "error": f"{type(exc).__name__}: {exc}"}
    return {"status": "ok"}


TRIED_ALONE = 16  # VLLM_* variables imported with one at a time; past that, all of them are named


def settings_blamed() -> list[str]:
    """The launch's VLLM_* variables that make vLLM's import raise, when it imports without them all
    (vLLM reads some at import: VLLM_LOGGING_LEVEL, VLLM_LOGGING_CONFIG_PATH); each one it does not import
    with alone, or all of them when only their combination raises. None: it does not import without them either."""
    names = sorted(name for name in os.environ if name.startswith("VLLM_"))
    if not names or not _imports_without(names):
        return []
    alone = [name for name in names[:TRIED_ALONE] if not _imports_without([n for n in names if n != name])]
    return alone or names


def _imports_without(names: list[str]) -> bool:
    """Whether vLLM's package imports afresh (its modules dropped; torch and the rest kept) with `names`
    unset. Only the package: a second import of its deeper modules registers torch ops twice and raises."""
    saved = {name: os.environ.pop(name) for name in names if name in os.environ}
    try:
        for module in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[module]
        importlib.import_module("vllm")
        return True
    except Exception:  # the import's own failure is the answer
        return False
    finally:
        os.environ.update(saved)


def _force_cpu_platform_when_none() -> bool:
    """Whether the CPU platform was forced (vLLM found no accelerator here)."""
    try:
        platforms: Any = importlib.import_module("vllm.platforms")
        if platforms.current_platform.is_unspecified():
            platforms._current_platform = importlib.import_module("vllm.platforms.cpu").CpuPlatform()
            return True
    except Exception:  # an older layout: vLLM decides itself
        pass
    return False


def _error_text(exc: BaseException) -> str:
    """The exception as the answer carries it: its head (where the problem is named) and its end,
    the middle left out past 600 characters; pydantic's "For further information visit" lines dropped."""
    lines = traceback.format_exception_only(type(exc), exc)
    said = [line for line in "".join(lines).splitlines() if not line.strip().startswith("For further information")]
    text = "\n".join(said).strip()
    return text if len(text) <= 600 else f"{text[:450]} ... ({len(text) - 600:,} characters left out) ... {text[-150:]}"


def write_answer(path: str, answer: object) -> None:
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(answer, f)
    os.replace(path + ".tmp", path)


def _unshadow() -> None:
    """Run by path, this directory is sys.path[0]: drop it, so that its modules shadow nothing of vLLM's."""
    here = os.path.dirname(os.path.realpath(__file__))
    if sys.path and os.path.realpath(sys.path[0] or os.curdir) == here:
        del sys.path[0]


def limit_data() -> None:
    """RLIMIT_DATA lowered to DATA_BOUND (a lower one is kept)."""
    if resource is None:
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        bound = DATA_BOUND if hard == resource.RLIM_INFINITY else min(DATA_BOUND, hard)
        if soft == resource.RLIM_INFINITY or soft > bound:
            resource.setrlimit(resource.RLIMIT_DATA, (bound, hard))
    except (OSError, ValueError):  # a limit this system does not let lower: unbounded, as before
        pass


if __name__ == "__main__":
    _unshadow()
    limit_data()
    asked = json.load(sys.stdin)
    if isinstance(asked.get("first_path"), str):  # the launch's own sys.path[0], as Python puts it there
        sys.path.insert(0, asked["first_path"])
    ANSWER.append(sys.argv[1])
    write_answer(sys.argv[1], work(asked))
    # answered: a thread a plugin or a --middleware module started (the server lives on with it) must
    # not keep the worker to its time limit
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
