"""A command hook for the agent-CLI tests: logs what the CLI hands it, pushes text back.

    hook.py EVENT LOG [TEXT]

Appends the JSON the CLI wrote on stdin to LOG (one line, with ``"argv_event"``) and
answers on stdout, in the shape each CLI reads:

- ``PostToolUse`` (Codex, Qwen Code) / ``AfterTool`` (Gemini CLI): TEXT as the hook's
  ``additionalContext`` (mid-turn, after a tool);
- ``Stop`` (Codex, Qwen Code): ``{"decision": "block", "reason": TEXT}``, and
  ``AfterAgent`` (Gemini CLI): ``{"decision": "deny", "reason": TEXT}`` (turn end: TEXT is
  a new user input and the model runs again), once: when ``stop_hook_active`` says the
  turn already went on because of this hook, it answers ``{}`` and the turn ends;
- any other event, or no TEXT: ``{}``.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    event, log = sys.argv[1], sys.argv[2]
    text = sys.argv[3] if len(sys.argv) > 3 else ""
    payload = json.loads(sys.stdin.read() or "{}")
    with open(log, "a") as fh:
        fh.write(json.dumps({"argv_event": event, **payload}) + "\n")
    out: dict[str, object] = {}
    if text and event in ("PostToolUse", "AfterTool"):
        out = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    elif text and event in ("Stop", "AfterAgent") and not payload.get("stop_hook_active"):
        out = {"decision": "block" if event == "Stop" else "deny", "reason": text}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
