"""The host conformance suite: one set of scenarios every agent host passes, written once.

Each scenario is a pytest test function taking the fixture ``conformance_host``, a
:class:`HostUnderTest`: a host's :class:`HostDriver` (what its test kit knows: how to make
the fake model server for it, which arguments start a job on it, how to read what the
model received) joined to a test's daemon. roost's own suite (``tests/conformance/``)
parametrises that fixture over every registered host whose agent program is installed;
a plugin author runs the same scenarios on their host by importing them into a test
module and providing the fixture::

    from roost_core.conformance import SCENARIOS, HostUnderTest, RoostDaemon

    globals().update(SCENARIOS)  # test_a_task_..., test_b_..., ...

    @pytest.fixture
    def conformance_host(tmp_path):
        env = {**os.environ, "ROOST_HOME": str(tmp_path / "roost")}
        driver = OurDriver()  # a roost_core.testing.HostDriver
        driver.setup(tmp_path, env)
        daemons = []

        def daemon():
            daemons.append(RoostDaemon(env))
            return daemons[-1]

        yield HostUnderTest(driver, env, tmp_path, daemon)
        for daemon in daemons:
            daemon.cleanup()
        driver.cleanup()

The scenarios (the names say what each checks; a failure names the host's defect):

a. a job's task reaches the model once; ``roost log`` shows the whole run;
b. an agent item reaches a running model once, framed, with the notice; a user reply to a
   running job reaches it once as the user's own words and shows as the user's line;
c. the notice never shows in ``roost log`` as a user line;
d. ``seen`` is stamped once the model has the item in a request, whatever the model's
   next output is (here a tool call), ``answered`` by ``reply_to``;
e. ``kill -9`` of the worker mid-tool: the same session goes on, nothing twice, nothing
   lost, ``roost log`` complete, no process of the killed worker left;
f. a child's report reaches its parent once.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs

from roost_core.envelope_rules import NO_USER_AUTHORITY

__all__ = ["NOTICE_LINE", "SCENARIOS", "HostDriver", "HostUnderTest", "ModelInput", "RoostDaemon"]

#: The notice's first line: what shows that the notice is in a text.
NOTICE_LINE = NO_USER_AUTHORITY.splitlines()[0]
#: How long a scenario waits for one step of a real agent program (a start, an answer).
STEP_TIMEOUT = 120.0


@attrs.frozen
class ModelInput:
    """One piece of a model request as the model reads it: a message's text (or a tool
    call's or tool result's, as JSON) and whose it is: ``system``, ``user``,
    ``assistant`` or ``tool`` (a tool's result, hook contexts that ride on one too)."""

    role: str
    text: str


class HostDriver:
    """What the conformance suite needs of a host's test kit; a host's tests subclass it.

    The suite calls :meth:`setup` once, then per scenario :meth:`start_model` before the
    daemon starts (the environment the daemon and its workers inherit is ``env``), then
    starts jobs with :meth:`job_args` and reads :meth:`model_requests`; :meth:`cleanup`
    at the end.
    """

    #: The host's registered name (``roost start --host NAME``).
    name: str = ""

    def setup(self, tmp_path: Path, env: dict[str, str]) -> None:
        """Make ``env`` (the daemon's environment, changed in place) this host's isolated
        world under ``tmp_path``; skip the test (``pytest.skip``) when the host's program
        is not installed."""

    def start_model(self, scenario: dict[str, Any]) -> None:
        """Start the fake model server that plays ``scenario`` (the scripted host's format)
        and point ``env`` at it (called before the daemon starts)."""
        raise NotImplementedError

    def job_args(self) -> dict[str, Any]:
        """The ``start`` / ``spawn`` op arguments that run a job on this host (``host``,
        and ``cwd`` or ``scenario`` where it needs them)."""
        return {"host": self.name}

    def model_requests(self) -> list[list[ModelInput]]:
        """Every request the model answered so far (not the program's own side calls:
        titles, summaries), in order, each as the inputs it held, in order."""
        raise NotImplementedError

    def cleanup(self) -> None:
        """After the test: stop the fake model (a request it refused fails the test)."""


class HostUnderTest:
    """A :class:`HostDriver` joined to one test's daemon: the scenarios' view of a host.

    ``daemon_factory()`` makes a daemon handle (not started) on ``env``, with ``start()``,
    ``call(op, **args)``, ``job(id)``, ``wait_job(id, *states, timeout=)``,
    ``record(id)`` and ``paths`` (``tests/conftest.py``'s ``DaemonHandle``)."""

    def __init__(self, driver: HostDriver, env: dict[str, str], tmp_path: Path, daemon_factory: Callable[[], Any]) -> None:
        self.driver = driver
        self.env = env
        self.tmp = tmp_path
        self.daemon_factory = daemon_factory
        self.daemon: Any = None

    @property
    def name(self) -> str:
        return self.driver.name

    def begin(self, scenario: dict[str, Any]) -> Any:
        """The model playing ``scenario`` and a started daemon (returned)."""
        self.driver.start_model(scenario)
        self.daemon = self.daemon_factory().start()
        return self.daemon

    def roost(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``roost ARGS`` in the host's world (the CLI, as a user runs it)."""
        return subprocess.run([sys.executable, "-m", "roost_core.cli", *args], env=self.env, capture_output=True, text=True, timeout=STEP_TIMEOUT)

    def start(self, task: str, name: str) -> str:
        """``roost start TASK`` on the host (:meth:`HostDriver.job_args` as flags); the job id."""
        args = self.driver.job_args()
        flags = ["--host", str(args.pop("host")), "--name", name, "--json"]
        for key, value in args.items():
            flags += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
        started = self.roost("start", *flags, task)
        assert started.returncode == 0, started.stderr
        return str(json.loads(started.stdout)["id"])

    def log_lines(self, job: str) -> list[str]:
        """``roost log JOB``, line by line."""
        shown = self.roost("log", job)
        assert shown.returncode == 0, shown.stderr
        return shown.stdout.splitlines()

    def holding(self, token: str) -> list[list[ModelInput]]:
        """The model requests so far that hold ``token`` somewhere."""
        return [request for request in self.driver.model_requests() if any(token in piece.text for piece in request)]

    def wait_model_has(self, token: str, timeout: float = STEP_TIMEOUT) -> None:
        """Until a model request holds ``token``."""
        wait(lambda: self.holding(token), timeout, f"a model request holding {token!r} on {self.name}")


class RoostDaemon:
    """A roost daemon for a plugin author's conformance run (roost's own suite passes its
    ``tests/conftest.py`` handles): started on ``env`` (its ``ROOST_HOME`` a test's own
    folder), asked over its socket, and stopped with every worker by :meth:`cleanup`."""

    def __init__(self, env: dict[str, str]) -> None:
        from roost_core.paths import resolve_paths

        self.env = env
        self.paths = resolve_paths(env)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> RoostDaemon:
        from roost_core.client import wait_for_daemon

        self.paths.ensure()
        with open(self.paths.daemon_log, "ab") as log:
            self.process = subprocess.Popen([sys.executable, "-m", "roost_core.daemon"], env=self.env, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=log, start_new_session=True)
        wait_for_daemon(self.paths, timeout=60, process=self.process)
        return self

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        from roost_core.client import Client

        with Client(self.paths.socket, timeout=STEP_TIMEOUT) as conn:
            return dict(conn.call(op, **args))

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(next(row for row in self.call("jobs")["jobs"] if row["id"] == job_id))

    def record(self, job_id: str) -> dict[str, Any]:
        return dict(json.loads((self.paths.jobs_dir / f"{job_id}.json").read_text()))

    def wait_job(self, job_id: str, *states: str, timeout: float = STEP_TIMEOUT) -> dict[str, Any]:
        """The job's row once it is in ``states`` (any settled state) with nothing pending."""
        states = states or ("idle", "needs_input", "done", "failed", "stopped")

        def settled() -> dict[str, Any] | None:
            row = self.job(job_id)
            return row if row["state"] in states and (row["pending"] == 0 or row["state"] == "stopped") else None

        return dict(wait(settled, timeout, f"job {job_id} in {states}"))

    def cleanup(self) -> None:
        """Stop the daemon and every job of it."""
        if self.process is None or self.process.poll() is not None:
            return
        for row in self.call("jobs")["jobs"]:
            if row.get("live"):
                self.call("stop", job=row["id"])
        self.call("daemon_stop")
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)


# ------------------------------------------------------------------------------ helpers


def wait(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate`` until it is truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


async def in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))


def token(label: str) -> str:
    """A word no scenario text holds by chance, to find one input in a request."""
    return f"{label}-{uuid.uuid4().hex[:8]}"


def once_in(request: list[ModelInput], text: str) -> ModelInput:
    """The one input of ``request`` that holds ``text``, holding it once."""
    pieces = [piece for piece in request if text in piece.text]
    assert len(pieces) == 1, f"{text!r} is in {len(pieces)} inputs of the model request, not 1: {pieces}"
    assert pieces[0].text.count(text) == 1, f"{text!r} is {pieces[0].text.count(text)} times in one input: {pieces[0]}"
    return pieces[0]


def user_lines(lines: list[str]) -> list[str]:
    """The lines of ``roost log`` that belong to a user entry (``› you:`` and the lines of
    its text that follow, up to the next entry)."""
    starts = ("› you: ", "assistant: ", "✉ ", "│ ", "  ↳ ", "⚙ ", "↳ ", "⋯ ")
    out: list[str] = []
    in_user = False
    for line in lines:
        if line.startswith(starts):
            in_user = line.startswith("› you: ")
        if in_user:
            out.append(line)
    return out


def run_story(story: Callable[[], Awaitable[Any]]) -> Any:
    return anyio.run(story)


def lead_session(host: HostUnderTest, name: str = "lead") -> Any:
    """A foreground session that joins the test's daemon as a peer (the parent)."""
    from roost_core.foreground import ForegroundSession

    return ForegroundSession(host.tmp / f"{name}.jsonl", name=name, paths=host.daemon.paths, cwd=str(host.tmp))


async def spawn(lead: Any, host: HostUnderTest, task: str, name: str) -> str:
    """``lead`` spawns a child on the host (the ``spawn`` op with the driver's arguments)."""
    result = await lead.call("spawn", task=task, name=name, **host.driver.job_args())
    return str(result["id"])


async def send(lead: Any, to: str, message: str) -> dict[str, Any]:
    ok, text, data = await lead.call_tool("roost_send", {"to": to, "message": message})
    assert ok, text
    return dict(data)


def sent_receipt(host: HostUnderTest, job: str, text: str) -> dict[str, Any] | None:
    """The receipt of the item ``text`` the job received (the ``log`` op's ``received``)."""
    return next((r for r in host.daemon.call("log", job=job)["received"] if r["preview"] == text), None)


# ------------------------------------------------------------------------------ scenarios


def test_a_task_reaches_the_model_once_and_roost_log_shows_the_run(conformance_host: HostUnderTest) -> None:
    host = conformance_host
    task = token("task")
    daemon = host.begin({"default": {"steps": [{"say": "the conformance answer"}]}})
    job = host.start(f"do the {task}", "conf-a")
    row = daemon.wait_job(job, timeout=STEP_TIMEOUT)
    assert row["state"] == "done", row
    requests = host.driver.model_requests()
    assert requests, "the model got no request"
    for request in requests:
        assert once_in(request, task).role == "user"
    lines = host.log_lines(job)
    assert lines.count(f"› you: do the {task}") == 1, lines
    assert lines[-1] == "assistant: the conformance answer", lines
    assert not [line for line in lines if task in line and not line.startswith("› you: ")], lines


def test_b_an_agent_item_and_a_user_reply_reach_a_running_model_once_each(conformance_host: HostUnderTest) -> None:
    host = conformance_host
    first, second = host.tmp / "gate-1", host.tmp / "gate-2"
    item, reply = token("item"), token("reply")
    daemon = host.begin({
        "run": [{"match": "slow", "steps": [{"wait_for": str(first)}, {"wait_for": str(second)}, {"say": "after the tools"}]}],
        "default": {"steps": [{"say": "noted"}]},
    })

    async def story() -> str:
        async with lead_session(host) as lead:
            kid = await spawn(lead, host, "a slow task", "conf-b")
            await in_thread(wait, lambda: host.driver.model_requests(), STEP_TIMEOUT, "the child's first model call")
            sent = await send(lead, kid, item)
            assert sent["result"] == "delivered", sent
            first.write_text("go")
            await in_thread(host.wait_model_has, item)
            replied = await in_thread(host.roost, "reply", kid, reply)
            assert replied.returncode == 0, replied.stderr
            second.write_text("go")
            await in_thread(host.wait_model_has, reply)
            await in_thread(daemon.wait_job, kid, timeout=STEP_TIMEOUT)
            return kid

    try:
        kid = run_story(story)
    finally:
        first.write_text("go")
        second.write_text("go")
    last = host.driver.model_requests()[-1]
    framed = once_in(last, item)
    at = framed.text.index(item)
    assert framed.role != "assistant", framed
    assert "<agent-message" in framed.text[:at], f"the item is not framed: {framed}"
    assert NOTICE_LINE in framed.text[at:], f"no notice after the item: {framed}"
    own = once_in(last, reply)
    assert own.role == "user", f"the user's reply is not a user input: {own}"
    assert NOTICE_LINE not in own.text and "<agent-message" not in own.text, f"the user's reply is handed over as an agent's: {own}"
    lines = host.log_lines(kid)
    assert lines.count(f"› you: {reply}") == 1, lines
    assert not [line for line in user_lines(lines) if item in line], lines


def test_c_the_notice_never_shows_in_roost_log_as_a_user_line(conformance_host: HostUnderTest) -> None:
    host = conformance_host
    item = token("item")
    daemon = host.begin({"default": {"steps": [{"say": "noted"}]}})

    async def story() -> str:
        async with lead_session(host) as lead:
            kid = await spawn(lead, host, "first task", "conf-c")
            await lead.wait_for_delivery(1, timeout=STEP_TIMEOUT)
            await send(lead, kid, item)  # wakes the job: its next run starts from the item
            await lead.wait_for_delivery(2, timeout=STEP_TIMEOUT)
            await in_thread(daemon.wait_job, kid, timeout=STEP_TIMEOUT)
            return kid

    kid = run_story(story)
    host.wait_model_has(item)
    lines = host.log_lines(kid)
    assert any(item in line for line in lines), lines
    users = user_lines(lines)
    assert users == ["› you: first task"], f"user lines in roost log: {users}"
    assert not [line for line in lines if NOTICE_LINE in line and not line.startswith("│ ")], lines


def test_d_seen_when_the_model_has_the_item_and_answered_by_reply_to(conformance_host: HostUnderTest) -> None:
    host = conformance_host
    gate = host.tmp / "gate"
    item = token("item")
    daemon = host.begin({
        "run": [{"match": "^first", "steps": [{"say": "first done"}]}],
        # The model's first output after the item is a tool call (roost_send answering it).
        "default": {"steps": [{"send": {"to": "{from}", "message": "got it", "reply_to": "{msg}"}}, {"wait_for": str(gate)}, {"say": "second done"}]},
    })

    async def story() -> tuple[str, dict[str, Any]]:
        async with lead_session(host) as lead:
            kid = await spawn(lead, host, "first task", "conf-d")
            await lead.wait_for_delivery(1, timeout=STEP_TIMEOUT)
            await send(lead, kid, item)
            await in_thread(host.wait_model_has, item)
            [*_, answer] = await lead.wait_for_delivery(2, timeout=STEP_TIMEOUT)
            assert answer["kind"] == "message" and "got it" in answer["content"], answer
            # The gate is shut: the model's next text answer has not come, and need not.
            receipt = await in_thread(wait, lambda: (r := sent_receipt(host, kid, item)) and r["seen"] and r, 30,
                                      f"{item!r} seen while the model works on its tool call")
            answered = await in_thread(wait, lambda: (r := sent_receipt(host, kid, item)) and r["state"] == "answered" and r, 30,
                                       f"{item!r} answered by reply_to")
            gate.write_text("go")
            await lead.wait_for_delivery(3, timeout=STEP_TIMEOUT)
            await in_thread(daemon.wait_job, kid, timeout=STEP_TIMEOUT)
            return kid, {"seen": receipt, "answered": answered}

    try:
        _kid, receipts = run_story(story)
    finally:
        gate.write_text("go")
    seen, answered = receipts["seen"], receipts["answered"]
    assert seen["seen"] >= seen["created"], seen
    assert answered["seen"] is not None and answered["answered"] >= answered["seen"], answered


def carries_mark(process: Any) -> bool:
    """Whether ``process`` (psutil) was started with a worker mark; one gone counts."""
    import psutil

    from roost_core.worker.proctree import MARK_VARIABLE

    try:
        return MARK_VARIABLE in process.environ()
    except psutil.NoSuchProcess:
        return True


def test_e_kill9_of_the_worker_mid_tool_the_session_goes_on_nothing_twice_nothing_lost(conformance_host: HostUnderTest) -> None:
    import psutil

    host = conformance_host
    started = host.tmp / "tool-started"
    gate = host.tmp / "gate"  # opened only at the end: the tool runs until the kill
    task, more = token("task"), token("more")
    # The slow tool says it runs (the kill must come mid-tool: killed before the agent
    # wrote the task to its transcript, the task is rightly handed over again, and would
    # take the slow run again), then waits for the gate (no command substitution: Gemini
    # CLI refuses a shell command that holds one).
    slow_tool = f"touch {shlex.quote(str(started))} && while [ ! -e {shlex.quote(str(gate))} ]; do sleep 0.05; done"
    daemon = host.begin({
        # Only the task alone takes the slow run: a host may hand the reply over as the
        # killed run's next input, or beside the task in one input, or after the task with
        # the interrupted tool call dropped; none of those runs the slow tool again.
        "run": [{"match": f"^slow {task}$", "steps": [{"shell": slow_tool}, {"say": "carried on"}]}],
        "default": {"steps": [{"say": "carried on"}]},
    })
    job = host.start(f"slow {task}", "conf-e")
    try:
        wait(started.exists, STEP_TIMEOUT, f"the slow tool running on {host.name}")
        row = wait(lambda: (r := daemon.job(job))["workerPid"] and r, STEP_TIMEOUT, "the worker's pid")
        session = daemon.record(job)["session"]
        worker = psutil.Process(row["workerPid"])
        everything = [worker, *worker.children(recursive=True)]
        # The daemon finds a dead worker's leftovers by the mark in their starting
        # environment: a process the host starts with an environment of its own must keep it.
        unmarked = [p.cmdline() for p in everything[1:] if not carries_mark(p)]
        assert not unmarked, f"processes of the worker without its mark: {unmarked}"
        worker.kill()

        def gone() -> bool:
            return not [p for p in everything if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]

        wait(gone, 60, "every process of the killed worker gone")
        daemon.wait_job(job, timeout=STEP_TIMEOUT)
        replied = host.roost("reply", job, more)
        assert replied.returncode == 0, replied.stderr
        host.wait_model_has(more)
        row = daemon.wait_job(job, timeout=STEP_TIMEOUT)
        assert row["state"] == "done", row
        assert daemon.record(job)["session"] == session, "the job went on in another session"
        last = host.driver.model_requests()[-1]
        assert once_in(last, task).role == "user" and once_in(last, more).role == "user"
        lines = host.log_lines(job)
        assert lines.count(f"› you: slow {task}") == 1 and lines.count(f"› you: {more}") == 1, lines
        assert lines[-1] == "assistant: carried on", lines
        assert gone()
    finally:
        gate.write_text("go")  # a slow tool left running (the test failed) ends


def test_f_a_child_reports_to_its_parent_once(conformance_host: HostUnderTest) -> None:
    host = conformance_host
    said = token("said")
    daemon = host.begin({"default": {"steps": [{"say": f"the report {said}"}]}})

    async def story() -> tuple[str, list[dict[str, Any]], str]:
        async with lead_session(host) as lead:
            kid = await spawn(lead, host, "first task", "conf-f")
            await lead.wait_for_delivery(1, timeout=STEP_TIMEOUT)
            await in_thread(daemon.wait_job, kid, timeout=STEP_TIMEOUT)
            # Everything the daemon had for the lead is taken: a second report would be here.
            await in_thread(wait, lambda: next(r for r in daemon.call("agents")["agents"] if r["id"] == lead.peer_id)["pending"] == 0,
                            30, "the lead's queue drained")
            return kid, list(lead.delivered), lead.peer_id

    kid, delivered, _lead = run_story(story)
    reports = [d for d in delivered if d["kind"] == "report"]
    assert len(reports) == 1, delivered
    [report] = reports
    assert report["from"] == kid and report["fromName"] == "conf-f" and report["relation"] == "child", report
    assert report["content"].count(said) == 1, report


#: The scenarios by their test names, for a plugin author's test module
#: (``globals().update(SCENARIOS)``).
SCENARIOS: dict[str, Callable[..., None]] = {
    fn.__name__: fn
    for fn in (
        test_a_task_reaches_the_model_once_and_roost_log_shows_the_run,
        test_b_an_agent_item_and_a_user_reply_reach_a_running_model_once_each,
        test_c_the_notice_never_shows_in_roost_log_as_a_user_line,
        test_d_seen_when_the_model_has_the_item_and_answered_by_reply_to,
        test_e_kill9_of_the_worker_mid_tool_the_session_goes_on_nothing_twice_nothing_lost,
        test_f_a_child_reports_to_its_parent_once,
    )
}
