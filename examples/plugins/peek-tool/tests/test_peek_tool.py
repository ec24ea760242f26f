"""roost_peek on a fresh manager: the tool's declaration and its text."""

from __future__ import annotations

import roost_peek

from roost_core.records import ToolResult
from roost_core.testing import make_config


def test_declares_one_tool_with_the_code_that_runs_it(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(roost_peek)
    (tools,) = pm.hook.roost_tool_definitions(config=make_config(), hosts=())
    (tool,) = tools
    assert tool.name == "roost_peek" and tool.run is roost_peek.peek
    assert tool.parameters["required"] == ["peer"]
    assert pm.hook.roost_tool_definitions(config=make_config(agent_tools=False), hosts=()) == [[]]


def test_the_text_the_model_reads(roost_plugin_manager) -> None:
    pm = roost_plugin_manager(roost_peek)
    ok = ToolResult(tool="roost_peek", ok=True, data={"peer": "kid", "lines": ["[user] hi", "[assistant] ok"]})
    assert pm.hook.roost_format_tool_result(result=ok) == "kid: last 2 lines\n[user] hi\n[assistant] ok"
    refused = ToolResult(tool="roost_peek", ok=False, code="unreachable", message="not in your tree")
    assert pm.hook.roost_format_tool_result(result=refused) == "error (unreachable): not in your tree"
    assert pm.hook.roost_format_tool_result(result=ToolResult(tool="roost_send", ok=True)) is None
