"""A site served from loopback and opened in headless Chromium (Debian's, driven by
Playwright for Python: no browser download), for the tests of `kt.export.web`. Every request
the page makes to another host is refused and recorded: a test fails on any. With the page's
service worker allowed, the worker's own requests pass the same check (Playwright's service
worker network events, `SERVICE_WORKER_EVENTS`, Chromium's only), and the browser resolves
no host but the loopback's.

`make test` installs both first (the Makefile's browser step: chromium from apt where it is
missing, playwright from requirements.txt). The binary: $CHROMIUM, else the first of
`chromium` and `chromium-browser` on the PATH.
"""

import contextlib
import functools
import http.server
import os
import shutil
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

# The launch flags of a quiet browser: no sandbox (CI runs as root), no GPU, no network of
# its own (updates, sync, QUIC probes).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Playwright routes a service worker's own requests where its driver starts with this set.
SERVICE_WORKER_EVENTS = "PW_EXPERIMENTAL_SERVICE_WORKER_NETWORK_EVENTS"


def chromium() -> str:
    """The Chromium binary, or a message saying how to install it."""
    found = (
        os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    )
    if not found:
        raise FileNotFoundError(
            "no chromium on the PATH: `make test` installs it (apt-get install chromium), or "
            "set $CHROMIUM to a Chromium binary"
        )
    return found


class _Quiet(http.server.SimpleHTTPRequestHandler):
    extensions_map = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".js": "text/javascript",
    }

    def log_request(self, code="-", size="-"):  # every answer, recorded (`Server.errors`)
        self.server.answered.append((urlsplit(getattr(self, "path", "")).path, int(code)))

    def log_message(self, *args):  # the test's output, not the server's
        pass


class Server:
    """`directory` served over HTTP on 127.0.0.1 (any free port), as `python -m http.server`
    serves it, from a thread: `url`, the site's; `errors()`, the requests it refused;
    `stop()` closes it (a page then finds no server, as offline)."""

    def __init__(self, directory):
        handler = functools.partial(_Quiet, directory=str(directory))
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.answered = []  # (path, status) of each request, as answered
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        self.stopped = False

    def errors(self) -> list[tuple[str, int]]:
        """The requests answered with an error status (400 or above), as `(path, status)` in
        their order: a file the page asks for and the site lacks (404) is an error in the
        browser's console."""
        return [(path, status) for path, status in self._server.answered if status >= 400]

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self._server.shutdown()
            self._server.server_close()


@contextlib.contextmanager
def served(directory):
    """`directory` served on loopback: yields its `Server` (`.url`), stopped at the end."""
    server = Server(directory)
    try:
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def _driver_environment(service_workers: bool):
    """Playwright's driver started with `SERVICE_WORKER_EVENTS` set where service workers
    are allowed (the driver reads it at its start), the environment as it was after."""
    before = os.environ.get(SERVICE_WORKER_EVENTS)
    if service_workers:
        os.environ[SERVICE_WORKER_EVENTS] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SERVICE_WORKER_EVENTS, None)
        else:
            os.environ[SERVICE_WORKER_EVENTS] = before


@contextlib.contextmanager
def opened(url: str, *, service_workers: bool = False):
    """A fresh headless Chromium (its own profile) with `url` open: yields `(page,
    foreign)`, `foreign` the list of the URLs of other hosts the page or its service
    worker asked for (each refused). `service_workers`: let the page register its worker
    (blocked by default, so that every request passes the check without Playwright's
    experimental events)."""
    from playwright.sync_api import sync_playwright

    host = urlsplit(url).netloc
    foreign: list[str] = []

    def route(request_route):
        asked = urlsplit(request_route.request.url)
        if asked.scheme in ("http", "https", "ws", "wss") and asked.netloc != host:
            foreign.append(request_route.request.url)
            request_route.abort()
        else:
            request_route.continue_()

    args = FLAGS
    if service_workers:  # and nothing leaves for another host, checked or not
        args = [*FLAGS, "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"]
    with tempfile.TemporaryDirectory() as profile, contextlib.ExitStack() as stack:
        with _driver_environment(service_workers):
            playwright = stack.enter_context(sync_playwright())
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=chromium(),
            headless=True,
            args=args,
            service_workers="allow" if service_workers else "block",
        )
        try:
            context.route("**/*", route)
            page = context.new_page()
            page.goto(url)
            yield page, foreign
        finally:
            context.close()


__all__ = ["FLAGS", "SERVICE_WORKER_EVENTS", "Server", "chromium", "opened", "served"]


if __name__ == "__main__":  # python -m tests.browser SITE: serves it, prints the URL
    import sys
    import time

    with served(Path(sys.argv[1])) as site:
        print(site.url, flush=True)
        while True:
            time.sleep(3600)
