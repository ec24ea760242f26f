"""``python -m roost_plugins.qwen hook EVENT``: the hook command of a job's Qwen Code."""

from __future__ import annotations

import sys

from roost_plugins.qwen.cli import main

sys.exit(main(sys.argv[1:]))
