// annexd's page: plain JS, no build step, no network but its own daemon.
"use strict";

const token = document.querySelector('meta[name="annexd-token"]').content;
const $ = (id) => document.getElementById(id);

// ApiError is an answer other than 2xx: its message is the daemon's.
class ApiError extends Error {
  constructor(status, body) {
    super((body && body.error) || ("HTTP " + status));
    this.status = status;
    this.code = body && body.code;
  }
}

// api sends one request with the token; it returns the JSON answer, or
// the objects of an NDJSON stream (the end line last).
async function api(method, path, body) {
  const opts = { method, headers: { "X-Annexd-Token": token }, credentials: "same-origin" };
  if (body !== undefined) {
    opts.body = body;
  }
  const r = await fetch(path, opts);
  const text = await r.text();
  let parsed = null;
  const ndjson = (r.headers.get("Content-Type") || "").includes("ndjson");
  try {
    parsed = ndjson ? text.split("\n").filter((l) => l.trim() !== "").map((l) => JSON.parse(l)) : JSON.parse(text);
  } catch (e) {
    parsed = { error: text.trim() };
  }
  if (!r.ok) {
    throw new ApiError(r.status, parsed);
  }
  return parsed;
}

// items returns a stream's objects without its end line, and throws
// the end line's error.
function items(lines) {
  const end = lines.length && lines[lines.length - 1].end ? lines[lines.length - 1] : null;
  if (end && end.error) {
    throw new ApiError(500, end);
  }
  return end ? lines.slice(0, -1) : lines;
}

const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
function bytes(n) {
  let i = 0;
  let v = n;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return (i === 0 ? String(v) : v.toFixed(v < 10 ? 1 : 0)) + " " + units[i];
}
const count = (n) => Number(n).toLocaleString("en");
function ago(iso) {
  if (!iso) {
    return "never";
  }
  const s = (Date.now() - Date.parse(iso)) / 1000;
  if (s < 90) return Math.max(0, Math.round(s)) + " s ago";
  if (s < 5400) return Math.round(s / 60) + " min ago";
  if (s < 172800) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " days ago";
}

// el makes an element with attributes and children (strings are text).
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const k of kids) {
    if (k !== null && k !== undefined) e.append(k);
  }
  return e;
}
const SVG = "http://www.w3.org/2000/svg";
function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// pathIn is how a request names the path of an answer's object: as
// sent, path_b64 when the bytes are not UTF-8.
const pathIn = (o) => (o.path_b64 ? { path_b64: o.path_b64 } : { path: o.path });
const pathQuery = (o) => (o.path_b64 ? "path_b64=" + encodeURIComponent(o.path_b64) : "path=" + encodeURIComponent(o.path));
const pathLines = (objs) => objs.map((o) => JSON.stringify(pathIn(o))).join("\n") + "\n";

function say(id, text) {
  $(id).textContent = text || "";
}

// ---- Where the space goes: the treemap and its table ----

let trail = []; // the levels opened: {node} from the top down
let level = null; // the level shown

function shade(n) {
  const f = n.bytes > 0 ? n.reclaimable / n.bytes : 0;
  if (f <= 0) return "s0";
  if (f < 0.1) return "s1";
  if (f < 0.33) return "s2";
  if (f < 0.66) return "s3";
  return "s4";
}

function label(n) {
  return n.folder ? n.name : "(files here)";
}

async function openLevel(node, push) {
  try {
    const q = node ? "?" + pathQuery(node) : "";
    const lvl = await api("GET", "/v1/tree" + q);
    if (!node && lvl.children.length === 1 && push) {
      return openLevel(lvl.children[0], true);
    }
    if (push) {
      trail.push(lvl);
    }
    level = lvl;
    say("space-msg", lvl.complete ? "" : "Some files have no key yet (being hashed, or unreadable): their duplicates are not counted.");
    drawCrumbs();
    drawTree();
    drawTreeTable();
  } catch (e) {
    say("space-msg", e.message);
  }
}

function drawCrumbs() {
  const nav = $("crumbs");
  nav.replaceChildren();
  trail.forEach((lvl, i) => {
    if (i > 0) nav.append(el("span", { class: "sep", "aria-hidden": "true" }, "›"));
    const name = lvl.path ? (i === 0 ? lvl.path : lvl.name) : "All roots";
    if (i === trail.length - 1) {
      nav.append(el("span", { "aria-current": "location" }, name + " — " + bytes(lvl.bytes)));
    } else {
      nav.append(el("button", { type: "button", onclick: () => goUp(i) }, name));
    }
  });
}

function goUp(i) {
  trail = trail.slice(0, i + 1);
  level = trail[i];
  openLevel(level.path ? level : null, false);
}

function drill(n) {
  if (n.folder) openLevel(n, true);
}

// squarify lays items (biggest first) out in the rectangle, keeping
// the boxes near square (Bruls, Huizing, van Wijk).
function squarify(items, x, y, w, h) {
  const out = [];
  const total = items.reduce((s, it) => s + it.bytes, 0);
  if (total <= 0 || w <= 0 || h <= 0) return out;
  const scale = (w * h) / total;
  let rest = items.map((it) => ({ it, a: it.bytes * scale }));
  const worst = (row, s) => {
    const sum = row.reduce((t, r) => t + r.a, 0);
    const mx = Math.max(...row.map((r) => r.a));
    const mn = Math.min(...row.map((r) => r.a));
    return Math.max((s * s * mx) / (sum * sum), (sum * sum) / (s * s * mn));
  };
  while (rest.length && w > 0.5 && h > 0.5) {
    const s = Math.min(w, h);
    let row = [rest[0]];
    let best = worst(row, s);
    let i = 1;
    for (; i < rest.length; i++) {
      const next = row.concat([rest[i]]);
      const v = worst(next, s);
      if (v > best) break;
      row = next;
      best = v;
    }
    rest = rest.slice(i);
    const area = row.reduce((t, r) => t + r.a, 0);
    if (w >= h) {
      const cw = area / h;
      let yy = y;
      for (const r of row) {
        const rh = r.a / cw;
        out.push({ it: r.it, x, y: yy, w: cw, h: rh });
        yy += rh;
      }
      x += cw;
      w -= cw;
    } else {
      const rh = area / w;
      let xx = x;
      for (const r of row) {
        const cw = r.a / rh;
        out.push({ it: r.it, x: xx, y, w: cw, h: rh });
        xx += cw;
      }
      y += rh;
      h -= rh;
    }
  }
  return out;
}

const maxBoxes = 300;

function drawTree() {
  const svg = $("treemap");
  const w = svg.clientWidth || 800;
  const h = svg.clientHeight || 500;
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  svg.replaceChildren();
  if (!level) return;
  const kids = level.children.filter((n) => n.bytes > 0).slice(0, maxBoxes);
  const boxes = squarify(kids, 0, 0, w, h);
  boxes.forEach((b, i) => {
    const n = b.it;
    const g = svgEl("g", {
      tabindex: i === 0 ? "0" : "-1",
      role: n.folder ? "button" : "img",
      "aria-label": label(n) + ", " + bytes(n.bytes) + ", " + count(n.files) + " files, " + bytes(n.reclaimable) + " reclaimable",
      "data-i": String(i),
    });
    g.append(svgEl("rect", { x: b.x, y: b.y, width: Math.max(b.w, 0), height: Math.max(b.h, 0), class: shade(n) }));
    const t = svgEl("title", {});
    t.textContent = label(n) + "\n" + bytes(n.bytes) + " · " + count(n.files) + " files · " + bytes(n.reclaimable) + " reclaimable";
    g.append(t);
    if (b.w > 46 && b.h > 18) {
      const tx = svgEl("text", { x: b.x + 5, y: b.y + 15 });
      const room = Math.floor((b.w - 10) / 7);
      const name = label(n);
      tx.textContent = name.length > room ? name.slice(0, Math.max(room - 1, 1)) + "…" : name;
      g.append(tx);
      if (b.h > 34) {
        const sz = svgEl("text", { x: b.x + 5, y: b.y + 30 });
        sz.textContent = bytes(n.bytes);
        g.append(sz);
      }
    }
    g.addEventListener("click", () => drill(n));
    svg.append(g);
  });
}

$("treemap").addEventListener("keydown", (ev) => {
  const boxes = [...$("treemap").querySelectorAll("g")];
  const at = boxes.indexOf(document.activeElement);
  const move = (to) => {
    if (to < 0 || to >= boxes.length) return;
    boxes.forEach((b) => b.setAttribute("tabindex", "-1"));
    boxes[to].setAttribute("tabindex", "0");
    boxes[to].focus();
  };
  switch (ev.key) {
    case "ArrowRight":
    case "ArrowDown":
      move(at + 1);
      break;
    case "ArrowLeft":
    case "ArrowUp":
      move(at - 1);
      break;
    case "Home":
      move(0);
      break;
    case "End":
      move(boxes.length - 1);
      break;
    case "Enter":
    case " ":
      if (at >= 0) drill(level.children.filter((n) => n.bytes > 0)[at]);
      break;
    case "Backspace":
    case "Escape":
      if (trail.length > 1) goUp(trail.length - 2);
      break;
    default:
      return;
  }
  ev.preventDefault();
});

function drawTreeTable() {
  const body = $("tree-table").querySelector("tbody");
  body.replaceChildren();
  $("tree-table-cap").textContent = "Folders of " + (level.path || "all roots") + " by size";
  for (const n of level.children.slice(0, 500)) {
    const name = n.folder ? el("button", { type: "button", class: "link", onclick: () => drill(n) }, n.name) : label(n);
    body.append(el("tr", {}, el("td", { class: "path" }, name), el("td", { class: "num" }, bytes(n.bytes)),
      el("td", { class: "num" }, count(n.files)), el("td", { class: "num" }, bytes(n.reclaimable))));
  }
}

let resizeTimer = 0;
new ResizeObserver(() => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(drawTree, 100);
}).observe($("treemap"));

// ---- The confirm dialog: a plan first, then the act ----

// confirmAct shows what will be done (body, nodes) and calls act when
// the person agrees; act returns what to say after.
function confirmAct(title, nodes, okLabel, act) {
  const d = $("confirm");
  $("confirm-h").textContent = title;
  $("confirm-body").replaceChildren(...nodes);
  say("confirm-msg", "");
  const ok = $("confirm-ok");
  ok.textContent = okLabel || "Do it";
  ok.hidden = !act;
  ok.disabled = false;
  ok.onclick = async () => {
    ok.disabled = true;
    try {
      const after = await act();
      $("confirm-body").replaceChildren(el("p", { id: "confirm-done" }, after));
      ok.hidden = true;
      $("confirm-cancel").textContent = "Close";
    } catch (e) {
      say("confirm-msg", e.message);
      ok.disabled = false;
    }
  };
  $("confirm-cancel").textContent = act ? "Cancel" : "Close";
  $("confirm-cancel").onclick = () => d.close();
  d.showModal();
  (act ? ok : $("confirm-cancel")).focus();
}
$("confirm").addEventListener("close", () => refreshAll());

// free shows the dedup plan for the paths (a dry run), then runs it
// through the same endpoint as annexctl dedup.
async function free(paths, what, msgID) {
  const body = pathLines(paths);
  let lines;
  try {
    lines = await api("POST", "/v1/dedup?dry_run=1&groups=all", body);
  } catch (e) {
    say(msgID, e.message);
    return;
  }
  const plan = (lines.find((l) => l.plan) || {}).plan || {};
  const groups = lines.filter((l) => l.group).map((l) => l.group);
  const list = el("ul", {});
  for (const g of groups.slice(0, 50)) {
    for (const t of g.targets) {
      list.append(el("li", {}, t.path + " → shares the blocks of " + g.keeper));
    }
  }
  const nodes = [el("p", {}, what)];
  if (!plan.actions) {
    nodes.push(el("p", {}, "Nothing to free here: " + count(plan.already_shared || 0) + " files share their blocks already."));
    confirmAct("Free duplicates", nodes, "", null);
    return;
  }
  nodes.push(el("p", { id: "plan-summary" }, "The plan (" + plan.mode + "): " + count(plan.actions) + " files in " + count(plan.groups) +
    " groups come to share their keeper's blocks, freeing about " + bytes(plan.frees) + ". No file's content changes."), list);
  confirmAct("Free duplicates", nodes, "Free " + bytes(plan.frees), async () => {
    const res = await api("POST", "/v1/dedup", body);
    const end = res[res.length - 1] || {};
    if (end.error) throw new ApiError(500, end);
    const r = end.result || {};
    const skipped = Object.entries(r.skipped || {}).map(([k, v]) => v + " " + k).join(", ");
    return "Freed " + bytes(r.freed || 0) + ": " + count(r.done || 0) + " of " + count(r.planned || 0) + " files done" + (skipped ? "; skipped: " + skipped : "") + ".";
  });
}

// ---- Duplicates ----

async function loadDups() {
  try {
    const groups = items(await api("GET", "/v1/dups?limit=25&min_size=1"));
    const body = $("groups-table").querySelector("tbody");
    body.replaceChildren();
    for (const g of groups) {
      const names = g.files.slice(0, 3).map((f) => f.path).join("\n") + (g.files.length > 3 ? "\n… and " + (g.files.length - 3) + " more" : "");
      const btn = el("button", { type: "button", onclick: () => free(g.files, "The " + g.files.length + " files of " + bytes(g.size) + " with the same content.", "groups-msg") }, "Free this…");
      body.append(el("tr", {}, el("td", { class: "path pre" }, names), el("td", { class: "num" }, bytes(g.size)),
        el("td", { class: "num" }, count(g.copies)), el("td", { class: "num" }, bytes(g.reclaimable)), el("td", {}, btn)));
    }
    say("groups-msg", groups.length ? "" : "No duplicate files.");
  } catch (e) {
    say("groups-msg", e.message);
  }
}

async function loadDirs() {
  try {
    const reports = items(await api("GET", "/v1/dups/dirs?limit=25")).filter((d) => d.kind !== "unknown");
    const body = $("dirs-table").querySelector("tbody");
    body.replaceChildren();
    for (const d of reports) {
      const extra = d.folders.slice(1);
      const what = (d.kind === "contained" ? "Folders whose every file is also in " : "Extra copies of ") + d.folders[0].path + ": " + extra.map((f) => f.path).join(", ");
      // dedup acts on the copies at or below the paths given: the kept
      // folder too, or its files would be no keepers for the copies.
      const btn = el("button", { type: "button", onclick: () => free(d.folders, what, "dirs-msg") }, "Free this…");
      body.append(el("tr", {}, el("td", { class: "path" }, d.folders[0].path), el("td", { class: "path" }, extra.map((f) => f.path).join("\n")),
        el("td", { class: "num" }, bytes(d.reclaimable)), el("td", {}, btn)));
    }
    say("dirs-msg", reports.length ? "" : "No duplicate folders.");
  } catch (e) {
    say("dirs-msg", e.message);
  }
}

// ---- Audit ----

function drawCoverage(a) {
  const svg = $("coverage");
  const w = svg.clientWidth || 600;
  svg.setAttribute("viewBox", "0 0 " + w + " 90");
  svg.replaceChildren();
  const c = a.coverage || {};
  const f = c.total > 0 ? c.files / c.total : 0;
  svg.append(svgEl("rect", { x: 0, y: 20, width: w, height: 22, class: "cov-left" }));
  svg.append(svgEl("rect", { x: 0, y: 20, width: Math.round(w * f), height: 22, class: "cov-done" }));
  const t = svgEl("text", { x: 0, y: 14 });
  t.textContent = "Checked within " + Math.round((c.every_seconds || 0) / 86400) + " days: " + (f * 100).toFixed(1) + "% of files";
  svg.append(t);
  if (a.pass && a.pass.files > 0) {
    const pf = a.pass.done / a.pass.files;
    svg.append(svgEl("rect", { x: 0, y: 62, width: w, height: 10, class: "cov-left" }));
    svg.append(svgEl("rect", { x: 0, y: 62, width: Math.round(w * pf), height: 10, class: "cov-done" }));
    const pt = svgEl("text", { x: 0, y: 56 });
    pt.textContent = "This pass: " + (pf * 100).toFixed(1) + "%";
    svg.append(pt);
  }
}

function coverageRows(a) {
  const c = a.coverage || {};
  const rows = [
    ["State", a.state + (a.reason ? " (" + a.reason + ")" : "")],
    ["Files checked within the schedule", count(c.files || 0) + " of " + count(c.total || 0)],
    ["Bytes checked within the schedule", bytes(c.bytes || 0) + " of " + bytes(c.total_bytes || 0)],
    ["Least recent check", c.oldest ? new Date(c.oldest).toLocaleString() + " (" + ago(c.oldest) + ")" : "never"],
    ["Problems", count(a.problems || 0)],
  ];
  if (a.pass) rows.push(["This pass", count(a.pass.done) + " of " + count(a.pass.files) + " files, " + bytes(a.pass.done_bytes) + " of " + bytes(a.pass.bytes)]);
  if (a.last_pass) {
    const counts = Object.entries(a.last_pass.counts || {}).map(([k, v]) => count(v) + " " + k).join(", ");
    rows.push(["Last pass", "ended " + ago(a.last_pass.ended) + ": " + count(a.last_pass.files) + " files, " + bytes(a.last_pass.bytes) + (counts ? " (" + counts + ")" : "")]);
  } else {
    rows.push(["Last pass", "none finished yet"]);
  }
  if (a.next_run) rows.push(["Next run", new Date(a.next_run).toLocaleString()]);
  return rows;
}

// passCover is the share of the files verified within the schedule when
// pass p ended, or null when the daemon did not keep it.
function passCover(p) {
  const c = p.coverage;
  return c && c.total > 0 ? c.files / c.total : null;
}

// drawHistory draws a bar a pass, oldest left, as high as the coverage it
// left; a pass that found problems is drawn in the warning colour.
function drawHistory(passes) {
  const svg = $("history");
  const w = svg.clientWidth || 600, h = 160, top = 8, bottom = 132;
  svg.setAttribute("viewBox", "0 0 " + w + " " + h);
  svg.replaceChildren();
  for (const f of [0, 0.5, 1]) {
    const y = bottom - f * (bottom - top);
    svg.append(svgEl("line", { x1: 34, x2: w, y1: y, y2: y, class: "grid" }));
    const t = svgEl("text", { x: 0, y: y + 4 });
    t.textContent = f * 100 + "%";
    svg.append(t);
  }
  if (!passes.length) {
    const t = svgEl("text", { x: 40, y: 70 });
    t.textContent = "No pass completed yet.";
    svg.append(t);
    return;
  }
  const step = (w - 40) / passes.length, bw = Math.max(2, Math.min(40, step - 2));
  passes.forEach((p, i) => {
    const f = passCover(p) || 0, x = 40 + i * step;
    const r = svgEl("rect", { x: x, y: bottom - f * (bottom - top), width: bw, height: f * (bottom - top), class: p.problems > 0 ? "bad" : "cov-done" });
    const tip = svgEl("title", {});
    tip.textContent = new Date(p.ended).toLocaleDateString() + ": " + (passCover(p) === null ? "coverage not kept" : (f * 100).toFixed(1) + "%");
    r.append(tip);
    svg.append(r);
  });
  const first = svgEl("text", { x: 40, y: h - 8 });
  first.textContent = new Date(passes[0].ended).toLocaleDateString();
  svg.append(first);
  if (passes.length > 1) {
    const last = svgEl("text", { x: w, y: h - 8, "text-anchor": "end" });
    last.textContent = new Date(passes[passes.length - 1].ended).toLocaleDateString();
    svg.append(last);
  }
}

async function loadHistory() {
  const passes = (await api("GET", "/v1/audit/history")).passes || [];
  drawHistory(passes);
  const body = $("history-table").querySelector("tbody");
  body.replaceChildren(...passes.slice().reverse().map(p => el("tr", {},
    el("td", {}, new Date(p.ended).toLocaleString()),
    el("td", { class: "num" }, count((p.counts || {}).ok || 0) + " files"),
    el("td", { class: "num" }, count(p.problems || 0)),
    el("td", { class: "num" }, passCover(p) === null ? "–" : (passCover(p) * 100).toFixed(1) + "%"))));
  if (!passes.length) body.append(el("tr", {}, el("td", { colspan: "4" }, "No pass completed yet.")));
}

async function loadAudit() {
  try {
    const a = await api("GET", "/v1/audit/status");
    drawCoverage(a);
    const body = $("cov-table").querySelector("tbody");
    body.replaceChildren(...coverageRows(a).map(([k, v]) => el("tr", {}, el("th", { scope: "row" }, k), el("td", {}, v))));
    await loadHistory();
    const probs = items(await api("GET", "/v1/audit/problems"));
    const pb = $("problems-table").querySelector("tbody");
    pb.replaceChildren();
    for (const p of probs) {
      const heal = el("button", { type: "button", onclick: () => healOne(p) }, "Heal…");
      const accept = el("button", { type: "button", onclick: () => acceptOne(p) }, "Accept…");
      pb.append(el("tr", {}, el("td", { class: "path" }, p.path), el("td", {}, p.state + (p.why ? ": " + p.why : "")),
        el("td", { class: "num" }, bytes(p.size)), el("td", {}, heal, " ", accept)));
    }
    if (!probs.length) pb.append(el("tr", {}, el("td", { colspan: "4" }, "No problems found.")));
    say("audit-msg", "");
  } catch (e) {
    say("audit-msg", e.message);
  }
}

// healLine says in words what the heal endpoint answered for one file.
function healLine(f) {
  if (!f) return "nothing flagged at this path";
  const from = f.host ? "host " + f.host : f.source;
  switch (f.outcome) {
    case "would_heal":
      return "Would heal from " + from + ": " + f.reason + ".";
    case "healed":
      return "Healed from " + from + "; the damaged bytes are kept at " + f.aside + ".";
    default:
      return f.outcome.replace("_", " ") + ": " + f.reason;
  }
}

// healOne asks for the heal's plan (a dry run) and offers the heal only
// when there is a copy to heal from; it says "Healed" only when the
// daemon did.
async function healOne(p) {
  const req = (dry) => JSON.stringify({ paths: [p.path], dry_run: dry });
  let plan;
  try {
    plan = ((await api("POST", "/v1/audit/heal", req(true))).files || [])[0];
  } catch (e) {
    say("audit-msg", "Heal: " + e.message);
    return;
  }
  if (!plan || plan.outcome !== "would_heal") {
    say("audit-msg", "Heal: " + healLine(plan));
    return;
  }
  confirmAct("Heal " + p.path, [el("p", {}, "Restore the file from a verified copy; the damaged bytes are kept aside."), el("p", { id: "heal-plan" }, healLine(plan))], "Heal", async () => {
    const res = ((await api("POST", "/v1/audit/heal", req(false))).files || [])[0];
    if (!res || res.outcome !== "healed") throw new Error("Not healed: " + healLine(res));
    return healLine(res);
  });
}

function acceptOne(p) {
  confirmAct("Accept " + p.path, [el("p", {}, "Take the file's content as it is now as its content: the recorded key is replaced and the old content is no longer expected here. Only do this when you changed the file on purpose.")], "Accept", async () => {
    const r = await api("POST", "/v1/audit/accept?" + pathQuery(p));
    return "Accepted: " + JSON.stringify(r);
  });
}

// ---- Machines ----

async function loadMachines() {
  const hb = $("hosts-table").querySelector("tbody");
  const cb = $("copies-table").querySelector("tbody");
  try {
    const hosts = (await api("GET", "/v1/hub/hosts")).hosts || [];
    hb.replaceChildren(...hosts.map((h) => el("tr", {}, el("td", {}, h.name), el("td", { class: "num" }, count(h.records)),
      el("td", { class: "num" }, bytes(h.bytes)), el("td", {}, ago(h.last_seen)),
      el("td", {}, h.stale ? "stale: its copies do not count" : h.resending ? "sending its whole index" : h.complete ? "current" : "incomplete"))));
    const n = Math.max(1, Number($("fewer").value) || 2);
    const copies = items(await api("GET", "/v1/hub/copies?fewer_than=" + n + "&limit=50"));
    cb.replaceChildren(...copies.map((c) => {
      const mine = (c.holders || []).flatMap((h) => (h.paths || []).map((p) => p.path)).slice(0, 2).join("\n");
      const who = (c.holders || []).map((h) => h.host + (h.stale ? " (stale)" : "")).join(", ");
      return el("tr", {}, el("td", { class: "path pre" }, mine || c.key), el("td", { class: "num" }, bytes(c.size)), el("td", {}, who || "none"));
    }));
    if (!copies.length) cb.append(el("tr", {}, el("td", { colspan: "3" }, "Every file has at least " + n + " copies.")));
    say("machines-msg", "");
  } catch (e) {
    hb.replaceChildren();
    cb.replaceChildren();
    if (e.code === "no_hub") {
      say("machines-msg", "No hub: " + e.message.replace(/^api: /, "") + ". See docs/cli.md (hosts, copies).");
    } else {
      say("machines-msg", e.message);
    }
  }
}
$("fewer").addEventListener("change", loadMachines);

// ---- Live figures ----

let lastFiles = -1;
let treeAt = 0;

async function poll() {
  if (document.hidden) return;
  try {
    const s = await api("GET", "/v1/status");
    $("live-files").textContent = count(s.files);
    $("live-bytes").textContent = bytes(s.bytes);
    const sc = s.scan || {};
    $("live-scan").textContent = sc.running || !s.idle ? count(sc.files_hashed || 0) + " hashed, " + count(s.pending || 0) + " pending" : "done";
    const a = s.audit || {};
    $("live-audit").textContent = a.pass && a.pass.files ? ((100 * a.pass.done) / a.pass.files).toFixed(1) + "% of a pass" : a.state || "off";
    if (s.files !== lastFiles && Date.now() - treeAt > 5000 && level) {
      lastFiles = s.files;
      treeAt = Date.now();
      openLevel(level.path ? level : null, false);
    }
    if (a.state === "running") loadAudit();
  } catch (e) {
    $("live-scan").textContent = "daemon unreachable";
  }
}

function refreshAll() {
  if (level) openLevel(level.path ? level : null, false);
  loadDups();
  loadDirs();
  loadAudit();
}

openLevel(null, true);
loadDups();
loadDirs();
loadAudit();
loadMachines();
poll();
setInterval(poll, 2000);
