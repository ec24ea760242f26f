"""``roost web`` with 50 agents and 10,000 messages: the page's time to first paint and
to a live update, in a real headless browser (Debian's Chromium through Playwright).

50 foreground peers (real connections, registered with ``peer_register``) send 10,000
messages among them (each one to the next, pipelined), then ``roost web`` is started on
that daemon and the page opened:

* **first paint**: from navigation start to the snapshot drawn (the tree, and every
  receipt the daemon keeps: its newest 100 per sender, so 5,000 of the 10,000 rows),
  read from the page's own clock (``performance.now()`` once ``body[data-ready]`` is
  set). Baseline: the same page on an empty daemon (no agent, no message).
* **live update**: one more message sent; from just before its ``send`` is written to
  its row drawn on the page (a MutationObserver in the page notes ``Date.now()``).
  Baseline: the same message's ``receipts`` event read by a plain ``watch`` connection
  (what the daemon's stream costs before the page's server and the browser).

Skipped (no row) when the browser or Playwright is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from typing import Any

from bench.common import RoostDaemon, Row, fmt_time
from bench.peers import RawConn, register_foreground

BROWSER = shutil.which("chromium-headless-shell") or shutil.which("chromium")
OBSERVE = """(text) => new Promise((resolve) => {
  const body = document.querySelector('#timeline tbody');
  const seen = () => [...body.querySelectorAll('tr.msg .preview')].some((td) => td.textContent === text);
  const observer = new MutationObserver(() => { if (seen()) { observer.disconnect(); window.__drawn = Date.now(); } });
  observer.observe(body, { childList: true, subtree: true, characterData: true });
  resolve(true);
})"""

#: Resolves with the time the row was drawn (it was noted then; this only waits to read it).
DRAWN = "new Promise((resolve) => { const t = setInterval(() => { if (window.__drawn) { clearInterval(t); resolve(window.__drawn); } }, 5); })"


def send_many(conns: list[RawConn], messages: int) -> None:
    """``messages`` sends, spread over the peers, each to the next, pipelined per peer."""
    per = messages // len(conns)
    ids = [c.registered_id for c in conns]  # type: ignore[attr-defined]
    for start in range(0, per, 100):
        batch = min(100, per - start)
        for n, conn in enumerate(conns):
            for k in range(batch):
                conn.write("send", to=ids[(n + 1) % len(conns)], message=f"message {start + k} from {n}")
        for conn in conns:
            for _ in range(batch):
                frame = conn.read()
                if not frame.get("ok"):
                    raise RuntimeError(f"send: {frame.get('error')}")


def start_web(env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen([sys.executable, "-m", "roost_core.cli", "web"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("roost web: "):
        raise RuntimeError(f"roost web did not start: {line!r}")
    return process, line.split(": ", 1)[1].strip()


def page_figures(browser: Any, url: str, live: Any, reps: int) -> dict[str, Any]:
    """Open the page ``reps`` times: the first paint each time; then one live update per
    rep (``live(i)`` sends the message and returns when it left, its text and the time)."""
    paints, updates = [], []
    for i in range(reps):
        context = browser.new_context(viewport={"width": 1500, "height": 900})
        page = context.new_page()
        page.goto(url)
        page.wait_for_selector("body[data-ready='1']", timeout=120_000)
        paints.append(page.evaluate("performance.now()") / 1000)
        if live is not None:
            text = f"live update {i} {time.time()}"
            page.evaluate(OBSERVE, text)
            sent = live(text)
            # (Not wait_for_function: the page's CSP refuses the eval it uses.)
            drawn = page.evaluate(DRAWN)
            updates.append(drawn / 1000 - sent)
        context.close()
    return {"paints": paints, "updates": updates}


def watch_latency(socket_path: str, sender: RawConn, to: str, reps: int) -> list[float]:
    """The baseline of a live update: send → the ``receipts`` event on a plain watch connection."""
    watcher = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    watcher.connect(socket_path)
    watcher.sendall(b'{"id":1,"op":"watch","receipts":true}\n')
    buffer = b""
    while b"\n" not in buffer:
        buffer += watcher.recv(1 << 20)
    buffer = buffer.partition(b"\n")[2]
    times = []
    for i in range(reps):
        text = f"baseline {i} {time.time()}"
        t0 = time.time()
        sender.call("send", to=to, message=text)
        found = False
        while not found:
            while b"\n" not in buffer:
                buffer += watcher.recv(1 << 20)
            line, _, buffer = buffer.partition(b"\n")
            frame = json.loads(line)
            if frame.get("event") == "receipts" and any(r["preview"] == text for r in frame["receipts"]):
                times.append(time.time() - t0)
                found = True
    watcher.close()
    return times


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("web: Playwright is not installed; skipped", flush=True)
        return []
    if BROWSER is None:
        print("web: no headless Chromium; skipped", flush=True)
        return []
    agents, messages, reps = (5, 100, 1) if smoke else (50, 10_000, 3 if quick else 5)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=BROWSER)
        try:
            empty = RoostDaemon(durable=False, label="web-empty").start()
            try:
                web, url = start_web(empty.env)
                try:
                    baseline = page_figures(browser, url, None, reps)
                finally:
                    web.terminate()
                    web.wait()
            finally:
                empty.close()
            daemon = RoostDaemon(durable=False, label="web").start()
            try:
                conns = register_foreground(daemon.socket, agents)
                rows = daemon_agents(daemon.socket)
                by_name = {row["name"]: row["id"] for row in rows}
                for n, conn in enumerate(conns):
                    conn.registered_id = by_name[f"fg {n}"]  # type: ignore[attr-defined]
                t0 = time.perf_counter()
                send_many(conns, messages)
                sent_s = time.perf_counter() - t0
                web, url = start_web(daemon.env)
                try:
                    sender, to = conns[0], conns[1].registered_id  # type: ignore[attr-defined]

                    def live(text: str) -> float:
                        t = time.time()
                        sender.call("send", to=to, message=text)
                        return t

                    figures = page_figures(browser, url, live, reps)
                    stream = watch_latency(daemon.socket, sender, to, reps)
                finally:
                    web.terminate()
                    web.wait()
                for conn in conns:
                    conn.close()
            finally:
                daemon.close()
        finally:
            browser.close()
    paint, paint_base = statistics.median(figures["paints"]), statistics.median(baseline["paints"])
    update, update_base = statistics.median(figures["updates"]), statistics.median(stream)
    raw = {"agents": agents, "messages": messages, "sent_s": sent_s, **figures, "empty_paints": baseline["paints"], "stream": stream}
    return [
        Row("web", f"first paint, {agents} agents and {messages:,} messages (median of {reps}; baseline: the empty page)",
            fmt_time(paint), fmt_time(paint_base), paint / paint_base, raw=raw),
        Row("web", f"live update: send → its row drawn (median of {reps}; baseline: the receipts event on a plain watch connection)",
            fmt_time(update), fmt_time(update_base), update / update_base, raw=raw),
    ]


def daemon_agents(socket_path: str) -> list[dict[str, Any]]:
    conn = RawConn(socket_path)
    try:
        rows: list[dict[str, Any]] = conn.call("agents")["agents"]
        return rows
    finally:
        conn.close()


if __name__ == "__main__":  # pragma: no cover
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    for row in run(quick="--quick" in sys.argv, smoke="--smoke" in sys.argv):
        print(row.cells())
