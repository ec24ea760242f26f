import sys

from roost_core.worker.main import run

sys.exit(run())
