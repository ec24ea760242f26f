"""Default delivery modes: how an agent item reaches a receiver in the middle of a run.

A message with ``urgent: true`` is steered in before the receiver's next model call; with
``urgent: false`` it is a follow-up, taken in once the receiver's current run has ended.
Without the flag, the user config ``agentDelivery`` decides (``steer`` by default, as the
spec has it). Reports and notices keep their own rule: always steered, so a parent hears
its child's result before it decides its next step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from roost_core import hookimpl
from roost_core.records import DeliveryDecision

if TYPE_CHECKING:
    from roost_core.config import Config
    from roost_core.records import OutgoingItem

STEER = DeliveryDecision("steer")
FOLLOW_UP = DeliveryDecision("followUp")


@hookimpl(trylast=True)
def roost_decide_delivery(item: OutgoingItem, config: Config) -> DeliveryDecision:
    """Reports and notices steer; a message follows its ``urgent`` flag, else ``agentDelivery``."""
    if item.kind != "message" or item.urgent is True:
        return STEER
    if item.urgent is False:
        return FOLLOW_UP
    return FOLLOW_UP if config.agent_delivery == "followUp" else STEER
