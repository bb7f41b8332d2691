"""An index that sends its page a byte at a time, or sends gigabytes: requests' timeout is per socket
read and it reads a body whole, so `patchkit fetch` (and verify --vllm-version, wheel VERSION) waited
for ever or filled memory (review38 B4). A body read whole is now bounded in size and in slowness."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
import requests
from helpers import run_cli

from patchkit.base.errors import FetchError
from patchkit.fetch import download

pytestmark = pytest.mark.slow  # ~10 s of a slow server, and 256 MiB sent: make test runs them


class _Hostile(http.server.BaseHTTPRequestHandler):
    mode = "drip"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        if self.mode == "drip":
            self.send_header("Content-Length", "100000")
            self.end_headers()
            try:
                for _ in range(100):
                    self.wfile.write(b"<")
                    self.wfile.flush()
                    time.sleep(0.5)
            except OSError:
                return
        else:
            self.end_headers()  # no length: the body ends when the connection does
            block = b"<a>" * (1 << 16)
            try:
                for _ in range((300 << 20) // len(block)):
                    self.wfile.write(block)
            except OSError:
                return

    def log_message(self, *args):
        pass


@pytest.fixture(params=["drip", "huge"])
def hostile_index(request):
    handler = type("Handler", (_Hostile,), {"mode": request.param})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield request.param, f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


def test_a_page_sent_too_slowly_or_too_large_ends_the_fetch_with_exit_4(hostile_index, tmp_path):
    mode, url = hostile_index
    env = {"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": url, "PIP_DEFAULT_TIMEOUT": "2", "PIP_EXTRA_INDEX_URL": ""}
    started = time.monotonic()
    done = run_cli("fetch", "0.99.0", "--dest", tmp_path / "tree", env=env)
    assert done.returncode == 4, (done.returncode, done.stderr)
    said = "sent more than 256 MiB" if mode == "huge" else "(under 4 KiB/s)"
    assert said in done.stderr, done.stderr
    assert time.monotonic() - started < 60


class _HostileRedirect(http.server.BaseHTTPRequestHandler):
    """A 302 to a page that is not there, its own body drip-fed or endless (it notes what it was asked
    and counts what it sent)."""

    mode = "drip"
    sent: list[int]
    asked: list[str]

    def do_GET(self):
        self.asked.append(self.path)
        if not self.path.startswith("/simple/"):
            self.send_error(404)
            return
        self.send_response(302)
        self.send_header("Location", "/elsewhere" + self.path)
        drip = self.mode == "drip"
        if drip:
            self.send_header("Content-Length", "100000")
        self.end_headers()  # huge: no length, the body ends when the connection does
        block = b"<" if drip else b"<a>" * (1 << 16)
        try:
            for _ in range(100 if drip else (300 << 20) // len(block)):
                self.wfile.write(block)
                self.wfile.flush()
                self.sent.append(len(block))
                time.sleep(0.5 if drip else 0)
        except OSError:
            return

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("mode", ["drip", "huge"])
def test_a_redirects_body_is_not_read_whole(tmp_path, mode):
    """requests reads a 3xx's body whole before it follows it: a 302 sending 300 MiB, or a byte each
    0.5 s (under the per-read timeout), filled memory or held the fetch. The redirect is followed unread."""
    sent: list[int] = []
    asked: list[str] = []
    handler = type("Handler", (_HostileRedirect,), {"mode": mode, "sent": sent, "asked": asked})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    env = {"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": f"{url}/simple", "PIP_DEFAULT_TIMEOUT": "2"}
    started = time.monotonic()
    try:
        done = run_cli("fetch", "0.99.0", "--dest", tmp_path / "tree", env={**env, "PIP_EXTRA_INDEX_URL": ""})
    finally:
        server.shutdown()
        server.server_close()
    elapsed = time.monotonic() - started
    assert elapsed < 20 and sum(sent) < 32 << 20, (elapsed, sum(sent))  # main: 53 s; 300 MiB read
    assert "/elsewhere/simple/vllm/" in asked, asked  # followed
    assert done.returncode == 4 and "no project 'vllm'" in done.stderr, (done.returncode, done.stderr)


def test_a_whole_wheel_sent_too_slowly_or_without_end_is_cut_off(hostile_index, tmp_path, monkeypatch):
    """The whole-wheel download (a server without byte ranges) streamed with iter_content, which waits
    for a full MiB: a byte each 0.5 s held it past the 2 s read timeout; an endless body filled the disk."""
    mode, url = hostile_index
    monkeypatch.setattr(download, "DOWNLOAD_LIMIT", 8 << 20)  # the endless body's bound, 4 GiB for real
    dest = tmp_path / "vllm-0.99.0-py3-none-any.whl"
    started = time.monotonic()
    with pytest.raises(FetchError) as raised, requests.Session() as session:
        download.download_wheel(session, f"{url}/x.whl", None, dest, timeout=2, say=lambda _: None)
    elapsed = time.monotonic() - started
    said = "sent more than 8 MiB" if mode == "huge" else "(under 4 KiB/s)"
    assert said in raised.value.message and elapsed < 20, (raised.value.message, elapsed)
    assert list(tmp_path.iterdir()) == []  # neither the wheel nor its .part
