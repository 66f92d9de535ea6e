"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol through a pipe
(--remote-debugging-pipe: no debugging port, nothing listening). A Browser holds the process;
each Page is a tab in a browser context of its own (its own cookies), so two users' sessions
never mix. Used by the dashboard's browser test."""

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def chromium_available():
    return os.path.exists(CHROMIUM)


class Browser:
    def __init__(self):
        self.profile = tempfile.mkdtemp(prefix="herd-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        # The child's ends move above 4, so that making them fds 3 and 4 never closes one.
        to_child_r, from_child_w = (self._above_4(to_child_r), self._above_4(from_child_w))
        # The debugging pipe is fds 3 (commands in) and 4 (replies out) of the browser.
        argv = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                "--ignore-certificate-errors", "--no-first-run", "--no-default-browser-check",
                "--disable-extensions", "--disable-background-networking", "--disable-sync",
                "--disable-component-update", "--disable-features=Translate,MediaRouter",
                "--mute-audio", "about:blank"]
        cmd = 'exec "$@" 3<&%d 4>&%d %d<&- %d>&-' % (to_child_r, from_child_w, to_child_r,
                                                     from_child_w)
        self.proc = subprocess.Popen(["bash", "-c", cmd, "chromium", *argv],
                                     pass_fds=(to_child_r, from_child_w),
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._next_id = 0
        self._events = []

    @staticmethod
    def _above_4(fd):
        high = fcntl.fcntl(fd, fcntl.F_DUPFD, 10)
        os.close(fd)
        return high

    # ---- the protocol

    def _read_message(self, deadline):
        import select
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no message from chromium")
            ready, _, _ = select.select([self._from_child], [], [], left)
            if not ready:
                continue
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium exited: " +
                                   self.proc.stderr.read().decode(errors="replace")[-2000:])
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def send(self, method, params=None, session=None, timeout=30):
        self._next_id += 1
        msg = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._read_message(deadline)
            if m.get("id") == self._next_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            if m.get("method", "").startswith("Page."):
                self._events.append(m)

    def wait_event(self, method, session=None, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            for i, m in enumerate(self._events):
                if m["method"] == method and (session is None or m.get("sessionId") == session):
                    return self._events.pop(i)
            m = self._read_message(deadline)
            if m.get("method", "").startswith("Page."):
                self._events.append(m)

    def drop_events(self, method, session):
        self._events = [m for m in self._events
                        if not (m["method"] == method and m.get("sessionId") == session)]

    def page(self):
        ctx = self.send("Target.createBrowserContext")["browserContextId"]
        target = self.send("Target.createTarget", {"url": "about:blank",
                                                   "browserContextId": ctx})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target,
                                                      "flatten": True})["sessionId"]
        return Page(self, session, ctx)

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        for fd in (self._to_child, self._from_child):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)


class Page:
    def __init__(self, browser, session, context):
        self.b = browser
        self.session = session
        self.context = context
        self.send("Page.enable")
        self.set_width(1280)

    def send(self, method, params=None, timeout=30):
        return self.b.send(method, params, self.session, timeout)

    def set_width(self, width, height=900):
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": width, "height": height, "deviceScaleFactor": 1,
                   "mobile": width < 600})

    def goto(self, url):
        """Loads `url`; one that differs from the page's only after '#' is a same-document
        navigation (no load event): it is set as location.href and waited for by its hash."""
        current = self.eval("location.href")
        if "#" in url and current.split("#")[0] == url.split("#")[0]:
            self.eval(f"location.href = {json.dumps(url)}")
            self.wait_for(f"location.href === {json.dumps(url)}")
            return
        self.b.drop_events("Page.loadEventFired", self.session)
        self.send("Page.navigate", {"url": url})
        self.b.wait_event("Page.loadEventFired", self.session)

    def eval(self, expression, timeout=30):
        r = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                           "awaitPromise": True}, timeout)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression, timeout=30, what=None):
        """Polls a JavaScript expression until it is truthy."""
        deadline = time.monotonic() + timeout
        last = error = None
        while time.monotonic() < deadline:
            try:
                last = self.eval(f"!!({expression})")
            except RuntimeError as e:  # not there yet (an element missing): not true
                last = None
                error = str(e)
            if last:
                return last
            time.sleep(0.2)
        text = self.eval("document.body ? document.body.innerText + '\\n---- DOM:\\n' + "
                         "document.querySelector('main').outerHTML.slice(-2500) : ''")
        raise AssertionError(f"timed out waiting for {what or expression} (last: {last!r}, "
                             f"error: {error});"
                             f" the page says:\n{text[:3000]}")

    def text(self, selector="body"):
        return self.eval(f"(document.querySelector({json.dumps(selector)}) || {{}}).innerText "
                         "|| ''")

    def click(self, selector):
        ok = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)});"
                       " if (!e) return false; e.click(); return true; })()")
        if not ok:
            raise AssertionError(f"nothing to click at {selector}")

    def key(self, key, keycode=0, text=None):
        down = {"type": "keyDown", "key": key, "code": key, "windowsVirtualKeyCode": keycode}
        if text:
            down["text"] = text
        self.send("Input.dispatchKeyEvent", down)
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", "key": key, "code": key,
                                             "windowsVirtualKeyCode": keycode})

    def cookies(self):
        return self.send("Network.getCookies")["cookies"]

    def screenshot(self, path):
        data = self.send("Page.captureScreenshot", {"format": "png",
                                                    "captureBeyondViewport": True})["data"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
