"""A local package index for the fetch tests: tiny but real vLLM wheels, served by a threaded HTTP
server that honours byte ranges (or not), and what a test needs to point pip's settings at it."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import os
import re
import sys
import threading
import zipfile
from pathlib import Path

from patchkit.distinfo.record import record_hash
from patchkit.fetch import net
from patchkit.fetch.cache import STATE_FILE
from patchkit.fetch.ranges import MERGE_GAP

VERSION = "0.1.0"
WHEEL = f"vllm-{VERSION}-py3-none-manylinux_2_17_x86_64.whl"
OTHER_WHEEL = f"vllm-{VERSION}-py3-none-any.whl"

FILES = {
    "vllm/__init__.py": b"__version__ = '0.1.0'\n",
    "vllm/config/speculative.py": b"class SpeculativeConfig:\n    method = 'eagle3'\n" * 40,
    "vllm/model_executor/models/llama_eagle3.py": b"# eagle3 drafter\nclass Eagle3LlamaForCausalLM: ...\n" * 30,
    "vllm/v1/spec_decode/eagle.py": b"def propose():\n    return None\n" * 50,
}
# Incompressible filler that separates two groups of .py members by more than MERGE_GAP.
BLOB = "vllm/_C.abi3.so"


def _record_hash(data: bytes) -> str:
    return record_hash(data)


def build_wheel(
    files: dict[str, bytes] | None = None,
    *,
    version: str = VERSION,
    blob_size: int = (MERGE_GAP * 3) // 2,
    corrupt: str | None = None,
    extra_members: dict[str, bytes] | None = None,
    unlisted: tuple[str, ...] = (),
) -> bytes:
    """A tiny but real vLLM wheel: .py members, a big incompressible blob between them, dist-info."""
    files = dict(FILES if files is None else files)
    names = sorted(files)
    half = len(names) // 2
    dist = f"vllm-{version}.dist-info"
    members: list[tuple[str, bytes]] = [(n, files[n]) for n in names[:half]]
    if blob_size:
        members.append((BLOB, os.urandom(blob_size)))
    members += [(n, files[n]) for n in names[half:]]
    members += list((extra_members or {}).items())
    members.append((f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n".encode()))
    members.append(
        (f"{dist}/WHEEL", b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: py3-none-any\n")
    )
    rows = []
    for name, data in members:
        if name in unlisted:
            continue
        h = _record_hash(b"tampered" if name == corrupt else data)
        rows.append(f"{name},{h},{len(data)}")
    rows.append(f"{dist}/RECORD,,")
    members.append((f"{dist}/RECORD", ("\n".join(rows) + "\n").encode()))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            zi = zipfile.ZipInfo(name, date_time=(2024, 1, 1, 0, 0, 0))
            zi.compress_type = zipfile.ZIP_STORED if name == BLOB else zipfile.ZIP_DEFLATED
            zf.writestr(zi, data)
    return buf.getvalue()


# --------------------------------------------------------------------------- local index server


class _Handler(http.server.BaseHTTPRequestHandler):
    server: IndexServer
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # keep pytest output quiet
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None, head: bool = False):
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def do_HEAD(self):
        self.do_GET(head=True)

    def do_GET(self, head: bool = False):
        srv = self.server
        rng = self.headers.get("Range")
        srv.log.append((self.command, self.path, rng))
        srv.authorizations.append(self.headers.get("Authorization"))
        path = self.path.split("?")[0]
        m = re.fullmatch(r"/(\w+)/simple/([^/]+)/", path)
        if m:
            prefix, project = m.groups()
            page = srv.pages.get((prefix, project))
            if page is None:
                return self._send(404, b"not found", head=head)
            return self._send(200, page.encode(), {"Content-Type": "text/html; charset=utf-8"}, head)
        m = re.fullmatch(r"/(range|norange|tailonly|cut|cutall)/files/([^/]+)", path)
        if not m or m.group(2) not in srv.files:
            return self._send(404, b"not found", head=head)
        data = srv.files[m.group(2)]
        if (m.group(1) == "cutall" and not head) or (m.group(1) == "cut" and rng and not head):
            return self._cut(data, rng)
        if m.group(1) == "norange" or not rng:
            return self._send(200, data, {"Content-Type": "application/octet-stream", "Accept-Ranges": "none"}, head)
        size = len(data)
        if m.group(1) == "tailonly" and not rng.startswith("bytes=-"):
            # honours the first (suffix) range, then stops honouring ranges
            return self._send(200, data, {"Content-Type": "application/octet-stream"}, head)
        mr = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
        if not mr or (not mr.group(1) and not mr.group(2)):
            return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head)
        a, b = mr.groups()
        if not a:
            start, end = max(0, size - int(b)), size - 1
        else:
            start, end = int(a), min(int(b) if b else size - 1, size - 1)
        if start >= size or start > end:
            return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, head)
        srv.range_bytes += end - start + 1
        self._send(
            206, data[start : end + 1], {"Content-Range": f"bytes {start}-{end}/{size}", "Accept-Ranges": "bytes"}, head
        )

    def _cut(self, data: bytes, rng: str | None):
        """The connection breaks half-way through the body (a proxy reset, a dropped link): the
        headers promise the whole range (or file), half of it comes, then the socket closes."""
        mr = re.fullmatch(r"bytes=(\d*)-(\d*)", (rng or "").strip())
        if mr and mr.group(1):
            start, end = int(mr.group(1)), min(int(mr.group(2) or len(data) - 1), len(data) - 1)
        elif mr and mr.group(2):
            start, end = max(0, len(data) - int(mr.group(2))), len(data) - 1
        body = data[start : end + 1] if mr else data
        self.send_response(206 if mr else 200)
        if mr:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body[: len(body) // 2])
        self.wfile.flush()
        self.close_connection = True


class IndexServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.files: dict[str, bytes] = {}
        self.pages: dict[tuple[str, str], str] = {}
        self.log: list[tuple[str, str, str | None]] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header, in log's order
        self.range_bytes = 0
        self.url = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        self.running = True

    def publish(
        self, filename: str, data: bytes, *, prefix: str = "range", sha256: str | None = None, extra: list[str] = ()
    ):
        """Serve ``data`` as ``filename`` and list it on the ``/<prefix>/simple/vllm/`` page."""
        self.files[filename] = data
        digest = sha256 or hashlib.sha256(data).hexdigest()
        kind = prefix if prefix in ("norange", "tailonly", "cut", "cutall") else "range"
        links = [f'<a href="{self.url}/{kind}/files/{filename}#sha256={digest}">{filename}</a>', *extra]
        old = self.pages.get((prefix, "vllm"), "")
        body = old.replace("</body></html>", "") or "<!DOCTYPE html><html><body>\n"
        self.pages[(prefix, "vllm")] = body + "\n".join(links) + "\n</body></html>"

    def handle_error(self, request, client_address):
        # Clients abandon 200 responses to range requests mid-body (by design): not an error.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def index(self, prefix: str = "range") -> str:
        return f"{self.url}/{prefix}/simple/"

    def stop(self):
        if self.running:
            self.shutdown()
            self.server_close()
            self.running = False


def use_index(monkeypatch, url: str, extra: str | None = None):
    monkeypatch.setenv("PIP_INDEX_URL", url)
    if extra is not None:
        monkeypatch.setenv("PIP_EXTRA_INDEX_URL", extra)


def state_of(cache: Path, version: str = VERSION) -> dict:
    return json.loads((cache / "releases" / version / STATE_FILE).read_text())


def no_network(monkeypatch):
    """Make any index lookup or session creation fail loudly."""

    def boom(*a, **k):
        raise AssertionError("network/index used on what should be a cache hit")

    monkeypatch.setattr(net, "pip_settings", boom)
    monkeypatch.setattr(net, "make_session", boom)


def isolate_cache(tmp_path: Path, monkeypatch) -> Path:
    """PATCHKIT_CACHE_DIR under tmp_path, and pip's settings free of this machine's pip.conf and PIP_*."""
    d = tmp_path / "cache"
    monkeypatch.setenv("PATCHKIT_CACHE_DIR", str(d))
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for var in ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_NO_INDEX", "PIP_CERT", "PIP_PROXY"):
        monkeypatch.delenv(var, raising=False)
    return d
