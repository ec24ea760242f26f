"""``roost web`` in a real headless browser (Debian's Chromium, driven by Playwright)
against a real daemon and a scripted team: the tree appears and changes live as a child
spawns, settles and hibernates; a message's receipt moves to seen and answered on the
page, and its thread is one click; a dialog answered on the page reaches the child; the
page refuses an answer without its secret, and requests with a foreign Origin or Host.
A screenshot of the page is saved into the test's folder (its path printed)."""

from __future__ import annotations

import http.client
import json

import pytest
from webkit import RoostWeb, launch, needs_browser

pytestmark = needs_browser


def team(gate) -> dict:
    """A lead that spawns kid-a (builds once ``gate`` appears; answers a message with its
    reply_to) and kid-b (opens a yes/no dialog); a reply "ping" makes the lead ask kid-a."""
    return {
        "run": [
            {"steps": [
                {"spawn": {"task": "build it", "name": "kid-a", "model": "builder"}},
                {"spawn": {"task": "deploy it", "name": "kid-b", "model": "deployer"}},
                {"say": "spawned two"},
            ]},
            {"match": "ping", "steps": [{"send": {"to": "kid-a", "message": "status of the build?"}}, {"say": "asked"}]},
        ],
        "default": {"steps": [{"say": "noted {from_name}"}]},
        "models": {
            "builder": {
                "run": [{"steps": [{"wait_for": str(gate)}, {"say": "A is built"}]}],
                "default": {"steps": [{"send": {"to": "{from}", "message": "all good here", "reply_to": "{msg}"}}, {"say": "answered"}]},
            },
            "deployer": {"run": [{"steps": [{"dialog": "Deploy to production?", "options": ["yes", "no"]}, {"say": "deployed"}]}]},
        },
        "usage": {"input": 100, "output": 20, "cost": 0.001},
    }


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = launch(playwright)
        yield browser
        browser.close()


def test_the_page_follows_a_scripted_team_live_and_answers_a_dialog(daemon_factory, write_config, tmp_path, browser):
    from playwright.sync_api import expect

    write_config({"hibernateAfterSeconds": 0.5, "agentTreeTokens": 100000})
    daemon = daemon_factory().start()
    web = RoostWeb(daemon.env)
    try:
        context = browser.new_context(viewport={"width": 1500, "height": 860})
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
        page.goto(web.url)
        # The secret moved into the cookie: the address bar no longer holds it.
        assert page.url == web.base + "/"
        page.wait_for_selector("body[data-ready='1']")

        gate = tmp_path / "gate"
        lead = daemon.start_job("lead the team", name="lead", scenario=team(gate))
        kid_a = page.locator("li.agent[data-name='kid-a']")
        kid_b = page.locator("li.agent[data-name='kid-b']")
        # The tree appears live, children under their parent.
        expect(kid_a.locator(".state")).to_have_text("running")
        expect(kid_b.locator(".state")).to_have_text("on a dialog")
        expect(kid_a).to_have_attribute("data-parent", "lead")
        expect(kid_a).to_have_attribute("data-depth", "1")
        names = page.locator("li.agent .name").all_text_contents()
        assert names.index("lead") < names.index("↳ kid-a"), names
        # kid-a settles, reports, and hibernates: the page follows.
        gate.touch()
        expect(kid_a.locator(".state")).to_have_text("done, hibernated")
        report = page.locator("#timeline tr.msg", has_text="kid-a → lead")
        expect(report.first.locator(".kind")).to_have_text("report")

        # A message from the lead to kid-a (woken by it): its receipt moves to seen, then
        # answered, live; one click shows its thread.
        daemon.call("reply", job=lead, text="ping")
        asked = page.locator("#timeline tr.msg", has_text="status of the build?")
        expect(asked.locator(".receipt")).to_contain_text("answered")
        expect(asked.locator(".receipt")).to_contain_text("seen ")
        asked.click()
        expect(page.locator("#timeline tr.msg:visible")).to_have_count(2)
        expect(page.locator("#timeline tr.msg:visible", has_text="all good here").locator(".kind")).to_have_text("message ↩")
        page.locator("#thread-clear").click()
        # kid-a's transcript: the lead's message marked as roost's item, with its receipt.
        kid_a.click()
        item = page.locator("#transcript .who-roost", has_text="status of the build?")
        expect(item.locator(".mark")).to_contain_text("roost · message from lead")
        expect(item.locator(".mark")).to_contain_text("answered")

        # The page refuses what does not come with its secret, from its own origin and host.
        kid_b_id = next(j["id"] for j in daemon.call("jobs")["jobs"] if j["name"] == "kid-b")
        answer = json.dumps({"job": kid_b_id, "text": "yes"})
        foreign = context.request.post(web.base + "/api/answer", data=answer, headers={"Content-Type": "application/json", "Origin": "http://evil.example"})
        assert foreign.status == 403
        stranger = browser.new_context()
        try:
            without = stranger.request.post(web.base + "/api/answer", data=answer, headers={"Content-Type": "application/json", "Origin": web.base})
            assert without.status == 403
            assert stranger.request.get(web.base + "/events").status == 403
        finally:
            stranger.close()
        rebound = http.client.HTTPConnection("127.0.0.1", web.port, timeout=10)
        rebound.request("GET", "/events", headers={"Host": f"attacker.example:{web.port}", "Cookie": f"roost_web_{web.port}={web.secret}"})
        assert rebound.getresponse().status == 400
        rebound.close()
        assert daemon.job(kid_b_id)["dialog"], "a refused answer reached the child"

        # Answered on the page, the dialog reaches the child.
        page.locator(f".dialog[data-job='{kid_b_id}'] button.option", has_text="yes").click()
        expect(page.locator(f".dialog[data-job='{kid_b_id}']")).to_have_count(0)
        daemon.wait_job(kid_b_id, "done")
        answers = [e for e in daemon.entries(kid_b_id) if (e.get("roost") or {}).get("dialog")]
        assert [a["message"]["content"][0]["text"] for a in answers] == ["yes"]
        expect(kid_b.locator(".state")).to_contain_text("hibernated")

        page.screenshot(path=str(tmp_path / "roost-web.png"))
        print(f"screenshot: {tmp_path / 'roost-web.png'}")
        assert not errors, errors
    finally:
        web.stop()
