"""roost core: identity, the session-file routing key, the one queue, the daemon and workers.

Policy (reach, limits, framing, rendering, tools, hand-back) lives in plugins; a plugin
writes ``from roost_core import hookimpl``.
"""

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("roost")

__all__ = ["__version__", "hookimpl"]
