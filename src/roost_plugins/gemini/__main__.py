"""``python -m roost_plugins.gemini hook EVENT``: the hook command without the whole CLI
(a job's hooks run it, so they start fast)."""

import sys

from roost_plugins.gemini.cli import main

sys.exit(main())
