// herd's web dashboard: one page, routed by the URL's fragment (#/clusters, #/cluster/NAME,
// #/job/CLUSTER/ID, #/jobs, #/infra, #/users), over the JSON routes of
// controller/server/dashboard.
// Everything a user controls (names, log lines, messages) reaches the page as text nodes
// (textContent, createTextNode), never as HTML.
"use strict";

const API = "/dashboard/api";
const REFRESH_MS = 5000;
// The log view keeps at most this many characters (older ones are dropped; the download has
// everything), so a huge log never freezes the page.
const LOG_KEEP_CHARS = 1 << 20;
const SEARCH_MAX_LINES = 2000;
const TERMINAL = new Set(["SUCCEEDED", "FAILED", "FAILED_SETUP", "FAILED_DRIVER", "CANCELLED",
                          "FAILED_CONTROLLER", "FAILED_NO_RESOURCE", "FAILED_PRECHECKS"]);
const STATE_COLORS = {
  SUCCEEDED: "#1b7f3b", FAILED: "#b3261e", FAILED_SETUP: "#b3261e", FAILED_DRIVER: "#b3261e",
  CANCELLED: "#9a6400", RUNNING: "#1f5fbf", PENDING: "#8a94a3", SETTING_UP: "#6a8fd0",
};

const main = document.getElementById("main");
let me = null;
let cleanups = [];  // what the current page must stop when the user leaves it
let generation = 0;  // counts page changes: a page's late answer must not draw over the next page

// ---- small helpers

function h(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function ago(ms) {
  if (!ms) return "-";
  const s = Math.max(0, (Date.now() - ms) / 1000);
  if (s < 60) return Math.floor(s) + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}

function duration(start, end) {
  if (!start) return "-";
  const s = Math.max(0, ((end || Date.now()) - start) / 1000);
  if (s < 60) return Math.floor(s) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + Math.floor(s % 60) + "s";
  return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
}

function stateCell(state) {
  return h("td", {class: "state state-" + String(state).replace(/[^A-Z_]/g, "")}, state);
}

function clusterLink(name) {
  return h("a", {href: "#/cluster/" + encodeURIComponent(name)}, name);
}

function jobLink(cluster, id, text) {
  return h("a", {href: "#/job/" + encodeURIComponent(cluster) + "/" + id}, text);
}

function table(headers, rows, narrowHidden) {
  const hide = new Set(narrowHidden || []);
  return h("div", {class: "table-wrap"},
    h("table", {},
      h("thead", {}, h("tr", {}, headers.map((t, i) =>
        h("th", {scope: "col", class: hide.has(i) ? "hide-narrow" : null}, t)))),
      h("tbody", {}, rows.map(r => h("tr", {}, r.map((c, i) => {
        const cell = c instanceof Node && c.tagName === "TD" ? c : h("td", {}, c);
        if (hide.has(i)) cell.classList.add("hide-narrow");
        return cell;
      }))))));
}

class Unauthenticated extends Error {}

async function api(path, options) {
  const opts = Object.assign({credentials: "same-origin", headers: {}}, options || {});
  if (opts.method && opts.method !== "GET") opts.headers["Content-Type"] = "application/json";
  const r = await fetch(API + path, opts);
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (r.status === 401) throw new Unauthenticated((body && body.error) || "not logged in");
  if (!r.ok) throw new Error((body && body.error) || ("HTTP " + r.status));
  return body;
}

// Replaces an element's content; null, false and nested lists are fine.
function fill(e, ...children) {
  e.replaceChildren(...children.flat(Infinity).filter(c => c !== null && c !== undefined &&
                                                          c !== false));
}

function show(...children) {
  fill(main, ...children);
}

function showError(e) {
  if (e instanceof Unauthenticated) return loggedOut(e.message);
  show(h("p", {class: "error", role: "alert"}, String(e.message || e)));
}

function loggedOut(message) {
  stopPage();
  me = null;
  document.getElementById("who").textContent = "";
  document.getElementById("logout").hidden = true;
  show(
    h("h1", {}, "Not logged in"),
    h("p", {role: "alert", id: "login-needed"}, message),
    h("p", {}, "Run ", h("code", {}, "herd dashboard"),
      " in a terminal logged in to this server and open the link it prints."));
}

function confirmAction(text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-text").textContent = text;
  dialog.returnValue = "";
  return new Promise(resolve => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "yes"), {once: true});
    dialog.showModal();
    document.getElementById("confirm-no").focus();
  });
}

// A button that asks first, then POSTs, then reports and calls `after`.
function actionButton(label, question, path, after) {
  const status = h("span", {class: "toast", role: "status"});
  const b = h("button", {type: "button", class: "danger", onclick: async () => {
    if (!(await confirmAction(question))) return;
    b.disabled = true;
    status.textContent = label + "…";
    try {
      const r = await api(path, {method: "POST", body: "{}"});
      status.textContent = label + ": done" + (r && r.message ? " (" + r.message + ")" : "");
      if (after) after();
    } catch (e) {
      if (e instanceof Unauthenticated) return loggedOut(e.message);
      status.textContent = label + " failed: " + e.message;
      status.className = "toast error";
    } finally {
      b.disabled = false;
    }
  }}, label);
  return [b, status];
}

function stopPage() {
  for (const fn of cleanups) fn();
  cleanups = [];
}

// The state of one page's drawing: what it last drew, and for which visit.
function pageState() {
  return {gen: generation, sig: null};
}

// Whether to draw `data`: the user is still on this visit of the page, and the data differs from
// what it shows (a refresh that brings nothing new leaves the page, and the focus in it, alone).
function changed(page, data) {
  if (page.gen !== generation) return false;
  const sig = JSON.stringify(data);
  if (page.sig === sig) return false;
  page.sig = sig;
  return true;
}

// Runs a page's refresh every `ms`. A refresh that fails leaves the page as it is and says why
// above it (a lost session shows the login help instead).
function every(ms, refresh) {
  const banner = document.getElementById("banner");
  const gen = generation;
  const t = setInterval(() => refresh().then(() => { banner.hidden = true; }, e => {
    if (gen !== generation) return;
    if (e instanceof Unauthenticated) return loggedOut(e.message);
    banner.textContent = "Could not refresh: " + (e.message || e);
    banner.hidden = false;
  }), ms);
  cleanups.push(() => { clearInterval(t); banner.hidden = true; });
}

// ---- pages

async function clustersPage() {
  const seen = pageState();
  const render = async () => {
    const data = await api("/clusters");
    if (!changed(seen, data)) return;
    const admin = me.role === "admin";
    const headers = ["Name"].concat(admin ? ["User"] : [],
      ["Infra", "Nodes", "Resources", "Status", "Autostop", "Launched"]);
    const rows = data.clusters.map(c => [clusterLink(c.name)].concat(admin ? [c.user] : [], [
      c.infra, (c.nodes || []).length, c.resources, stateCell(c.status),
      c.autostop >= 0 ? c.autostop + "m" : "-", ago(c.launched_at_ms)]));
    const out = [h("h1", {}, "Clusters")];
    if (rows.length) out.push(table(headers, rows, admin ? [2, 4, 6] : [1, 3, 5]));
    else out.push(h("p", {class: "muted"}, "No clusters. Launch one with herd launch."));
    for (const e of data.errors || []) out.push(h("p", {class: "error"}, e));
    show(...out);
  };
  await render();
  every(REFRESH_MS, render);
}

function timeline(jobs) {
  const shown = jobs.filter(j => j.started_at_ms).slice(0, 200);
  if (!shown.length) return h("p", {class: "muted"}, "No job has started yet.");
  const nodes = [...new Set(shown.flatMap(j => j.nodes || []))].sort();
  const t0 = Math.min(...shown.map(j => j.started_at_ms));
  const t1 = Math.max(Date.now(), ...shown.map(j => j.ended_at_ms || 0));
  const W = 1000, left = 140, row = 22, top = 8;
  const H = top * 2 + row * nodes.length + 16;
  const x = t => left + (W - left - 10) * (t - t0) / Math.max(1, t1 - t0);
  const s = svg("svg", {class: "timeline", viewBox: `0 0 ${W} ${H}`, role: "img",
                        "aria-label": "Job timeline: one row per node, a bar per job"});
  nodes.forEach((n, i) => {
    s.append(svg("text", {x: 4, y: top + i * row + 15}, n));
    s.append(svg("line", {x1: left, x2: W - 10, y1: top + (i + 1) * row, y2: top + (i + 1) * row,
                          stroke: "#eef1f5"}));
  });
  for (const j of shown) {
    for (const n of j.nodes || []) {
      const i = nodes.indexOf(n);
      const x0 = x(j.started_at_ms), x1 = x(j.ended_at_ms || Date.now());
      const bar = svg("rect", {x: x0, y: top + i * row + 3, width: Math.max(2, x1 - x0),
                               height: row - 6, rx: 3,
                               fill: STATE_COLORS[j.status] || "#8a94a3"});
      bar.append(svg("title", {}, `job ${j.id} ${j.name} on ${n}: ${j.status}, ` +
                                  duration(j.started_at_ms, j.ended_at_ms)));
      s.append(bar);
    }
  }
  s.append(svg("text", {x: left, y: H - 2}, new Date(t0).toLocaleTimeString()));
  s.append(svg("text", {x: W - 90, y: H - 2}, new Date(t1).toLocaleTimeString()));
  const legend = h("div", {class: "legend", "aria-hidden": "true"},
    ["RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"].map(st =>
      h("span", {style: null, "data-c": st}, st)));
  for (const span of legend.children) span.style.setProperty("--c", STATE_COLORS[span.dataset.c]);
  return h("div", {}, s, legend);
}

// GPUs in use over time (the server's samples of the cluster, oldest first, [at_ms, gpus,
// in_use]): a step area of the GPUs in use under a dashed line of the GPUs there are, the latest
// figure in words above it.
function gpuChart(g) {
  const samples = g.samples || [];
  const now = g.cluster && g.cluster.gpus_known ?
    `${g.cluster.gpus_in_use} of ${g.cluster.gpus} GPUs in use now` : "GPUs now: unknown";
  const intervalS = Math.round((g.interval_ms || 0) / 1000);
  const caption = h("p", {id: "gpu-now"}, now,
    h("span", {class: "muted"}, ` (a sample every ${intervalS} s, taken by the server; ` +
                                `${samples.length} kept)`));
  if (!samples.length) return h("div", {}, caption,
                                h("p", {class: "muted"}, "No samples yet."));
  const W = 1000, H = 180, left = 40, right = 10, top = 10, bottom = 24;
  const t0 = samples[0][0], t1 = Math.max(g.now_ms || 0, samples[samples.length - 1][0]);
  const ymax = Math.max(1, ...samples.map(s => Math.max(s[1], s[2])));
  const x = t => left + (W - left - right) * (t - t0) / Math.max(1, t1 - t0);
  const y = v => top + (H - top - bottom) * (1 - v / ymax);
  const step = (i) => {
    let d = `M${x(samples[0][0])},${y(0)}`;
    samples.forEach((s, k) => {
      if (k > 0) d += ` L${x(s[0])},${y(samples[k - 1][i])}`;
      d += ` L${x(s[0])},${y(s[i])}`;
    });
    return d + ` L${x(t1)},${y(samples[samples.length - 1][i])}`;
  };
  const last = samples[samples.length - 1];
  const peak = Math.max(...samples.map(v => v[2]));
  const s = svg("svg", {class: "gpu-chart", viewBox: `0 0 ${W} ${H}`, role: "img",
                        "aria-label": `GPUs in use over time: ${last[2]} of ${last[1]} at the ` +
                                      `last sample, at most ${peak}`});
  for (const v of [0, ymax]) {
    s.append(svg("line", {x1: left, x2: W - right, y1: y(v), y2: y(v), stroke: "#eef1f5"}));
    s.append(svg("text", {x: left - 6, y: y(v) + 4, "text-anchor": "end"}, v));
  }
  s.append(svg("path", {d: step(2) + ` L${x(t1)},${y(0)} Z`, fill: "#1f5fbf", "fill-opacity": 0.25,
                        stroke: "#1f5fbf", "stroke-width": 2, class: "in-use"}));
  s.append(svg("path", {d: step(1).replace(/^M[^L]*L/, "M"), fill: "none", stroke: "#5f6b7a",
                        "stroke-dasharray": "6 4", class: "total"}));
  // A dot per sample (its figures on hover) while they are few enough to tell apart.
  for (const p of samples.length <= 200 ? samples : []) {
    const dot = svg("circle", {cx: x(p[0]), cy: y(p[2]), r: 3, fill: "#1f5fbf"});
    dot.append(svg("title", {}, `${new Date(p[0]).toLocaleTimeString()}: ${p[2]} of ${p[1]} ` +
                                `GPUs in use`));
    s.append(dot);
  }
  s.append(svg("text", {x: left, y: H - 6}, new Date(t0).toLocaleTimeString()));
  s.append(svg("text", {x: W - right, y: H - 6, "text-anchor": "end"},
               new Date(t1).toLocaleTimeString()));
  const legend = h("div", {class: "legend", "aria-hidden": "true"},
    h("span", {"data-c": "#1f5fbf"}, "in use"), h("span", {"data-c": "#5f6b7a"}, "GPUs there"));
  for (const span of legend.children) span.style.setProperty("--c", span.dataset.c);
  return h("div", {}, caption, s, legend);
}

// A node's GPUs as a bar of cells, one per GPU, filled when in use (with the numbers beside).
function gpuBar(total, inUse) {
  const n = Math.min(total, 64), cell = total > 16 ? 6 : 12;
  const s = svg("svg", {class: "gpu-bar", width: Math.max(1, n) * cell, height: 12,
                        viewBox: `0 0 ${Math.max(1, n) * cell} 12`, "aria-hidden": "true"});
  for (let i = 0; i < n; i++) {
    s.append(svg("rect", {x: i * cell + 1, y: 1, width: cell - 2, height: 10, rx: 2,
                          fill: i < inUse ? "#1f5fbf" : "#dfe6ef"}));
  }
  return s;
}

// Infra: each infra (merged over users for an admin), its SSH pool hosts, its clusters' nodes
// with their GPUs free and in use.
async function infraPage() {
  const seen = pageState();
  const render = async () => {
    const data = await api("/infra");
    if (!changed(seen, data)) return;
    const admin = me.role === "admin";
    const byInfra = new Map();
    for (const item of data.infra || []) {
      const have = byInfra.get(item.infra);
      if (!have) {
        byInfra.set(item.infra, Object.assign({}, item, {
          clusters: (item.clusters || []).map(c => Object.assign({user: item.user}, c))}));
      } else {
        have.usable = have.usable || item.usable;
        for (const c of item.clusters || []) {
          have.clusters.push(Object.assign({user: item.user}, c));
        }
        if (item.hosts && !have.hosts) have.hosts = item.hosts;
        have.held_by = Object.assign({}, item.held_by || {}, have.held_by || {});
      }
    }
    let total = 0, inUse = 0, nodeCount = 0;
    const sections = [];
    for (const inf of byInfra.values()) {
      const rows = [];
      for (const c of inf.clusters) {
        for (const n of c.nodes || []) {
          nodeCount++;
          const known = c.gpus_known && n.gpus !== undefined;
          if (known) { total += n.gpus; inUse += n.gpus_in_use; }
          rows.push([clusterLink(c.name)].concat(admin ? [c.user] : [], [
            h("td", {class: "wrap"}, n.node_id + (n.is_head ? " (head)" : "")), n.address || "-",
            known ? String(n.gpus) : "-", known ? String(n.gpus_in_use) : "-",
            known ? String(Math.max(0, n.gpus - n.gpus_in_use)) : "-",
            known ? gpuBar(n.gpus, n.gpus_in_use) : "", stateCell(n.status || "-")]));
        }
      }
      // An SSH node pool's hosts, each with the cluster that holds it (herd infra's "held_by").
      const heldBy = inf.held_by || {};
      const held = (inf.hosts || []).filter(host => heldBy[host]).length;
      const about = [inf.usable ? "usable" : "not usable", inf.reason ? ": " + inf.reason : ""];
      if (inf.hosts) about.push(`; ${held} of its ${inf.hosts.length} host(s) held by clusters`);
      sections.push(h("section", {class: "infra", "aria-label": "Infra " + inf.infra},
        h("h2", {}, inf.infra, " ", h("span", {class: "kind"}, inf.kind)),
        h("p", {class: "muted"}, about.join("")),
        inf.hosts && inf.hosts.length ?
          h("div", {class: "pool-hosts"}, table(["Host", "Held by"],
            inf.hosts.map(host => [h("td", {class: "wrap"}, host),
              heldBy[host] ? clusterLink(heldBy[host]) : h("td", {class: "muted"}, "free")]))) :
          null,
        rows.length ?
          table(["Cluster"].concat(admin ? ["User"] : [],
                ["Node", "Address", "GPUs", "In use", "Free", "", "Status"]), rows,
                admin ? [1, 3, 7] : [2, 6])
          : h("p", {class: "muted"}, "No clusters here.")));
      for (const c of inf.clusters) {
        if (c.error) sections.push(h("p", {class: "muted"}, `Cluster ${c.name}: ${c.error}`));
      }
    }
    show(h("h1", {}, "Infra"),
      h("p", {id: "infra-summary"}, `${inUse} of ${total} GPUs in use on ${nodeCount} node(s)`),
      sections.length ? sections : h("p", {class: "muted"}, "No infra."),
      (data.errors || []).map(e => h("p", {class: "error"}, e)));
  };
  await render();
  every(REFRESH_MS, render);
}

function jobRows(cluster, jobs, withCluster, refresh) {
  return jobs.map(j => {
    const c = j.cluster || cluster;
    const cells = withCluster ? [clusterLink(c)] : [];
    const cancel = TERMINAL.has(j.status) ? "" :
      actionButton("Cancel", `Cancel job ${j.id} (${j.name || "unnamed"}) on ${c}?`,
                   `/clusters/${encodeURIComponent(c)}/jobs/${j.id}/cancel`, refresh)[0];
    return cells.concat([jobLink(c, j.id, String(j.id)), h("td", {class: "wrap"}, j.name || "-"),
      j.user, stateCell(j.status), j.num_nodes, ago(j.submitted_at_ms),
      duration(j.started_at_ms, j.ended_at_ms), cancel]);
  });
}

async function clusterPage(name) {
  const q = encodeURIComponent(name);
  const seen = pageState();
  const render = async () => {
    // Everything the page shows, asked at once: the cluster's own state (not every cluster's),
    // its jobs, and its nodes as its head sees them with their GPUs (now, and the samples).
    let gpusError = null;
    const [c, jobs, gpus] = await Promise.all([
      api(`/clusters/${q}`), api(`/clusters/${q}/jobs`),
      api(`/clusters/${q}/gpus`).catch(e => {
        if (e instanceof Unauthenticated) throw e;
        gpusError = e.message;
        return null;
      })]);
    // The server's clock moves with every answer: only a change of anything else redraws (a
    // new sample, a GPU taken or freed), so a refresh leaves the focus where it is.
    const gpusSeen = gpus && Object.assign({}, gpus, {now_ms: 0});
    if (!changed(seen, [c, jobs, gpusSeen, gpusError])) return;
    const live = new Map(((gpus && gpus.cluster && gpus.cluster.nodes) || [])
                           .map(n => [n.node_id, n]));
    const known = !!(gpus && gpus.cluster && gpus.cluster.gpus_known);
    const nodeRows = (c.nodes || []).map(n => {
      const l = live.get(n.name) || {};
      return [h("td", {class: "wrap"}, n.name), n.ip, n.is_head ? "head" : "worker",
              known && l.gpus !== undefined ? `${l.gpus_in_use} of ${l.gpus} in use` : "-",
              stateCell(known ? l.status || "-" : "-")];
    });
    const refresh = () => render().catch(showError);
    show(
      h("h1", {}, "Cluster ", name),
      h("dl", {class: "kv"},
        h("dt", {}, "Status"), h("dd", {}, c.status),
        h("dt", {}, "Infra"), h("dd", {}, c.infra),
        h("dt", {}, "Resources"), h("dd", {}, c.resources),
        c.user ? [h("dt", {}, "User"), h("dd", {}, c.user)] : [],
        h("dt", {}, "Launched"), h("dd", {}, ago(c.launched_at_ms))),
      h("div", {class: "actions"},
        actionButton("Stop", `Stop cluster ${name}? Its machines keep their files.`,
                     `/clusters/${q}/stop`, refresh),
        actionButton("Start", `Start cluster ${name}?`, `/clusters/${q}/start`, refresh),
        actionButton("Down", `Tear down cluster ${name}? Its machines and files go.`,
                     `/clusters/${q}/down`, () => { location.hash = "#/clusters"; })),
      h("h2", {}, "Nodes"),
      table(["Node", "IP", "Role", "GPUs", "Agent"], nodeRows),
      gpus && gpus.cluster && gpus.cluster.error ?
        h("p", {class: "muted"}, "Live node state: " + gpus.cluster.error) : null,
      h("h2", {}, "GPUs in use"),
      gpus ? gpuChart(gpus) : h("p", {class: "muted"}, "GPUs: " + gpusError),
      h("h2", {}, "Timeline"),
      timeline(jobs),
      h("h2", {}, "Job queue"),
      jobs.length ? table(["ID", "Name", "User", "Status", "Nodes", "Submitted", "Duration", ""],
                          jobRows(name, jobs, false, refresh), [2, 4, 5])
                  : h("p", {class: "muted"}, "No jobs yet."));
  };
  await render();
  every(REFRESH_MS, render);
}

// Rows of the jobs table asked for and drawn at once: a page of them, with a pager, so the page
// costs the same whatever the number of jobs.
const JOBS_PER_PAGE = 100;

async function jobsPage() {
  const seen = pageState();
  let first = 0;  // index of the first job shown; kept across refreshes
  const refresh = () => render().catch(showError);
  // One request for every cluster's jobs (the server runs one `herd queue`, whose heads it asks
  // at once) and only the page shown comes back, newest first, with the total.
  const render = async () => {
    const [page, managed] = await Promise.all([
      api(`/jobs?offset=${first}&limit=${JOBS_PER_PAGE}`),
      api("/managed").catch(e => {
        if (e instanceof Unauthenticated) throw e;
        return [];
      })]);
    if (page.total > 0 && page.offset >= page.total) {  // the last page emptied meanwhile
      first = Math.floor((page.total - 1) / JOBS_PER_PAGE) * JOBS_PER_PAGE;
      return render();
    }
    if (!changed(seen, [page, managed])) return;
    const jobs = page.jobs;
    const turn = delta => { first = Math.max(0, first + delta); refresh(); };
    const pager = page.total <= JOBS_PER_PAGE ? null :
      h("div", {class: "pager"},
        h("button", {type: "button", disabled: first === 0,
                     onclick: () => turn(-JOBS_PER_PAGE)}, "Previous"),
        h("span", {class: "pager-range"},
          `Jobs ${page.offset + 1}\u2013${page.offset + jobs.length} of ${page.total}`),
        h("button", {type: "button", disabled: page.offset + jobs.length >= page.total,
                     onclick: () => turn(JOBS_PER_PAGE)}, "Next"));
    show(
      h("h1", {}, "Jobs"),
      jobs.length ? [table(["Cluster", "ID", "Name", "User", "Status", "Nodes", "Submitted",
                            "Duration", ""], jobRows("", jobs, true, refresh), [3, 5, 6]), pager]
                  : h("p", {class: "muted"}, "No cluster jobs."),
      page.errors && page.errors.length ?
        h("p", {class: "muted"}, "Not listed: " + page.errors.join("; ")) : null,
      h("h2", {}, "Managed jobs"),
      managed.length ? table(["ID", "Name", "Status", "Recoveries", "Cluster", "Duration", ""],
        managed.map(j => [String(j.id), h("td", {class: "wrap"}, j.name), stateCell(j.status),
          j.recoveries, j.cluster || "-", duration(j.started_at_ms, j.ended_at_ms),
          TERMINAL.has(j.status) ? "" :
            actionButton("Cancel", `Cancel managed job ${j.id} (${j.name})?`,
                         `/managed/${j.id}/cancel`, refresh)[0]]), [3, 4])
        : h("p", {class: "muted"}, "No managed jobs."));
  };
  await render();
  every(REFRESH_MS, render);
}

async function usersPage() {
  const gen = generation;
  const users = await api("/users");
  if (gen !== generation) return;
  show(h("h1", {}, "Users"),
    table(["Name", "Role", "Clusters", "Added"],
          users.map(u => [u.name, u.role, u.clusters, ago(u.created_at_ms)])));
}

// The log: read a window at a time from the start; followed live (server-sent events) once the
// page has read to its end while the job runs.
function logView(cluster, id) {
  const base = `/clusters/${encodeURIComponent(cluster)}/jobs/${id}`;
  const pre = h("pre", {class: "log", id: "log", tabindex: "0", "aria-label": "Job log",
                        "aria-live": "off"});
  const info = h("span", {class: "muted", id: "log-info", role: "status"});
  const search = h("input", {type: "search", id: "log-search", placeholder: "Search the log",
                             "aria-label": "Search the log"});
  const next = h("button", {type: "button", id: "log-next", hidden: true}, "Next part");
  const follow = h("button", {type: "button", id: "log-follow"}, "Follow live");
  const download = h("a", {href: API + base + "/download", download: `${cluster}-job-${id}.log`},
                     "Download");
  let text = "", offset = 0, trimmed = false, source = null, scheduled = false;

  const render = () => {
    scheduled = false;
    const term = search.value;
    if (!term) {
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.textContent = text;
      if (atBottom || source) pre.scrollTop = pre.scrollHeight;
    } else {
      const lines = text.split("\n").filter(l => l.includes(term));
      pre.replaceChildren(...lines.slice(-SEARCH_MAX_LINES).map(l => {
        const i = l.indexOf(term);
        return h("div", {}, l.slice(0, i), h("span", {class: "hit"}, term),
                 l.slice(i + term.length));
      }));
      info.textContent = lines.length + " matching line(s)";
      return;
    }
    info.textContent = (trimmed ? "earlier output dropped from view (download has it); " : "") +
                       offset + " bytes read" + (source ? ", following" : "");
  };
  const add = chunk => {
    text += chunk;
    if (text.length > LOG_KEEP_CHARS) {
      const cut = text.indexOf("\n", text.length - LOG_KEEP_CHARS);
      text = text.slice(cut < 0 ? text.length - LOG_KEEP_CHARS : cut + 1);
      trimmed = true;
    }
    if (!scheduled) { scheduled = true; requestAnimationFrame(render); }
  };
  const stopFollowing = () => {
    if (source) source.close();
    source = null;
    follow.textContent = "Follow live";
  };
  const startFollowing = () => {
    source = new EventSource(API + base + "/events?offset=" + offset);
    follow.textContent = "Stop following";
    source.addEventListener("log", e => {
      offset = Number(e.lastEventId) || offset;
      add(JSON.parse(e.data));
    });
    source.addEventListener("end", () => { stopFollowing(); render(); });
    source.addEventListener("error", () => {
      if (source && source.readyState === EventSource.CLOSED) {
        stopFollowing();
        api("/me").then(render, showError);
      }
    });
    render();
  };
  const readWindow = async () => {
    const w = await api(base + "/log?offset=" + offset);
    add(w.text);
    offset = w.next_offset;
    next.hidden = !w.more;
    return w;
  };
  next.addEventListener("click", () => readWindow().catch(showError));
  follow.addEventListener("click", () => (source ? stopFollowing() : startFollowing()));
  search.addEventListener("input", render);
  cleanups.push(stopFollowing);
  return {
    element: h("section", {"aria-label": "Log"},
      h("div", {class: "log-tools"}, search, next, follow, download, info), pre),
    start: async running => {
      const w = await readWindow();
      if (running && !w.more) startFollowing();
    },
  };
}

async function jobPage(cluster, id) {
  const q = encodeURIComponent(cluster);
  const details = h("div", {});
  const log = logView(cluster, id);
  let job = null;
  const seen = pageState();
  const render = async () => {
    const jobs = await api(`/clusters/${q}/jobs`);
    job = jobs.find(j => String(j.id) === String(id));
    if (!job) throw new Error(`job ${id} of cluster ${cluster} does not exist`);
    if (!changed(seen, job)) return;
    const ranks = (job.nodes || []).map((n, rank) => [String(rank), h("td", {class: "wrap"}, n),
      job.exit_codes && rank < job.exit_codes.length ? String(job.exit_codes[rank]) : "-"]);
    const failed = job.first_failed_node ?
      `rank ${job.first_failed_rank} on ${job.first_failed_node}` : null;
    fill(details,
      h("dl", {class: "kv"},
        h("dt", {}, "Name"), h("dd", {id: "job-name"}, job.name || "-"),
        h("dt", {}, "Status"), h("dd", {id: "job-status", class: "state state-" + job.status},
                                 job.status),
        h("dt", {}, "User"), h("dd", {}, job.user),
        h("dt", {}, "Resources"), h("dd", {}, job.resources),
        h("dt", {}, "Submitted"), h("dd", {}, ago(job.submitted_at_ms)),
        h("dt", {}, "Duration"), h("dd", {}, duration(job.started_at_ms, job.ended_at_ms)),
        failed ? [h("dt", {}, "First failure"), h("dd", {class: "error"}, failed)] : [],
        job.message ? [h("dt", {}, "Message"), h("dd", {}, job.message)] : []),
      TERMINAL.has(job.status) ? null : h("div", {class: "actions"},
        actionButton("Cancel job", `Cancel job ${id} (${job.name || "unnamed"}) on ${cluster}?`,
                     `/clusters/${q}/jobs/${id}/cancel`, () => render().catch(showError))),
      h("h2", {}, "Ranks"),
      table(["Rank", "Node", "Exit code"], ranks));
  };
  const gen = generation;
  await render();
  if (gen !== generation) return;
  show(h("h1", {}, "Job ", String(id), " on ", clusterLink(cluster)), details,
                       h("h2", {}, "Log"), log.element);
  await log.start(!TERMINAL.has(job.status));
  every(REFRESH_MS / 2, async () => {
    if (job && !TERMINAL.has(job.status)) await render();
  });
}

// ---- routing

async function route() {
  stopPage();
  generation++;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  for (const a of document.querySelectorAll("nav a")) {
    a.toggleAttribute("aria-current", a.getAttribute("href") === "#/" + parts[0]);
    if (a.hasAttribute("aria-current")) a.setAttribute("aria-current", "page");
  }
  try {
    if (!me) await loadMe();
    if (parts[0] === "cluster" && parts[1]) await clusterPage(parts[1]);
    else if (parts[0] === "job" && parts[1] && /^\d+$/.test(parts[2] || "")) {
      await jobPage(parts[1], parts[2]);
    } else if (parts[0] === "jobs") await jobsPage();
    else if (parts[0] === "infra") await infraPage();
    else if (parts[0] === "users") await usersPage();
    else await clustersPage();
  } catch (e) {
    showError(e);
  }
  main.focus({preventScroll: true});
}

async function loadMe() {
  me = await api("/me");
  document.getElementById("who").textContent = me.name + (me.role === "admin" ? " (admin)" : "");
  document.getElementById("nav-users").hidden = me.role !== "admin";
  document.getElementById("logout").hidden = false;
}

document.getElementById("logout").addEventListener("click", async () => {
  try {
    await fetch("/dashboard/logout", {method: "POST", credentials: "same-origin"});
  } finally {
    loggedOut("Logged out.");
  }
});
window.addEventListener("hashchange", route);
route();
