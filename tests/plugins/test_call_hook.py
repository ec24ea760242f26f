"""``policy.call_hook``: the per-send hooks called straight when one plain plugin
implements them, with the answer pluggy's own call gives, whatever the plugins."""

from __future__ import annotations

from typing import Any

import pytest

from roost_core import hookimpl, policy
from roost_core.records import DeliveryDecision, Refusal
from roost_core.testing import make_config, make_item, make_manager


class Framer:
    @hookimpl
    def roost_frame_item(self, item):
        return f"framed {item.text}"


class Silent:
    """Implements the hooks and has no opinion (None)."""

    @hookimpl
    def roost_frame_item(self, item):
        return None

    @hookimpl
    def roost_check_send(self, item, now, config):
        return None


class Refuser:
    @hookimpl
    def roost_check_send(self, config, item):  # its own order of the arguments
        return Refusal("nope", f"no {item.text} ({config.agent_max_hops})")


class Steer:
    @hookimpl
    def roost_decide_delivery(self, item, config):
        return DeliveryDecision("followUp")


class Wrapper:
    """A wrapper: pluggy must run it around the others, so no shortcut applies."""

    @hookimpl(wrapper=True)
    def roost_frame_item(self, item):
        answer = yield
        return f"<{answer}>"


CASES: list[tuple[str, tuple[Any, ...], str, dict[str, Any]]] = [
    ("one framer", (Framer(),), "roost_frame_item", {}),
    ("no opinion, firstresult", (Silent(),), "roost_frame_item", {}),
    ("no opinion, every answer", (Silent(),), "roost_check_send", {"now": 1.0}),
    ("one refusal, arguments in its own order", (Refuser(),), "roost_check_send", {"now": 1.0}),
    ("two answers", (Refuser(), Silent()), "roost_check_send", {"now": 1.0}),
    ("a wrapper", (Framer(), Wrapper()), "roost_frame_item", {}),
    ("nobody", (), "roost_frame_item", {}),
    ("delivery", (Steer(),), "roost_decide_delivery", {}),
]


@pytest.mark.parametrize(("plugins", "hook", "extra"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_call_hook_answers_as_pluggy_does(plugins, hook, extra):
    pm = make_manager(*plugins)
    caller = getattr(pm.hook, hook)
    names = set(caller.spec.argnames)
    kwargs = {"item": make_item(text="hello"), **extra}
    if "config" in names:
        kwargs["config"] = make_config()
    assert policy.call_hook(caller, **kwargs) == caller(**kwargs)


def test_the_policy_functions_keep_their_fallbacks():
    pm = make_manager(Silent())
    item = make_item(text="a <b>")
    assert policy.frame_item(pm, item) == policy.fallback_frame(item)
    assert policy.admit_send(pm, item, 1.0, make_config()) is None
    assert policy.decide_delivery(pm, item, make_config()) == "steer"
    refused = policy.admit_send(make_manager(Refuser()), item, 1.0, make_config())
    assert refused is not None and refused.code == "nope"


@pytest.mark.parametrize(("plugins", "hook", "extra"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_the_send_policy_answers_as_pluggy_does(plugins, hook, extra):
    """``policy.SendPolicy`` (what every send asks, worked out once per manager
    generation) gives the answer the policy functions give through pluggy's own call."""
    pm = make_manager(*plugins)
    item, config = make_item(text="hello"), make_config()
    sent = policy.send_policy(pm)
    if hook == "roost_frame_item":
        expected = pm.hook.roost_frame_item(item=item)
        assert sent.frame_item(item) == (expected if isinstance(expected, str) and expected else policy.fallback_frame(item))
    elif hook == "roost_check_send":
        assert sent.admit(item, 1.0, config) == policy.first_refusal(pm.hook.roost_check_send(item=item, now=1.0, config=config))
    else:
        expected = pm.hook.roost_decide_delivery(item=item, config=config)
        assert sent.decide_delivery(item, config) == (expected.mode if isinstance(expected, DeliveryDecision) else "steer")


def test_a_plugin_registered_or_blocked_after_the_first_send_is_asked_from_the_next():
    pm = make_manager(Silent())
    item, config = make_item(text="hello"), make_config()
    assert policy.admit_send(pm, item, 1.0, config) is None
    pm.register(Refuser(), name="refuser")
    refused = policy.admit_send(pm, item, 1.0, config)
    assert refused is not None and refused.code == "nope"
    pm.set_blocked("refuser")
    assert policy.admit_send(pm, item, 1.0, config) is None
    pm.register(Framer(), name="framer")
    assert policy.frame_item(pm, item) == "framed hello"
