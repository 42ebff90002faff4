"""``dealer.information``: the endpoint's profile, or one seller's by ``dealer_id`` (``DealerInformationRequest``, seed 004)."""

from __future__ import annotations

import copy
from typing import Any

from aap.errors import AapError
from aap.skills.context import CallContext, SkillDeps


def run(deps: SkillDeps, request: dict[str, Any], ctx: CallContext) -> dict[str, Any]:
    dealer_id = request.get("dealer_id")
    profile = deps.settings.profile_for(dealer_id)
    if profile is None:
        raise AapError(
            "DEALER_NOT_FOUND",
            hint="Use a dealer_id taken from a listing on this endpoint, or omit it for the endpoint's own profile.",
        )
    # A copy: bindings serialise the answer and must never alter the configuration.
    return {"type": "dealer.information.response", "data": copy.deepcopy(profile.info)}
