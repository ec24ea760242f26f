"""How ``roost attach`` opens a pi job's session: interactive pi on the job's session
file, with roost's extension (which, given ``roost attach``'s token, registers as the job)."""

from __future__ import annotations

import os
import shlex

from roost_core.hosts.base import JobInfo
from roost_core.records import AttachPlan


def attach_plan(job: JobInfo) -> AttachPlan:
    """``pi --session FILE -e <roost's extension>`` with the job's model and thinking
    level (pi dedupes the extension when the user installed it too)."""
    from roost_core.agentenv import find_program
    from roost_core.pi import extension_path

    argv = [find_program("ROOST_PI_BIN", "pi", "pi", RuntimeError), "--session", job.session, "-e", str(extension_path())]
    if job.model:
        argv += ["--model", job.model]
    if job.thinking:
        argv += ["--thinking", job.thinking]
    argv += shlex.split(os.environ.get("ROOST_PI_ARGS", ""))
    return AttachPlan(argv=argv)
