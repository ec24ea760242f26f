"""``python -m roost_plugins.qwen hook EVENT``: the hook command of a job's Qwen Code."""

import sys

from roost_core.launch import hook_relay

# A job's hooks run this on every event: the relay without the command's parser.
status = hook_relay(["qwen", *sys.argv[1:]])
if status is None:
    from roost_plugins.qwen.cli import main

    status = main()
sys.exit(status)
