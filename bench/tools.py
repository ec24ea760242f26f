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

What a message costs (issue 42), counted the same way: a two-character message framed by
the default envelope (a message from a child, with its message id, as a send frames it),
the overhead around its body (the envelope and the no-user-authority notice), the notice
alone, and five such items that reach a model together — as the model reads them now (the
notice once, after the last: ``envelope_rules.one_notice``) against each with its own
notice (the baseline, as before).
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


#: The message whose cost is counted: two characters.
SHORT_MESSAGE = "ok"
#: Items that reach a model together in the batch row.
BATCH = 5


def message_costs() -> dict[str, int]:
    """Tokens of a two-character message as the receiving model reads it: framed alone,
    its body, the notice, and a batch of :data:`BATCH` such items with one notice and with
    one each (each text a message of its own in the request, as pi sends them)."""
    import quicktok

    from roost_core import envelope_rules, policy
    from roost_core.config import Config
    from roost_core.plugins import make_plugin_manager
    from roost_core.testing import make_item, make_peer

    encoding = quicktok.get_encoding(ENCODING)

    def tokens(text: str) -> int:
        return len(encoding.encode(text))

    pm = make_plugin_manager(Config(), autoload=False)
    sender = make_peer(id="a1b2c3d4", name="Checkout refactor")
    framed = [
        policy.frame_item(pm, make_item(sender=sender, text=SHORT_MESSAGE, id=f"m{n:08x}", relation="child"))
        for n in range(BATCH)
    ]
    return {
        "item": tokens(framed[0]),
        "body": tokens(SHORT_MESSAGE),
        "notice": tokens("\n" + envelope_rules.NO_USER_AUTHORITY),
        "batch_one_notice": sum(tokens(text) for text in envelope_rules.one_notice(framed)),
        "batch_each_notice": sum(tokens(text) for text in framed),
    }


def cost_rows() -> list[Row]:
    """The rows of what a message costs (see the module docstring)."""
    cost = message_costs()
    overhead = cost["item"] - cost["body"]
    batch, each = cost["batch_one_notice"], cost["batch_each_notice"]
    return [
        Row("tool tokens", f"a {len(SHORT_MESSAGE)}-character message as received", f"{cost['item']} tokens", raw=cost),
        Row("tool tokens", "per-item overhead (envelope + notice)", f"{overhead} tokens", raw={}),
        Row("tool tokens", "per-item overhead in a batch (envelope only)", f"{overhead - cost['notice']} tokens", f"{overhead} tokens (own notice)",
            (overhead - cost["notice"]) / overhead, raw={}),
        Row("tool tokens", "the no-user-authority notice", f"{cost['notice']} tokens", raw={}),
        Row("tool tokens", f"{BATCH} items reaching a model together", f"{batch} tokens (one notice)", f"{each} tokens (a notice each)",
            batch / each, "< 1.00x", batch < each, raw={}),
    ]


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
    return rows + cost_rows()
