"""``python -m roost_plugins.gemini hook EVENT``: the hook command without the whole CLI
(a job's hooks run it, so they start fast)."""

import sys

from roost_core.launch import hook_relay

# A job's hooks run this on every event: the relay without the command's parser.
status = hook_relay(["gemini", *sys.argv[1:]])
if status is None:
    from roost_plugins.gemini.cli import main

    status = main()
sys.exit(status)
