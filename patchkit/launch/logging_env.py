"""The VLLM_* settings vLLM reads as `import vllm` runs (0.11-0.33: vllm/logger.py configures logging
at import, from envs.py's VLLM_CONFIGURE_LOGGING, VLLM_LOGGING_LEVEL, VLLM_LOGGING_STREAM and
VLLM_LOGGING_CONFIG_PATH): a value it raises on stops every vLLM command before it starts. Preflight's
import path finds any such variable by importing vLLM (vllm-validation); `run` and --no-import judge
these four statically, as the tree's logger.py and envs.py read them, and say "cannot judge" where the
tree reads them otherwise."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from patchkit.launch import observed
from patchkit.launch.env_json import NOT_JSON, file_json, read_named, refused_kind, shown_path, shown_setting
from patchkit.launch.findings import Finding, cannot_judge

CHECK = "vllm-environment"
LOGGER, ENVS = "vllm/logger.py", "vllm/envs.py"
CONFIGURE, LEVEL, CONFIG_PATH = "VLLM_CONFIGURE_LOGGING", "VLLM_LOGGING_LEVEL", "VLLM_LOGGING_CONFIG_PATH"
STREAM = "VLLM_LOGGING_STREAM"
# dictConfig resolves an ext:// or cfg:// stream as it configures, and raises on one it cannot find
STANDARD_STREAMS = ("ext://sys.stdout", "ext://sys.stderr", "ext://sys.__stdout__", "ext://sys.__stderr__")
AT_IMPORT = b"\n_configure_vllm_root_logger()\n"  # called as the module runs (0.34 configures from the args)
MARKS = (
    (ENVS, b'int(os.getenv("VLLM_CONFIGURE_LOGGING", "1"))'),
    (ENVS, b'os.getenv("VLLM_LOGGING_LEVEL", "INFO").upper()'),
    (LOGGER, b"Could not load logging config. File does not exist"),
    (LOGGER, b"if not isinstance(custom_config, dict):"),
    (LOGGER, b'encoding="utf-8"'),  # the config file is read as UTF-8 text: no BOM, no UTF-16
    (LOGGER, b"VLLM_LOGGING_STREAM"),
)
LEVELS = ("CRITICAL", "FATAL", "ERROR", "WARN", "WARNING", "INFO", "DEBUG", "NOTSET")  # logging's names
AT_START = "vLLM raises configuring its logging as it is imported: every vLLM command fails at start"
AS_IMPORTED = "as vLLM is imported: every vLLM command fails or hangs at start"


def logging_findings(environ: Mapping[str, str], cwd: str, read: Callable[[str], bytes | None]) -> list[Finding]:
    """A failing finding where vLLM's logging set-up raises on the launch's settings; "cannot judge"
    where the tree does not read them as judged here, or the config file's content is dictConfig's."""
    given = [name for name in (CONFIGURE, LEVEL, STREAM, CONFIG_PATH) if name in environ]
    if not given:
        return []
    sources = {path: read(path) or b"" for path in (LOGGER, ENVS)}
    if AT_IMPORT not in sources[LOGGER] or not all(mark in sources[path] for path, mark in MARKS):
        why = f"how this vLLM reads {', '.join(given)} (its logger.py, envs.py) is not read"
        return [cannot_judge(CHECK, why, "preflight without --no-import, where vLLM imports with them")]
    try:
        configure = bool(int(environ.get(CONFIGURE, "1")))
    except ValueError:
        why = f"{shown_setting(CONFIGURE, environ[CONFIGURE])} is not an integer: {AT_START}"
        return [Finding(CHECK, False, why, f"give {CONFIGURE}=1 or {CONFIGURE}=0, or unset it")]
    path = environ.get(CONFIG_PATH)
    if path and not configure:
        why = f"{CONFIG_PATH} is given with {CONFIGURE}=0: {AT_START}"
        return [Finding(CHECK, False, why, f"unset {CONFIGURE} or {CONFIG_PATH}")]
    if path:
        return _config_file(os.path.join(cwd, path))
    level = environ.get(LEVEL, "INFO").upper()
    if configure and level not in LEVELS:
        why = f"{shown_setting(LEVEL, environ[LEVEL])} names no logging level: {AT_START}"
        return [Finding(CHECK, False, why, f"give {LEVEL} one of DEBUG, INFO, WARNING, ERROR, CRITICAL, or unset it")]
    return _stream(environ.get(STREAM)) if configure else []


def _stream(stream: str | None) -> list[Finding]:
    """vLLM's handler takes VLLM_LOGGING_STREAM as dictConfig's stream: a name it resolves (ext://,
    cfg://) other than sys's own streams may be missing in the launch's Python (it raises then)."""
    if stream is None or stream in STANDARD_STREAMS or not stream.startswith(("ext://", "cfg://")):
        return []
    why = f"{shown_setting(STREAM, stream)} is resolved by logging's dictConfig as vLLM is imported"
    return [cannot_judge(CHECK, why, f"preflight without --no-import imports vLLM with it; or unset {STREAM}")]


def _config_file(path: str) -> list[Finding]:
    """vLLM's reading of VLLM_LOGGING_CONFIG_PATH: it must exist and hold a JSON object, as UTF-8 text."""
    shown, fix = shown_path(path), f"give {CONFIG_PATH} a JSON file of a logging config, or unset it"
    imported = "preflight without --no-import imports vLLM with it"
    named = read_named(path)
    if named is None:
        return [Finding(CHECK, False, f"{CONFIG_PATH} {shown} does not exist: {AT_START}", fix)]
    if named.refused:
        return [Finding(CHECK, False, f"{CONFIG_PATH} {shown} {named.refused}, {AS_IMPORTED}", fix)]
    if named.unread:
        return [cannot_judge(CHECK, f"{CONFIG_PATH} {shown} {named.unread}", imported)]
    config = file_json(named.data, "utf-8")  # as vLLM reads it: UTF-8 text (a BOM or UTF-16 fails), then json.loads
    if config is NOT_JSON:
        return [Finding(CHECK, False, f"{CONFIG_PATH} {shown} holds no JSON in UTF-8 (no BOM): {AT_START}", fix)]
    if not isinstance(config, dict):
        return [Finding(CHECK, False, f"{CONFIG_PATH} {shown} holds no JSON object: {AT_START}", fix)]
    why = f"the logging config in {CONFIG_PATH} {shown} is dictConfig's to judge as vLLM is imported"
    return [cannot_judge(CHECK, why, imported)]


def import_blocker(environ: Mapping[str, str], cwd: str) -> str | None:
    """The launch's VLLM_LOGGING_CONFIG_PATH when vLLM's import cannot read it (a fifo would block an
    import of vLLM in the launch's environment, a device fill its memory): not imported then. Told
    from its stat: the file was read once, by logging_findings; one over the bound is imported with
    (the worker's memory is bounded, and vLLM judges it)."""
    path = environ.get(CONFIG_PATH)
    if not path:
        return None
    full = os.path.join(cwd, path)
    try:
        refused = refused_kind(full) if observed.exists(full) else None
    except OSError:
        return None
    return f"{CONFIG_PATH} {shown_path(path)} {refused}" if refused else None
