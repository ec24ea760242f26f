// roost web: the page. Every text an agent, a peer or a user wrote is drawn with
// textContent (never as HTML). State comes from the server's event stream (/events):
// a snapshot, then agents, receipts and daemon events as the daemon sends them.
"use strict";

const state = {
  agents: [],            // agent rows, as the daemon's agents op gives them
  byId: new Map(),       // peer id -> row
  receipts: new Map(),   // receipt number -> row
  rows: new Map(),       // receipt number -> its <tr>
  costs: new Map(),      // "agent:ID" / "tree:KEY" -> [[t, tokens, cost], ...]
  budgets: { tokens: null, cost: null },
  selected: null,        // the agent whose transcript is shown
  thread: null,          // message ids of the thread shown, or null: every message
  transcriptSig: "",
};

const $ = (id) => document.getElementById(id);

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function clock(epoch) {
  if (!epoch) return "";
  const d = new Date(epoch * 1000);
  return d.toLocaleTimeString([], { hour12: false });
}

// ------------------------------------------------------------------ the tree

function treeKey(row) {
  if (row.rootSession) return row.rootSession;
  if (row.parent && !row.parentSession) return "peer:" + row.parent;
  if (row.session) return row.session;
  return "peer:" + row.id;
}

function stateLabel(row) {
  if (row.dialog) return "on a dialog";
  let label = row.state || "?";
  if (row.state === "needs_input") label = "asks";
  const activity = row.activity;
  if (activity && !["running", "idle", "needs_input", "connected"].includes(activity) && activity !== row.state) {
    label += ", " + activity;
  }
  if (row.background) label += `, ${row.background} background process${row.background === 1 ? "" : "es"}`;
  return label;
}

function detailOf(row) {
  if (row.dialog) return "waits for you: " + (row.question || "");
  if (row.state === "failed" || row.stoppedFrom === "failed") return "failed: " + (row.error || "no error given");
  if (row.state === "needs_input") return "asks: " + (row.question || "");
  return row.summary || row.status || "";
}

function usageText(usage) {
  if (!usage) return "";
  const parts = [];
  if (usage.tokens) parts.push(`${usage.tokens.toLocaleString()} tok`);
  if (usage.cost) parts.push(`$${usage.cost.toFixed(4)}`);
  return parts.join(" · ");
}

function treeOrder(rows) {
  // Children under their parents (depth-first), roots oldest first.
  const ids = new Set(rows.map((r) => r.id));
  const kids = new Map();
  const roots = [];
  for (const row of rows) {
    if (row.parent && ids.has(row.parent)) {
      if (!kids.has(row.parent)) kids.set(row.parent, []);
      kids.get(row.parent).push(row);
    } else roots.push(row);
  }
  const out = [];
  const walk = (row, depth) => {
    out.push([depth, row]);
    for (const kid of kids.get(row.id) || []) walk(kid, depth + 1);
  };
  roots.forEach((r) => walk(r, 0));
  return out;
}

function matchesState(row, wanted) {
  if (!wanted) return true;
  if (wanted === "dialog") return !!row.dialog;
  if (wanted === "hibernated") return row.activity === "hibernated";
  return row.state === wanted;
}

function drawTree() {
  const tree = $("tree");
  const wantTree = $("filter-tree").value;
  const wantState = $("filter-state").value;
  const frag = document.createDocumentFragment();
  for (const [depth, row] of treeOrder(state.agents)) {
    if (wantTree && treeKey(row) !== wantTree) continue;
    if (!matchesState(row, wantState)) continue;
    const li = el("li", "agent" + (row.id === state.selected ? " selected" : ""));
    li.dataset.id = row.id;
    li.dataset.name = row.name;
    li.dataset.state = row.state || "";
    li.dataset.activity = row.activity || "";
    li.dataset.depth = depth;
    li.dataset.parent = row.parentName || "";
    li.style.paddingLeft = 6 + depth * 16 + "px";
    li.append(el("span", "live", row.live ? "● " : "○ "));
    li.append(el("span", "name", (depth ? "↳ " : "") + row.name));
    li.append(el("span", "host", row.host || row.kind));
    li.append(el("span", "state", stateLabel(row)));
    const usage = usageText(row.usage);
    if (usage) li.append(el("span", "usage", usage));
    const detail = detailOf(row);
    if (detail) li.append(el("div", "detail", detail));
    if (row.backgroundShown && row.backgroundShown.length) {
      li.append(el("div", "detail", "keeps running: " + row.backgroundShown.map((p) => `${p.pid} ${p.command}`).join(", ")));
    }
    li.addEventListener("click", () => select(row.id));
    frag.append(li);
  }
  tree.replaceChildren(frag);
  drawTreeFilter();
  $("counts").textContent = `${state.agents.length} agents · ${state.receipts.size} messages`;
}

function drawTreeFilter() {
  const select = $("filter-tree");
  const roots = new Map();
  for (const row of state.agents) {
    const key = treeKey(row);
    if (!roots.has(key) || !row.parent) roots.set(key, roots.get(key) && row.parent ? roots.get(key) : row.name);
  }
  const have = [...select.options].slice(1).map((o) => o.value + "\u0000" + o.textContent).join("\n");
  const want = [...roots].map(([k, n]) => k + "\u0000" + n).join("\n");
  if (have === want) return;
  const value = select.value;
  select.replaceChildren(el("option", null, "all trees"));
  select.options[0].value = "";
  for (const [key, name] of roots) {
    const option = el("option", null, name);
    option.value = key;
    select.append(option);
  }
  select.value = value;
}

// ------------------------------------------------------------------ dialogs

function drawDialogs() {
  const box = $("dialogs");
  const waiting = state.agents.filter((r) => r.dialog);
  const have = new Set([...box.children].map((c) => c.dataset.job + "\u0000" + c.dataset.question));
  const want = new Set(waiting.map((r) => r.id + "\u0000" + (r.question || "")));
  if (have.size === want.size && [...want].every((k) => have.has(k))) return;
  const frag = document.createDocumentFragment();
  for (const row of waiting) {
    const div = el("div", "dialog");
    div.dataset.job = row.id;
    div.dataset.question = row.question || "";
    div.append(el("span", "who", row.name), el("span", "question", " asks: " + (row.question || "")));
    const error = el("span", "dialog-error");
    if (row.dialogOptions && row.dialogOptions.length) {
      for (const option of row.dialogOptions) {
        const button = el("button", "option", option);
        button.addEventListener("click", () => answer(row.id, option, error));
        div.append(button);
      }
    } else {
      const input = el("input", "answer-text");
      input.placeholder = "your answer";
      const button = el("button", "send", "answer");
      button.addEventListener("click", () => answer(row.id, input.value, error));
      div.append(input, button);
    }
    div.append(error);
    frag.append(div);
  }
  box.replaceChildren(frag);
}

async function answer(job, text, errorNode) {
  errorNode.textContent = "";
  try {
    const response = await fetch("/api/answer", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ job, text }),
    });
    const data = await response.json().catch(() => ({}));
    if (!response.ok) errorNode.textContent = (data.error && `${data.error.code}: ${data.error.message}`) || `refused (${response.status})`;
    else errorNode.textContent = `answered: ${data.answer}`;
  } catch (e) {
    errorNode.textContent = "the page lost its server";
  }
}

// ------------------------------------------------------------------ timeline

function nameOf(id) {
  const row = state.byId.get(id);
  return row ? row.name : id;
}

function receiptText(r) {
  const parts = [r.state];
  if (r.reason) parts[0] += ` (${r.reason})`;
  if (r.seen) parts.push("seen " + clock(r.seen));
  if (r.answered) parts.push("answered " + clock(r.answered));
  if (parts.length > 1 && parts[1].startsWith(r.state + " ")) parts.shift();  // "seen · seen 10:06" says it twice
  return parts.join(" · ");
}

function fillRow(tr, r) {
  tr.dataset.state = r.state;
  tr.dataset.id = r.id || "";
  tr.dataset.sender = r.sender;
  tr.dataset.to = r.to;
  const cells = tr.children;
  cells[0].textContent = clock(r.created);
  cells[1].textContent = `${nameOf(r.sender)} → ${r.toName || nameOf(r.to)}`;
  cells[2].textContent = r.kind + (r.replyTo ? " ↩" : "");
  cells[3].textContent = r.preview;
  cells[3].title = r.preview;
  cells[4].textContent = receiptText(r);
  cells[4].dataset.state = r.state;
}

function newRow(r) {
  const tr = el("tr", "msg");
  tr.dataset.number = r.number;
  tr.append(el("td", "when"), el("td", "route"), el("td", "kind"), el("td", "preview"), el("td", "receipt"));
  return tr;
}

function visibleRow(r) {
  if (state.thread && !(state.thread.has(r.id) || (r.replyTo && state.thread.has(r.replyTo)))) return false;
  const wantTree = $("filter-tree").value;
  if (wantTree) {
    const sender = state.byId.get(r.sender), to = state.byId.get(r.to);
    if (!((sender && treeKey(sender) === wantTree) || (to && treeKey(to) === wantTree))) return false;
  }
  return true;
}

// Rows are drawn newest first, the first CHUNK at once and the rest a chunk per task,
// so the page paints (and takes live events) before thousands of rows are laid out.
const CHUNK = 400;
let drawing = 0;  // bumped by every full redraw: a stale chunk stops

function drawTimeline() {
  const body = $("timeline").tBodies[0];
  const numbers = [...state.receipts.keys()].sort((a, b) => b - a);  // newest first
  state.rows.clear();
  body.replaceChildren();
  const run = ++drawing;
  const chunk = (from) => {
    if (run !== drawing) return;
    const frag = document.createDocumentFragment();
    for (const n of numbers.slice(from, from + CHUNK)) {
      const r = state.receipts.get(n);
      if (!r || state.rows.has(n)) continue;
      const tr = newRow(r);
      fillRow(tr, r);
      tr.hidden = !visibleRow(r);
      state.rows.set(n, tr);
      frag.append(tr);
    }
    body.append(frag);
    if (from + CHUNK < numbers.length) setTimeout(() => chunk(from + CHUNK), 0);
  };
  chunk(0);
}

function takeReceipts(rows) {
  const body = $("timeline").tBodies[0];
  for (const r of rows) {
    const known = state.receipts.has(r.number);
    state.receipts.set(r.number, r);
    let tr = state.rows.get(r.number);
    if (!tr) {
      if (known) continue;  // an older row not drawn yet: its chunk draws it as it is now
      tr = newRow(r);
      state.rows.set(r.number, tr);
      body.prepend(tr);
    }
    fillRow(tr, r);
    tr.hidden = !visibleRow(r);
  }
  $("counts").textContent = `${state.agents.length} agents · ${state.receipts.size} messages`;
}

function showThread(number) {
  // The thread of a message: every message its reply_to chain reaches, both ways.
  const start = state.receipts.get(number);
  if (!start) return;
  const ids = new Set();
  if (start.id) ids.add(start.id);
  if (start.replyTo) ids.add(start.replyTo);
  let grew = true;
  while (grew) {
    grew = false;
    for (const r of state.receipts.values()) {
      const linked = (r.id && ids.has(r.id)) || (r.replyTo && ids.has(r.replyTo));
      if (!linked) continue;
      for (const id of [r.id, r.replyTo]) if (id && !ids.has(id)) { ids.add(id); grew = true; }
    }
  }
  state.thread = ids.size ? ids : null;
  $("thread-note").textContent = state.thread ? `· thread of “${start.preview}”` : "";
  $("thread-clear").hidden = !state.thread;
  for (const [n, tr] of state.rows) tr.hidden = !visibleRow(state.receipts.get(n));
}

// ------------------------------------------------------------------ transcript

function select(id) {
  state.selected = id;
  state.transcriptSig = "";
  drawTree();
  loadTranscript();
}

let transcriptTimer = null;
function transcriptSoon() {
  if (!state.selected || transcriptTimer) return;
  transcriptTimer = setTimeout(() => { transcriptTimer = null; loadTranscript(); }, 150);
}

async function loadTranscript() {
  const id = state.selected;
  if (!id) return;
  const row = state.byId.get(id);
  $("transcript-name").textContent = row ? "· " + row.name : "";
  const box = $("transcript");
  if (row && row.kind !== "job") {
    box.replaceChildren(el("p", "note", "A foreground session: its transcript is in its own terminal."));
    return;
  }
  const response = await fetch("/api/log?job=" + encodeURIComponent(id));
  const data = await response.json().catch(() => ({}));
  if (state.selected !== id) return;
  if (!response.ok) {
    box.replaceChildren(el("p", "note", (data.error && data.error.message) || "no transcript"));
    return;
  }
  const frag = document.createDocumentFragment();
  for (const entry of data.entries) {
    const div = el("div", "entry who-" + entry.who);
    if (entry.who === "roost") {
      const mark = `roost · ${entry.kind || "message"} from ${entry.fromName || "?"}` + (entry.receipt ? ` · ${receiptText(entry.receipt)}` : "");
      div.append(el("span", "mark", mark));
    }
    div.append(document.createTextNode(entry.text));
    frag.append(div);
  }
  if (!data.entries.length && data.task) frag.append(el("div", "entry who-you", "› you: " + data.task));
  if (data.state === "failed") frag.append(el("div", "entry who-tool", "✗ failed: " + (data.error || "no error given")));
  box.replaceChildren(frag);
}

// ------------------------------------------------------------------ costs

function spark(points, index, budget) {
  const w = 220, h = 28;
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", w);
  svg.setAttribute("height", h);
  if (!points || points.length < 1) return svg;
  const t0 = points[0][0], t1 = points[points.length - 1][0];
  const top = Math.max(budget || 0, ...points.map((p) => p[index])) || 1;
  const xy = points.map((p) => `${t1 > t0 ? ((p[0] - t0) / (t1 - t0)) * w : w}, ${h - (p[index] / top) * (h - 2) - 1}`);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", (points.length === 1 ? `0,${xy[0].split(",")[1]} ` : "") + xy.join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#2f6f9f");
  svg.append(line);
  return svg;
}

function drawCosts() {
  const box = $("costs");
  const frag = document.createDocumentFragment();
  const trees = new Map();
  for (const [depth, row] of treeOrder(state.agents)) {
    const key = treeKey(row);
    if (!trees.has(key)) trees.set(key, { root: row, rows: [] });
    trees.get(key).rows.push([depth, row]);
  }
  const budgets = state.budgets;
  for (const [key, tree] of trees) {
    const usage = tree.root.treeUsage || { tokens: 0, cost: 0 };
    const div = el("div", "cost-row");
    div.dataset.tree = key;
    const limits = [];
    if (budgets.tokens) limits.push(`${usage.tokens.toLocaleString()} / ${budgets.tokens.toLocaleString()} tokens`);
    else limits.push(`${(usage.tokens || 0).toLocaleString()} tokens`);
    if (budgets.cost) limits.push(`$${(usage.cost || 0).toFixed(4)} / $${budgets.cost}`);
    else limits.push(`$${(usage.cost || 0).toFixed(4)}`);
    div.append(el("div", "tree-name", `${tree.root.name}'s tree: ${limits.join(" · ")}` + (usage.spent ? ` · spent: ${usage.reason || ""}` : "")));
    const fraction = Math.max(budgets.tokens ? usage.tokens / budgets.tokens : 0, budgets.cost ? usage.cost / budgets.cost : 0);
    if (budgets.tokens || budgets.cost) {
      const bar = el("div", "bar"), fill = el("span", usage.spent ? "spent" : "");
      fill.style.width = Math.min(100, fraction * 100).toFixed(1) + "%";
      bar.append(fill);
      div.append(bar);
    }
    const points = state.costs.get("tree:" + key);
    const useCost = points && points.some((p) => p[2] > 0);
    div.append(spark(points, useCost ? 2 : 1, useCost ? budgets.cost : budgets.tokens));
    frag.append(div);
  }
  box.replaceChildren(frag);
}

// ------------------------------------------------------------------ events

function takeAgents(rows) {
  state.agents = rows;
  state.byId = new Map(rows.map((r) => [r.id, r]));
  drawTree();
  drawDialogs();
  drawCosts();
  const row = state.selected && state.byId.get(state.selected);
  if (row) {
    const sig = JSON.stringify([row.state, row.status, row.pending, row.lastMessage, row.summary, row.dialog, row.usage]);
    if (sig !== state.transcriptSig) { state.transcriptSig = sig; transcriptSoon(); }
  }
}

function takeCostPoints(points) {
  for (const { key, point } of points || []) {
    if (!state.costs.has(key)) state.costs.set(key, []);
    state.costs.get(key).push(point);
  }
}

function daemonUp(up) {
  const node = $("daemon");
  node.textContent = up ? "daemon running" : "daemon not running: waiting for it";
  node.className = "daemon " + (up ? "up" : "down");
}

function connect() {
  const events = new EventSource("/events");
  events.addEventListener("snapshot", (e) => {
    const data = JSON.parse(e.data);
    state.budgets = data.budgets || state.budgets;
    state.costs = new Map(Object.entries(data.costs || {}));
    state.receipts = new Map(data.receipts.map((r) => [r.number, r]));
    const leftOut = $("left-out");
    leftOut.hidden = !data.receiptsLeftOut;
    leftOut.textContent = data.receiptsLeftOut ? `${data.receiptsLeftOut} older messages are kept by the daemon but not shown.` : "";
    daemonUp(data.daemonUp);
    takeAgents(data.agents);
    drawTimeline();
    document.body.dataset.ready = "1";
  });
  events.addEventListener("agents", (e) => {
    const data = JSON.parse(e.data);
    takeCostPoints(data.costPoints);
    takeAgents(data.agents);
    daemonUp(true);
  });
  events.addEventListener("receipts", (e) => {
    const data = JSON.parse(e.data);
    takeReceipts(data.receipts);
    if (state.selected && data.receipts.some((r) => r.to === state.selected || r.sender === state.selected)) transcriptSoon();
  });
  events.addEventListener("daemon", (e) => daemonUp(JSON.parse(e.data).up));
}

document.addEventListener("DOMContentLoaded", () => {
  $("filter-tree").addEventListener("change", () => { drawTree(); drawTimeline(); });
  $("filter-state").addEventListener("change", drawTree);
  $("timeline").tBodies[0].addEventListener("click", (e) => {
    const tr = e.target.closest("tr.msg");
    if (tr) showThread(Number(tr.dataset.number));
  });
  $("thread-clear").addEventListener("click", () => {
    state.thread = null;
    $("thread-note").textContent = "";
    $("thread-clear").hidden = true;
    for (const [n, tr] of state.rows) tr.hidden = !visibleRow(state.receipts.get(n));
  });
  connect();
});
