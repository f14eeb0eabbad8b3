"""A site served from loopback and opened in headless Chromium (Debian's, driven by
Playwright for Python: no browser download), for the tests of `kt.export.web`. Every request
the page makes to another host is refused and recorded: a test fails on any.

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

    def log_message(self, *args):  # the test's output, not the server's
        pass


@contextlib.contextmanager
def served(directory):
    """`directory` served over HTTP on 127.0.0.1 (any free port), as `python -m
    http.server` serves it: yields the site's URL."""
    handler = functools.partial(_Quiet, directory=str(directory))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def opened(url: str):
    """A fresh headless Chromium (its own profile) with `url` open: yields `(page,
    foreign)`, `foreign` the list of the URLs of other hosts the page asked for (each
    refused)."""
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

    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile,
            executable_path=chromium(),
            headless=True,
            args=FLAGS,
            service_workers="block",  # so that every request passes `route`
        )
        try:
            context.route("**/*", route)
            page = context.new_page()
            page.goto(url)
            yield page, foreign
        finally:
            context.close()


__all__ = ["FLAGS", "chromium", "opened", "served"]


if __name__ == "__main__":  # python -m tests.browser SITE: serves it, prints the URL
    import sys
    import time

    with served(Path(sys.argv[1])) as site:
        print(site, flush=True)
        while True:
            time.sleep(3600)
