"""Opens the built documentation site in a real headless browser and checks what a reader sees.

    python docs/check_site.py site [--chromium /usr/bin/chromium]

Serves the folder ``site`` (``make docs`` builds it) on a free localhost port and opens, in headless Chromium driven
by Playwright (the system's Chromium: Debian's package ``chromium``; Playwright's own browser download is not
needed), the home page, an env page, an algorithm page, the DVRP results and an API page. On each it checks the
page's heading, that every image has loaded (``naturalWidth > 0``), and the images the page must show (the route
plot, the hockey frames, the learning curve). Prints one JSON line; exits 1 naming each failed check, 2 when the
site or the browser is missing.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import sys
import threading

# (path, text the first heading must contain, images the page must show (file names), text the page must contain)
PAGES = (
    ("", "rlpipe", (), "Which config to start from"),
    ("envs/dvrp/", "The DVRP env", ("dvrp-routes.png",), "window offer"),
    ("envs/hockey/", "air hockey", ("hockey-game.png",), "BasicOpponent"),
    ("dvrp-results/", "DVRP results", ("dvrp-learning-curve.png",), "hindsight"),
    ("algorithms/ppo/", "PPO", (), "Logged metrics"),
    ("api/envs.dvrp/", "envs.dvrp", (), "DVRPEnv"),
)
# flags a headless Chromium needs on a machine without a network or a sandbox
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync")


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without a log line per request."""

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (the base class's signature)
        """Log nothing."""


def serve(folder: str) -> http.server.ThreadingHTTPServer:
    """Serve ``folder`` on 127.0.0.1 at a free port, in a daemon thread."""
    handler = functools.partial(QuietHandler, directory=folder)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def check_page(page, base: str, path: str, heading: str, images: tuple[str, ...], text: str) -> list[str]:
    """Open one page and return what is wrong with it (empty: nothing)."""
    problems = []
    response = page.goto(base + path, wait_until="load")
    if response is None or response.status != 200:
        return [f"{path or '/'}: HTTP {response.status if response else 'no response'}"]
    h1 = page.locator("article h1").first.inner_text(timeout=5000) if page.locator("article h1").count() else ""
    if heading.lower() not in h1.lower():
        problems.append(f"{path or '/'}: heading {h1!r} does not contain {heading!r}")
    shown = page.evaluate("""() => Array.from(document.querySelectorAll('article img')).map(
        img => ({src: img.getAttribute('src'), loaded: img.complete && img.naturalWidth > 0}))""")
    problems += [f"{path or '/'}: image {img['src']} did not load" for img in shown if not img["loaded"]]
    for name in images:
        if not any(img["src"].endswith(name) and img["loaded"] for img in shown):
            problems.append(f"{path or '/'}: image {name} is not shown")
    if text.lower() not in page.locator("article").inner_text().lower():
        problems.append(f"{path or '/'}: the text {text!r} is missing")
    return problems


def main() -> int:
    """Check every page of :data:`PAGES`; print the JSON summary."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("site", help="the built site folder (make docs)")
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM", shutil.which("chromium") or
                                                            "/usr/bin/chromium"), help="the Chromium executable")
    args = parser.parse_args()
    if not os.path.isfile(os.path.join(args.site, "index.html")):
        print(f"error: {args.site}/index.html does not exist: build the site first (make docs)", file=sys.stderr)
        return 2
    if not os.path.isfile(args.chromium):
        print(f"error: no Chromium at {args.chromium} (Debian: apt-get install chromium; or --chromium PATH)",
              file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    server = serve(args.site)
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    problems: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=args.chromium, headless=True, args=list(CHROMIUM_ARGS))
            page = browser.new_page()
            for path, heading, images, text in PAGES:
                problems += check_page(page, base, path, heading, images, text)
            browser.close()
    finally:
        server.shutdown()
    print(json.dumps({"pages": len(PAGES), "problems": problems}))
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
