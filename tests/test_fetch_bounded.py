"""An index that sends its page a byte at a time, or sends gigabytes: requests' timeout is per socket
read and it reads a body whole, so `patchkit fetch` (and verify --vllm-version, wheel VERSION) waited
for ever or filled memory (review38 B4). A body read whole is now bounded in size and in slowness."""

from __future__ import annotations

import http.server
import threading
import time

import pytest
from helpers import run_cli

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
