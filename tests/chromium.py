"""Headless Chromium (Debian's `chromium`, installed by scripts/start_services.sh) driven
over the DevTools protocol with websocket-client: open a page from disk, collect its console
errors and uncaught exceptions, read its images' load state, take a full-page screenshot.

    with Chromium(tmp_path) as browser:
        page = browser.load(Path("workspace/runs/<id>/report.html"))
        page.errors, page.images
        browser.screenshot(Path("docs/images/report.png"))

Run as a script it makes the screenshot under docs/ (docs/guide/report.md):

    python -m tests.chromium workspace/runs/<id>/report.html docs/images/report.png
"""

from __future__ import annotations

import base64
import dataclasses
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path
from typing import Any

# Headless, no GPU, nothing that waits on a service this machine lacks: the keyring (D-Bus), the
# crash reporter, a small /dev/shm (Puppeteer's launch defaults do the same).
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--no-default-browser-check", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-extensions",
         "--disable-breakpad", "--disable-dev-shm-usage", "--password-store=basic",
         "--use-mock-keychain", "--hide-scrollbars", "--remote-debugging-port=0")
# One start may hang before it opens its DevTools port (seen once in a CI of 1,073 tests, with
# no output to say why): it is stopped, its log kept, and a second one starts with a new profile.
STARTS = 2
# Every <img>: its report file name, whether it finished loading and its decoded size.
_IMAGES = ("JSON.stringify(Array.from(document.images).map(i => ({file: i.dataset.file, "
           "complete: i.complete, width: i.naturalWidth, height: i.naturalHeight})))")


@dataclasses.dataclass
class Page:
    """What a loaded page showed: its images and every error it reported."""

    images: list[dict[str, Any]]
    errors: list[str]


class Chromium:
    """One headless Chromium with a fresh profile in `folder`; stopped on exit."""

    def __init__(self, folder: Path, width: int = 1280) -> None:
        self.folder, self.width = Path(folder), width
        self._ids = itertools.count(1)
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        import websocket

        hung: list[str] = []
        for start in range(1, STARTS + 1):
            try:
                port = self._start(self.folder / f"chromium-{start}")
                break
            except TimeoutError as error:
                hung.append(f"{error}; its log ends:\n{self._log_tail()}")
                self._stop()
        else:
            raise TimeoutError("\n".join(hung))
        if hung:  # shown in pytest's warnings summary, so a hang that a restart hid is seen
            warnings.warn(f"chromium: a start hung and was restarted: {hung[0]}", stacklevel=2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as reply:
            targets = json.load(reply)
        page = next(t for t in targets if t["type"] == "page")
        self._socket = websocket.create_connection(page["webSocketDebuggerUrl"], timeout=60,
                                                   suppress_origin=True)
        for method in ("Page.enable", "Runtime.enable", "Log.enable"):
            self._call(method)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._socket.close()
        finally:
            self._stop()

    def _start(self, folder: Path) -> int:
        """Starts one Chromium with its profile and log in `folder`; returns its DevTools port."""
        profile = folder / "profile"
        profile.mkdir(parents=True, exist_ok=True)
        self._log_path = folder / "chromium.log"
        self._log = open(self._log_path, "wb")  # noqa: SIM115 - closed in _stop
        self._process = subprocess.Popen(
            [shutil.which("chromium") or "chromium", *FLAGS, f"--user-data-dir={profile}",
             f"--window-size={self.width},900", "about:blank"],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        return self._port(profile / "DevToolsActivePort")

    def _stop(self) -> None:
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait()
        self._log.close()

    def _log_tail(self) -> str:
        return self._log_path.read_text(errors="replace")[-2000:]

    def _port(self, active_port: Path, timeout: float = 60.0) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"chromium exited with {self._process.returncode}: "
                                   f"{self._log_tail()}")
            if active_port.exists() and active_port.read_text().strip():
                return int(active_port.read_text().split()[0])
            time.sleep(0.1)
        raise TimeoutError(f"chromium wrote no {active_port} within {timeout} s")

    def _call(self, method: str, **params: Any) -> dict[str, Any]:
        """Sends one command; keeps the events that arrive before its answer."""
        call_id = next(self._ids)
        self._socket.send(json.dumps({"id": call_id, "method": method, "params": params}))
        while True:
            message = json.loads(self._socket.recv())
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._events.append(message)

    def _wait_for(self, method: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self._events):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {method} within {timeout} s")
            self._events.append(json.loads(self._socket.recv()))

    def load(self, path: Path) -> Page:
        """Opens `path` (file://), waits for its load event, then reads its images and the
        errors it reported (console.error, uncaught exceptions, failed loads)."""
        self._events.clear()
        self._call("Page.navigate", url=Path(path).resolve().as_uri())
        self._wait_for("Page.loadEventFired")
        result = self._call("Runtime.evaluate", expression=_IMAGES, returnByValue=True)
        images = json.loads(result["result"]["value"])
        return Page(images, [_error(e) for e in self._events if _error(e)])

    def screenshot(self, out: Path) -> Path:
        """The whole page as a PNG, at the browser's width."""
        height = self._call("Runtime.evaluate", expression="document.body.scrollHeight",
                            returnByValue=True)["result"]["value"]
        self._call("Emulation.setDeviceMetricsOverride", width=self.width, height=int(height),
                   deviceScaleFactor=1, mobile=False)
        shot = self._call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(base64.b64decode(shot["data"]))
        return out


def _error(event: dict[str, Any]) -> str:
    """The text of an error event, else ""."""
    method, params = event.get("method"), event.get("params") or {}
    if method == "Runtime.exceptionThrown":
        details = params.get("exceptionDetails") or {}
        return (details.get("exception") or {}).get("description") or details.get("text", "?")
    if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
        return " ".join(str(arg.get("value", arg.get("description", "")))
                        for arg in params.get("args") or [])
    if method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
        entry = params["entry"]
        return f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}".strip()
    return ""


if __name__ == "__main__":
    report, png = Path(sys.argv[1]), Path(sys.argv[2])
    with tempfile.TemporaryDirectory(prefix="mptfx-chromium-") as scratch, \
            Chromium(Path(scratch)) as browser:
        loaded = browser.load(report)
        if loaded.errors or not all(i["complete"] and i["width"] for i in loaded.images):
            sys.exit(f"{report}: {loaded.errors or loaded.images}")
        print(browser.screenshot(png))
