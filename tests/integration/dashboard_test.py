"""The team server's web dashboard in a real browser (headless Chromium over the DevTools
protocol, browser.py): a server on 127.0.191.1 with its users (api_server_test's setup), alice's
2-node local cluster launched through it, and each user in a browser context of their own,
logged in with the one-time link of `herd dashboard`. Checked: the session cookie's attributes,
a spent link, the clusters, cluster and job pages, the cluster's GPU chart (the server's own
samples: GPUs in use while the job holds some), the infra page (the cluster's nodes with their GPUs
in use, alice's SSH node pool with its hosts), log lines arriving live,
a cancel from the page
(CANCELLED, and in `herd api audit`), bob not seeing alice's cluster, an expired session acting on
nothing, a cross-origin POST refused, script in a job name, a log line and a cluster name (in the
page's address) shown as text, the keyboard alone, and logout. Screenshots of each page at 1280
and 390 pixels go to $HERD_TEST_ARTIFACTS. The cluster's nodes have two GPUs each: their herdlet is
a wrapper (HERDLET_BINARY) that starts the real one with the fake NVML library ($FAKE_NVML) on its
library path, as gpu_alloc_test's agents have it; the job holds one per node. Needs root, ip netns,
herd-api, chromium and FAKE_NVML; skipped otherwise."""

import http.client
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(__file__))
import api_server_test  # noqa: E402  (its server-and-users setup and cleanup)
from browser import Browser, chromium_available  # noqa: E402
from herd_env import HERD, netns_available  # noqa: E402

HOST = "127.0.191.1"
# Alice's SSH node pool on the server (never connected to: the infra page lists its hosts).
POOL_HOSTS = ["127.0.231.10", "127.0.231.11"]
ARTIFACTS = os.environ.get("HERD_TEST_ARTIFACTS") or tempfile.mkdtemp(prefix="herd-dash-art-")
XSS_NAME = '<script>window.__xss=1</script>"><img src=x onerror="window.__xss=2">'
XSS_LINE = '"><img src=x onerror="window.__xss=3"><script>window.__xss=4</script>'
NO_XSS = ("window.__xss === undefined && document.querySelectorAll('img').length === 0 && "
          "document.querySelectorAll('main script').length === 0")
FAKE_NVML = os.environ.get("FAKE_NVML", "")
GPUS_PER_NODE = 2


def herdlet_with_fake_gpus(directory):
    """A herdlet for HERDLET_BINARY: the build's, started with the fake NVML library on its library
    path and GPUS_PER_NODE H200s. The install copies it to each node as $DIR/bin/herdlet; `exec -a`
    keeps that name in the process's command line, which is how the install scripts find it."""
    real = os.path.abspath(os.environ.get("HERDLET") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(HERD))), "agent", "herdlet"))
    path = os.path.join(directory, "herdlet-fake-gpus")
    with open(path, "w") as f:
        f.write("#!/bin/bash\n"
                f"export LD_LIBRARY_PATH={os.path.dirname(os.path.abspath(FAKE_NVML))}\n"
                f"export FAKE_NVML_GPUS='{','.join(['NVIDIA H200'] * GPUS_PER_NODE)}'\n"
                f'exec -a "$0" {real} "$@"\n')
    os.chmod(path, 0o755)
    return path


@unittest.skipUnless(os.geteuid() == 0 and netns_available() and api_server_test.HERD_API and
                     chromium_available() and FAKE_NVML,
                     "needs root, ip netns, HERD_API (herd-api), chromium and FAKE_NVML")
class DashboardTest(unittest.TestCase):
    CLUSTER = "hdash1"
    DB = None

    @classmethod
    def start_server(cls):
        # The server's commands install this herdlet on the cluster's nodes.
        cls.admin.env["HERDLET_BINARY"] = herdlet_with_fake_gpus(cls.server_dir)
        cls.admin.herd("api", "start", "--home", cls.home, "--host", HOST, "--port",
                       str(cls.port), timeout=60)

    @classmethod
    def setUpClass(cls):
        api_server_test.ApiServerTest.setUpClass.__func__(cls)
        cls.browser = None
        try:
            cls.endpoint = cls.info["endpoint"]
            assert cls.endpoint == f"https://{HOST}:{cls.port}", cls.endpoint
            task = os.path.join(cls.alice.dir, "task.yaml")
            with open(task, "w") as f:
                f.write("name: " + json.dumps(XSS_NAME) + "\nnum_nodes: 2\n"
                        "resources:\n  infra: local\n  accelerators: H200:1\nrun: |\n"
                        "  echo " + json.dumps(XSS_LINE).replace("$", "\\$") + "\n"
                        "  for i in $(seq 1 900); do echo \"rank $SKYPILOT_NODE_RANK line $i\";"
                        " sleep 0.3; done\n")
            cls.alice.herd("launch", "-c", cls.CLUSTER, "-y", "-d", task, timeout=300)
            # The server runs alice's commands in her home there: her pools file goes in it.
            pools = os.path.join(cls.home, "users", "alice", "herd", "ssh_node_pools.yaml")
            with open(pools, "w") as f:
                f.write("lab:\n  user: root\n  hosts:\n" +
                        "".join(f"    - {h}\n" for h in POOL_HOSTS))
            cls.browser = Browser()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            if getattr(cls, "browser", None):
                cls.browser.close()
            # The server's last words go with the test's output (ctest shows it on a failure), so
            # a browser call that gets no answer says whether the server saw the request.
            try:
                with open(os.path.join(cls.home, "server.log"), errors="replace") as f:
                    sys.stderr.write("herd-api server.log (end):\n" + "".join(f.readlines()[-60:]))
            except OSError as e:
                sys.stderr.write(f"no herd-api server.log: {e}\n")
        finally:
            api_server_test.ApiServerTest.tearDownClass.__func__(cls)

    # ---- helpers

    def login(self, client, *extra):
        url = json.loads(client.out("dashboard", "--no-open", "-o", "json", *extra))["url"]
        self.assertTrue(url.startswith(self.endpoint + "/dashboard/login?code="), url)
        self.assertNotIn(client.token, url)
        page = self.browser.page()
        page.goto(url)
        return page, url

    def shoot(self, page, name):
        for width in (1280, 390):
            page.set_width(width)
            time.sleep(0.3)
            page.screenshot(os.path.join(ARTIFACTS, f"{name}-{width}.png"))
            # Nothing wider than the screen but the tables, which scroll in their own box.
            overflow = page.eval("document.documentElement.scrollWidth - window.innerWidth")
            self.assertLessEqual(overflow, 1, f"{name} at {width}px scrolls sideways")
        page.set_width(1280)

    def job_id(self):
        jobs = json.loads(self.alice.out("queue", self.CLUSTER, "-o", "json"))
        return min(j["id"] for j in jobs)

    # ---- the tests, in order

    def test_10_the_one_time_link_sets_a_strict_httponly_secure_cookie(self):
        page, url = self.login(self.alice)
        page.wait_for("document.getElementById('who').textContent === 'alice'", what="alice")
        self.assertEqual(page.eval("location.pathname"), "/dashboard/")
        cookies = {c["name"]: c for c in page.cookies()}
        c = cookies["herd_session"]
        self.assertTrue(c["httpOnly"])
        self.assertTrue(c["secure"])
        self.assertEqual(c["sameSite"], "Strict")
        self.assertEqual(c["path"], "/dashboard")
        self.assertFalse(page.eval("document.cookie.includes('herd_session')"))
        # The link is spent: another browser gets nothing from it.
        other = self.browser.page()
        other.goto(url)
        self.assertIn("used or expired", other.text())
        self.assertEqual(other.cookies(), [])
        type(self).alice_page = page

    def test_20_clusters_page_shows_the_launched_cluster(self):
        page = self.alice_page
        page.goto(self.endpoint + "/dashboard/#/clusters")
        page.wait_for(f"[...document.querySelectorAll('main a')].some(a => a.textContent === "
                      f"'{self.CLUSTER}')", what="the cluster's row")
        page.wait_for("document.querySelector('main').innerText.includes('UP')", timeout=60)
        self.shoot(page, "clusters")

    def test_30_cluster_page_lists_nodes_and_the_job_with_its_name_as_text(self):
        page = self.alice_page
        page.goto(self.endpoint + f"/dashboard/#/cluster/{self.CLUSTER}")
        page.wait_for("document.querySelector('main').innerText.includes('Job queue')")
        page.wait_for(f"document.querySelector('main').textContent.includes({json.dumps(XSS_NAME)})",
                      what="the job's name, as text")
        nodes = page.eval("document.querySelectorAll('main table')[0].tBodies[0].rows.length")
        self.assertEqual(nodes, 2)
        self.assertTrue(page.eval("!!document.querySelector('svg.timeline')"))
        self.assertTrue(page.eval(NO_XSS))
        self.shoot(page, "cluster")

    def test_32_cluster_page_draws_the_gpus_in_use_over_time(self):
        page = self.alice_page
        page.goto(self.endpoint + f"/dashboard/#/cluster/{self.CLUSTER}")
        page.wait_for("document.querySelector('svg.gpu-chart path.in-use')", timeout=60,
                      what="the GPU chart")
        # The job holds one GPU of each node: 2 of the cluster's 4 now ...
        self.assertRegex(page.text("#gpu-now"),
                         rf"^2 of {2 * GPUS_PER_NODE} GPUs in use now \(a sample every \d+ s")
        # ... and in the server's samples (taken when the launch ended, then every interval; no
        # page asked for them), which the page refreshes into the chart: one dot per sample.
        peak = ("(m => m ? +m[1] : 0)((document.querySelector('svg.gpu-chart') || "
                "{getAttribute: () => ''}).getAttribute('aria-label').match(/at most (\\d+)/))")
        page.wait_for(f"{peak} === 2", timeout=90, what="a sample with the job's 2 GPUs in use")
        self.assertGreaterEqual(page.eval("document.querySelectorAll('svg.gpu-chart circle')"
                                          ".length"), 1)
        # Each node's GPUs from its head: "1 of 2 in use".
        cells = page.eval("[...document.querySelectorAll('main table')[0].tBodies[0].rows]"
                          ".map(r => r.cells[3].textContent)")
        self.assertEqual(cells, [f"1 of {GPUS_PER_NODE} in use"] * 2)
        self.shoot(page, "cluster-gpus")

    def test_35_infra_page_shows_the_clusters_nodes_with_their_gpus_and_the_pool(self):
        page = self.alice_page
        page.goto(self.endpoint + "/dashboard/#/clusters")
        page.wait_for("document.querySelector('main h1').textContent === 'Clusters'")
        # Linked from the nav.
        page.eval("[...document.querySelectorAll('nav a')].find(a => "
                  "a.textContent === 'Infra').click()")
        page.wait_for("location.hash === '#/infra'")
        rows = ("[...document.querySelectorAll('main tbody tr')].filter(r => "
                f"r.cells[0].textContent === '{self.CLUSTER}')")
        page.wait_for(f"{rows}.length === 2", timeout=60, what="the cluster's 2 node rows")
        nodes = page.eval(f"{rows}.map(r => [...r.cells].map(c => c.textContent))")
        for cells in nodes:
            # Cluster, Node, Address, GPUs, In use, Free, (bar), Status
            self.assertTrue(cells[1].startswith(self.CLUSTER), cells)
            gpus, used, free = (int(cells[3]), int(cells[4]), int(cells[5]))
            # The job holds one of each node's GPUs.
            self.assertEqual((gpus, used, free), (GPUS_PER_NODE, 1, GPUS_PER_NODE - 1), cells)
            self.assertEqual(cells[7], "UP", cells)
        self.assertIn("(head)", nodes[0][1] + nodes[1][1])
        sections = page.eval("[...document.querySelectorAll('main section.infra h2')]"
                             ".map(h => h.textContent)")
        self.assertTrue(any(s.startswith("local") for s in sections), sections)
        self.assertTrue(any(s.startswith("ssh/lab") for s in sections), sections)
        text = page.text("main")
        for h in POOL_HOSTS:
            self.assertIn(h, text)
        self.assertIn("0 of its 2 host(s) held by clusters", text)
        # Each host with the cluster that holds it: none here (pool_test checks `herd infra`'s
        # held_by with a cluster on a pool).
        hosts = page.eval("[...document.querySelectorAll('main .pool-hosts tbody tr')]"
                          ".map(r => [...r.cells].map(c => c.textContent))")
        self.assertEqual(hosts, [[h, "free"] for h in POOL_HOSTS])
        self.assertRegex(page.text("#infra-summary"),
                         rf"^2 of {2 * GPUS_PER_NODE} GPUs in use on \d+ node")
        self.assertTrue(page.eval(NO_XSS))
        # The keyboard alone reaches the cluster's link, and Enter follows it.
        page.eval("document.activeElement.blur()")
        for _ in range(30):
            page.key("Tab", keycode=9)
            if page.eval("document.activeElement.textContent") == self.CLUSTER:
                break
        self.assertEqual(page.eval("document.activeElement.textContent"), self.CLUSTER)
        self.shoot(page, "infra")
        page.key("Enter", keycode=13, text="\r")
        page.wait_for(f"location.hash === '#/cluster/{self.CLUSTER}'")

    def test_37_script_in_a_cluster_name_is_shown_as_text(self):
        page = self.alice_page
        # A name in the page's address: the page asks the server for it, the server refuses it
        # (no cluster name; with a '/' no path segment either) and the page says so, in text.
        for name, why in ((XSS_LINE.split("<script>")[0], "invalid cluster"),
                          (XSS_NAME, "encoded '/'")):
            page.goto(self.endpoint + "/dashboard/#/cluster/" +
                      page.eval(f"encodeURIComponent({json.dumps(name)})"))
            # The page's error alone in main. Only the address's fragment changes, so the page
            # before (the first name's error) stays until the new answer comes: wait for this
            # name's reason, not for any error.
            page.wait_for("document.querySelector('main').children.length === 1 && "
                          "(document.querySelector('main > p.error[role=alert]') || {})"
                          f".textContent?.includes({json.dumps(why)})",
                          what=f"the error {why!r}")
            self.assertIn(why, page.text("main .error"))
            self.assertTrue(page.eval(NO_XSS))
        self.shoot(page, "cluster-bad-name")

    def test_40_job_page_shows_new_log_lines_as_they_come(self):
        page = self.alice_page
        job = self.job_id()
        page.goto(self.endpoint + f"/dashboard/#/job/{self.CLUSTER}/{job}")
        page.wait_for("document.getElementById('log').textContent.includes('line ')",
                      timeout=60, what="log lines")
        count = "document.getElementById('log').textContent.split('\\n')" \
                ".filter(l => l.includes(' line ')).length"
        first = page.eval(count)
        page.wait_for(f"{count} >= {first} + 4", timeout=30, what="new log lines arriving live")
        self.assertIn("following", page.text("#log-info"))
        log = page.eval("document.getElementById('log').textContent")
        self.assertIn(XSS_LINE, log)
        self.assertIn("rank 0 line", log)
        self.assertIn("rank 1 line", log)
        self.assertTrue(page.eval(NO_XSS))
        # Search narrows the view to matching lines.
        page.eval("(() => { const s = document.getElementById('log-search');"
                  " s.value = 'rank 1 line 2'; s.dispatchEvent(new Event('input')); })()")
        matched = page.eval("[...document.querySelectorAll('#log div')].map(d => d.textContent)")
        self.assertTrue(matched and all("rank 1 line 2" in m for m in matched), matched)
        page.eval("(() => { const s = document.getElementById('log-search');"
                  " s.value = ''; s.dispatchEvent(new Event('input')); })()")
        self.shoot(page, "job")

    def test_50_cancel_from_the_page_shows_cancelled_and_is_audited(self):
        page = self.alice_page
        job = self.job_id()
        page.goto(self.endpoint + f"/dashboard/#/job/{self.CLUSTER}/{job}")
        page.wait_for("[...document.querySelectorAll('button')].some(b => "
                      "b.textContent === 'Cancel job')")
        page.eval("[...document.querySelectorAll('button')].find(b => "
                  "b.textContent === 'Cancel job').click()")
        page.wait_for("document.getElementById('confirm').open", what="the confirmation")
        self.shoot(page, "confirm")
        page.click("#confirm-yes")
        page.wait_for("document.getElementById('job-status').textContent === 'CANCELLED'",
                      timeout=60, what="CANCELLED")
        jobs = json.loads(self.alice.out("queue", self.CLUSTER, "-o", "json"))
        self.assertEqual([j["status"] for j in jobs if j["id"] == job], ["CANCELLED"])
        audit = json.loads(self.admin.out("api", "audit", "-o", "json"))
        self.assertTrue(any(e["user"] == "alice" and e["verb"] == "dashboard.cancel" and
                            e["target"] == self.CLUSTER and e["result"] == "ok" for e in audit),
                        audit[:10])
        self.assertTrue(any(e["user"] == "alice" and e["verb"] == "dashboard.login"
                            for e in audit))
        self.shoot(page, "job-cancelled")

    def test_60_bob_does_not_see_alices_cluster(self):
        page, _ = self.login(self.bob)
        page.wait_for("document.getElementById('who').textContent === 'bob'")
        page.wait_for("document.querySelector('main h1') && "
                      "document.querySelector('main h1').textContent === 'Clusters'")
        self.assertNotIn(self.CLUSTER, page.text("main"))
        page.goto(self.endpoint + f"/dashboard/#/cluster/{self.CLUSTER}")
        page.wait_for("document.querySelector('main .error')", what="an error")
        self.assertIn("does not exist", page.text("main"))
        status = page.eval(f"fetch('/dashboard/api/clusters/{self.CLUSTER}/jobs')"
                           ".then(r => r.status)")
        self.assertEqual(status, 404)
        status = page.eval(f"fetch('/dashboard/api/clusters/{self.CLUSTER}/down', "
                           "{method: 'POST'}).then(r => r.status)")
        self.assertEqual(status, 404)
        self.assertEqual(page.eval("fetch('/dashboard/api/users').then(r => r.status)"), 403)
        self.shoot(page, "bob-clusters")

    def test_70_an_expired_session_acts_on_nothing(self):
        self.alice.herd("exec", self.CLUSTER, "-d", "--", "sleep 120")
        job = max(j["id"] for j in json.loads(self.alice.out("queue", self.CLUSTER, "-o",
                                                               "json")))
        ttl = 10
        page, _ = self.login(self.alice, "--session-ttl", str(ttl))
        # The session and the cookie's Max-Age both start during the login, before this: waiting
        # ttl + 1 from here outlasts both. (Counted from before the login, a slow login left the
        # session valid at the click, and the cancel went through.)
        started = time.monotonic()
        session = {c["name"]: c for c in page.cookies()}["herd_session"]["value"]
        page.wait_for("document.getElementById('who').textContent === 'alice'")
        page.goto(self.endpoint + f"/dashboard/#/job/{self.CLUSTER}/{job}")
        page.wait_for("[...document.querySelectorAll('button')].some(b => "
                      "b.textContent === 'Cancel job')")
        time.sleep(max(0, ttl + 1 - (time.monotonic() - started)))
        # The page's cancel: refused (the browser dropped the cookie with its Max-Age). The page
        # refreshes every few seconds, so it may have found the session gone already and shows
        # the logged-out page instead of the button: then there is nothing left to click.
        clicked = page.eval("(() => { const b = [...document.querySelectorAll('button')].find("
                            "b => b.textContent === 'Cancel job'); if (!b) return false; "
                            "b.click(); return true; })()")
        if clicked:
            page.wait_for("document.getElementById('confirm').open")
            page.click("#confirm-yes")
        page.wait_for("document.getElementById('login-needed')", what="the logged-out page")
        self.assertIn("herd dashboard", page.text("#login-needed"))
        # The session's cookie sent anyway: the server refuses it as expired.
        status, body = self.post(f"/dashboard/api/clusters/{self.CLUSTER}/jobs/{job}/cancel",
                                 session, self.endpoint)
        self.assertEqual(status, 401, body)
        self.assertIn("expired", body)
        jobs = json.loads(self.alice.out("queue", self.CLUSTER, "-o", "json"))
        self.assertEqual([j["status"] for j in jobs if j["id"] == job], ["RUNNING"])
        self.shoot(page, "expired")
        self.alice.herd("cancel", self.CLUSTER, str(job), "-y")

    def post(self, path, session, origin):
        ctx = ssl.create_default_context(cafile=self.info["ca_cert"])
        conn = http.client.HTTPSConnection(HOST, self.port, context=ctx, timeout=60)
        try:
            headers = {"Cookie": f"herd_session={session}", "Content-Type": "application/json"}
            if origin:
                headers["Origin"] = origin
            conn.request("POST", path, "{}", headers)
            r = conn.getresponse()
            return r.status, r.read().decode()
        finally:
            conn.close()

    def test_80_a_cross_origin_post_is_refused(self):
        session = {c["name"]: c for c in self.alice_page.cookies()}["herd_session"]["value"]
        for origin in ("https://evil.example", None):
            status, body = self.post(f"/dashboard/api/clusters/{self.CLUSTER}/stop", session,
                                     origin)
            self.assertEqual(status, 403, body)
        clusters = json.loads(self.alice.out("status", "-o", "json"))
        self.assertEqual([c["status"] for c in clusters], ["UP"])

    def test_85_the_keyboard_alone_reaches_every_control(self):
        page = self.alice_page
        page.goto(self.endpoint + f"/dashboard/#/cluster/{self.CLUSTER}")
        page.wait_for("document.querySelector('main').innerText.includes('Job queue')")
        page.eval("document.activeElement.blur()")
        seen = []
        for _ in range(40):
            page.key("Tab", keycode=9)
            seen.append(page.eval("(document.activeElement.textContent || '').trim()"))
        for label in ("Skip to content", "Clusters", "Jobs", "Infra", "Log out", "Stop", "Start",
                      "Down"):
            self.assertIn(label, seen)
        # Enter on a focused link follows it.
        page.eval("[...document.querySelectorAll('nav a')].find(a => "
                  "a.textContent === 'Jobs').focus()")
        page.key("Enter", keycode=13, text="\r")
        page.wait_for("location.hash === '#/jobs'")
        page.wait_for("document.querySelector('main h1').textContent === 'Jobs'")
        self.shoot(page, "jobs")

    def test_90_logout_ends_the_session(self):
        page = self.alice_page
        page.click("#logout")
        page.wait_for("document.getElementById('login-needed')")
        self.assertEqual(page.eval("fetch('/dashboard/api/me').then(r => r.status)"), 401)
        audit = json.loads(self.admin.out("api", "audit", "-o", "json"))
        self.assertTrue(any(e["user"] == "alice" and e["verb"] == "dashboard.logout"
                            for e in audit))


if __name__ == "__main__":
    unittest.main(verbosity=2)
