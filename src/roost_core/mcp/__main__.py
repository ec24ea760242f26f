import sys

from roost_core.mcp.server import main

sys.exit(main())
