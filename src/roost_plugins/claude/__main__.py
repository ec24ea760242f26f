import sys

from roost_core.launch import hook_relay

# A job's hooks run this on every event: the relay without the command's parser.
status = hook_relay(["claude", *sys.argv[1:]])
if status is None:
    from roost_plugins.claude.cli import main

    status = main()
sys.exit(status)
