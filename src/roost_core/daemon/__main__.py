import sys

from roost_core.daemon import run_daemon

sys.exit(run_daemon())
