import sys

from roost_core.claude.cli import main

sys.exit(main())
