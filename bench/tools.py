"""Tokens of the roost tool definitions: what every model request pays for the roost tools.

Each definition (name, description, JSON-schema parameters: what ``roost_tool_definitions``
gives every host, and what the host hands the model) is serialised as compact JSON and
counted with OpenAI's ``o200k_base`` encoding. The tokenizer is ``quicktok-v1`` from PyPI,
because it ships its vocabularies inside the wheel: ``tiktoken`` downloads its BPE files at
first use, which this machine (and CI) cannot reach. quicktok states exact parity with
tiktoken's ``encode_ordinary``.

*Baseline*: the definitions of main at 4b296d4 (before issue 16), kept in
``bench/tooldefs_main.json`` and counted in the same run with the same tokenizer. The
target: the total stays within 1.2x of it, with room left for the ``host`` parameter
issue 15 adds to ``roost_spawn``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.common import Row

BASELINE_FILE = Path(__file__).resolve().parent / "tooldefs_main.json"
ENCODING = "o200k_base"
TARGET = 1.2


def count(tools: list[dict[str, Any]]) -> dict[str, int]:
    """Tokens per tool definition (compact JSON, as a request carries it)."""
    import quicktok

    encoding = quicktok.get_encoding(ENCODING)
    return {tool["name"]: len(encoding.encode(json.dumps(tool, separators=(",", ":"), ensure_ascii=False))) for tool in tools}


def current_definitions() -> list[dict[str, Any]]:
    """The tool definitions roost gives an agent today (default plugins, default config)."""
    from roost_core import policy
    from roost_core.config import Config
    from roost_core.plugins import make_plugin_manager

    config = Config()
    return [tool.to_json() for tool in policy.tool_definitions(make_plugin_manager(config, autoload=False), config)]


def run(quick: bool = False, smoke: bool = False) -> list[Row]:
    now = count(current_definitions())
    before = count(json.loads(BASELINE_FILE.read_text()))
    total, base = sum(now.values()), sum(before.values())
    ratio = total / base
    raw = {"now": now, "main": before, "headroom_tokens": int(base * TARGET) - total}
    rows = [
        Row(
            "tool tokens",
            f"all roost tool definitions ({ENCODING}, quicktok)",
            f"{total} tokens",
            f"{base} tokens (main 4b296d4)",
            ratio,
            f"≤ {TARGET:.2f}x",
            ratio <= TARGET,
            raw=raw,
        )
    ]
    for name, tokens in now.items():
        rows.append(Row("tool tokens", name, f"{tokens} tokens", f"{before.get(name, 0)} tokens" if name in before else "new", tokens / before[name] if before.get(name) else None, raw={}))
    return rows
