"""The TLS a launch serves, judged as uvicorn builds it once the model has loaded (Config.load, run by
vLLM's serve_http after the engine is built): TLS when --ssl-keyfile or --ssl-certfile is given (its
is_ssl), then an assert that --ssl-certfile is, then create_ssl_context: load_cert_chain(cert, key),
VerifyMode(--ssl-cert-reqs), load_verify_locations(--ssl-ca-certs), set_ciphers(--ssl-ciphers). Each
refusal ends a launch whose model took minutes to load, so preflight and run build the same context
first, in the launch's own Python (its OpenSSL decides which ciphers and keys it takes)."""

from __future__ import annotations

import base64
import errno
import json
import os
import sys

from patchkit.base.errors import TargetError
from patchkit.base.fsutil import read_regular
from patchkit.launch.command import LaunchCommand
from patchkit.launch.findings import Finding, cannot_judge
from patchkit.tree.target import ask_python

AFTER_LOAD = "vLLM refuses the launch once the model has loaded"
LIMIT = 16 << 20  # a key, a certificate or a bundle of CA certificates: far smaller
_FILES = {"cert": "ssl-certfile", "key": "ssl-keyfile", "ca": "ssl-ca-certs"}

# Run by the launch's Python (-S), the files' bytes on its stdin: each built into an anonymous
# in-memory file (a private temporary one without memfd), so OpenSSL never opens the named path
# itself (a fifo swapped in would hold it); it answers with each step's refusal, as one JSON line.
_ASK = r"""
import base64, json, os, ssl, sys, tempfile
q = json.loads(sys.stdin.read())
out = {"openssl": ssl.OPENSSL_VERSION}
class Encrypted(Exception):
    pass
def said(exc):
    text = exc.args[0] if len(exc.args) == 1 else str(exc)
    return str(text).split(" (_ssl.c:")[0]
def put(name, where):
    if q.get(name) is None:
        return None
    data = base64.b64decode(q[name])
    fd = os.memfd_create("patchkit-" + name) if hasattr(os, "memfd_create") else -1
    path = "/proc/self/fd/%d" % fd
    if fd < 0 or not os.path.exists(path):  # no memfd, or no /proc to name it by
        path = os.path.join(where, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    while data:
        data = data[os.write(fd, data):]
    return path
def password():
    raise Encrypted()
def judge(where):
    cert, key, ca = put("cert", where), put("key", where), put("ca", where)
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert, key, password)
    except Encrypted:
        out["chain"] = "encrypted"
    except (OSError, ValueError) as exc:
        out["chain"] = said(exc)
    try:
        ssl.VerifyMode(q["cert_reqs"])
    except ValueError as exc:
        out["cert_reqs"] = said(exc)
    if ca is not None:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(ca)
        except (OSError, ValueError) as exc:
            out["ca"] = said(exc)
    if q.get("ciphers"):
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).set_ciphers(q["ciphers"])
        except (OSError, ValueError) as exc:
            out["ciphers"] = said(exc)
with tempfile.TemporaryDirectory() as where:
    judge(where)
sys.stdout.write(json.dumps(out) + "\n")
"""


def tls_findings(command: LaunchCommand, check: str) -> list[Finding]:
    """Failed `check` findings for the TLS uvicorn cannot serve as the launch asks for it; none when
    the launch serves plain HTTP (--ssl-ca-certs alone is then never read)."""
    given = {name: command.optional_text(option) for name, option in _FILES.items()}
    if given["cert"] is None and given["key"] is None:
        return []
    if given["cert"] is None:
        message = f"--ssl-keyfile {given['key']} without --ssl-certfile: uvicorn asserts a certificate: {AFTER_LOAD}"
        return [Finding(check, False, message, "give --ssl-certfile CERT too, or leave out --ssl-keyfile")]
    question: dict[str, object] = {"cert_reqs": _cert_reqs(command), "ciphers": command.optional_text("ssl-ciphers")}
    for name, value in given.items():
        data = None if value is None else _contents(os.path.join(command.working_directory(), value))
        if isinstance(data, str):  # larger than patchkit reads
            reason = (
                f"--{_FILES[name]} {value} is larger than the {LIMIT >> 20} MiB patchkit reads: its TLS is not judged"
            )
            return [cannot_judge(check, reason, "check it with openssl (x509, pkey) before the launch")]
        if value is not None and data is None:  # unreadable: late_files says why
            return []
        question[name] = None if data is None else base64.b64encode(data).decode("ascii")
    return _verdicts(command, check, given, json.dumps(question))


def _cert_reqs(command: LaunchCommand) -> int:
    """--ssl-cert-reqs as vLLM's int type reads it (the reading of the command refused any other)."""
    value = command.options.get("ssl-cert-reqs")
    try:
        return int(str(value)) if value is not None else 0
    except ValueError:
        return 0


def _contents(path: str) -> bytes | str | None:
    """A file's bytes (bounded, never blocking on a fifo); "larger" past LIMIT; None when unreadable."""
    try:
        return read_regular(path, LIMIT, follow_symlinks=True)
    except OSError as exc:
        return "larger" if exc.errno == errno.EFBIG else None
    except ValueError:  # a NUL character: late_files says so
        return None


def _verdicts(command: LaunchCommand, check: str, given: dict[str, str | None], question: str) -> list[Finding]:
    try:
        answer, unasked = _ask(command, question)
    except TargetError as exc:
        reason = f"the TLS of --ssl-certfile {given['cert']} is not judged: no Python to ask ({exc})"
        return [cannot_judge(check, reason, "check the launch's TLS files with openssl before it")]
    judged_by = "" if unasked is None else " (judged by patchkit's own Python: the launch's cannot be asked)"
    found = []
    for step, message, fix in _refusals(command, given, answer):
        if step == "ciphers" and unasked is not None:  # another OpenSSL may know other ciphers
            found.append(cannot_judge(check, f"{message}{judged_by}", fix))
        else:
            found.append(Finding(check, False, f"{message}: {AFTER_LOAD}{judged_by}", fix))
    return found


def _refusals(
    command: LaunchCommand, given: dict[str, str | None], answer: dict[str, str]
) -> list[tuple[str, str, str]]:
    """(step, what OpenSSL refused, the fix) for each step of create_ssl_context that fails."""
    cert, key = given["cert"], given["key"]
    pair = f"--ssl-certfile {cert}" + (f" with --ssl-keyfile {key}" if key else "")
    found = []
    chain = answer.get("chain")
    if chain == "encrypted":
        where = f"--ssl-keyfile {key}: the key" if key else f"--ssl-certfile {cert}: its key"
        message = (
            f"{where} is encrypted, and vLLM has no option for its passphrase "
            "(OpenSSL asks for it on the launch's terminal, if it has one)"
        )
        fix = f"decrypt it into a file only you can read: openssl pkey -in {key or cert} -out KEY"
        found.append(("chain", message, fix))
    elif chain:
        message = f"{pair}: OpenSSL cannot load a certificate and its private key from them ({chain})"
        fix = "give a PEM certificate and its own PEM private key (in the certfile when no --ssl-keyfile)"
        found.append(("chain", message, fix))
    if answer.get("cert_reqs"):
        value = command.options.get("ssl-cert-reqs")
        found.append(
            (
                "cert_reqs",
                f"--ssl-cert-reqs {value}: {answer['cert_reqs']}",
                "give 0 (none), 1 (optional) or 2 (required)",
            )
        )
    if answer.get("ca"):
        message = f"--ssl-ca-certs {given['ca']}: OpenSSL takes no CA certificate from it ({answer['ca']})"
        found.append(("ca", message, "give a file of PEM CA certificates"))
    if answer.get("ciphers"):
        ciphers = command.optional_text("ssl-ciphers")
        message = f"--ssl-ciphers {ciphers}: {answer.get('openssl', 'OpenSSL')} selects no cipher from it ({answer['ciphers']})"
        found.append(("ciphers", message, "give a cipher list `openssl ciphers LIST` accepts"))
    return found


def _ask(command: LaunchCommand, question: str) -> tuple[dict[str, str], str | None]:
    """(the answer, None) of the launch's own Python; else patchkit's own Python's, and why the
    launch's could not be asked. TargetError when neither answers."""
    cwd = command.working_directory()
    try:
        python, options = command.launch_python()
        options = [*options, *(f"-X{x}" for x in command.xoptions)]
        return _answer(ask_python(python, options, _ASK, env=command.environ, cwd=cwd, stdin=question)), None
    except TargetError as exc:
        why = str(exc).split("\n")[0]
    return _answer(ask_python(sys.executable, ["-I"], _ASK, env=command.environ, cwd=cwd, stdin=question)), why


def _answer(said: str) -> dict[str, str]:
    try:
        answer = json.loads(said.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise TargetError(f"no answer: {said[-200:]!r}") from None
    if not isinstance(answer, dict):
        raise TargetError(f"no answer: {said[-200:]!r}")
    return {str(k): str(v) for k, v in answer.items()}
