"""The AAP skills: one module per skill, each exposing ``run(agent, request, ctx)``.

:func:`install_default_skills` declares the skills this build implements on a
:class:`~aap.agent.DealerAgent`; the agent card and every binding list
exactly what was registered here.
"""

from __future__ import annotations

from typing import Any


def install_default_skills(agent: Any) -> None:
    """Register the four read skills and ``lead.submit`` (which brings its own error classifier)."""
    from aap.skills import (
        dealer_information,
        inventory_facets,
        inventory_search,
        inventory_vehicle,
        lead_submit,
    )

    agent.register("dealer.information", dealer_information.run)
    agent.register("inventory.facets", inventory_facets.run)
    agent.register("inventory.search", inventory_search.run)
    agent.register("inventory.vehicle", inventory_vehicle.run)
    lead_submit.install(agent)
