"""The five AAP skills in one table: what every surface and the buyer side call each skill.

One row per skill: the id and the media-type stem (from which the message
types, media types and schema names follow, seed 004 and docs/a2a.md), the
card's name, description and tags, and the names the other bindings give it:
the MCP tool (docs/mcp.md, "Tools") and the Poppy native API's operationId
(docs/poppy.md, "Endpoints"). Light on purpose: the buyer client and the
checker import it without loading the dealer side.
"""

from __future__ import annotations

from dataclasses import dataclass

from aap import SCHEMA_BASE_URL


@dataclass(frozen=True)
class SkillInfo:
    id: str  # e.g. "inventory.search"
    stem: str  # media-type / schema-file stem, e.g. "inventory-search"
    name: str  # human name on the agent card
    description: str
    tags: tuple[str, ...]
    tool_name: str  # the MCP tool, e.g. "aap_inventory_search"
    operation_id: str  # the Poppy native API operation, e.g. "inventorySearch"
    read_only: bool = True

    @property
    def request_type(self) -> str:
        return f"{self.id}.request"

    @property
    def response_type(self) -> str:
        return f"{self.id}.response"

    @property
    def request_media_type(self) -> str:
        return f"application/vnd.autoagent.{self.stem}-request+json"

    @property
    def response_media_type(self) -> str:
        return f"application/vnd.autoagent.{self.stem}-response+json"

    @property
    def request_schema(self) -> str:
        """Schema name in the local registry (also the file stem)."""
        return f"{self.stem}-request"

    @property
    def response_schema(self) -> str:
        return f"{self.stem}-response"

    @property
    def request_schema_url(self) -> str:
        return f"{SCHEMA_BASE_URL}{self.stem}-request.schema.json"

    @property
    def response_schema_url(self) -> str:
        return f"{SCHEMA_BASE_URL}{self.stem}-response.schema.json"


SKILLS: dict[str, SkillInfo] = {
    s.id: s
    for s in (
        SkillInfo(
            "dealer.information",
            "dealer-information",
            "Dealer information",
            "Public dealership profile: rooftops, addresses, hours, contacts, fees and services.",
            ("dealer", "profile", "hours", "locations"),
            "aap_dealer_information",
            "dealerInformation",
        ),
        SkillInfo(
            "inventory.facets",
            "inventory-facets",
            "Inventory facets",
            "Counts and ranges over the matching inventory, and the feature-code vocabulary.",
            ("inventory", "facets", "vehicles"),
            "aap_inventory_facets",
            "inventoryFacets",
        ),
        SkillInfo(
            "inventory.search",
            "inventory-search",
            "Inventory search",
            "Search live vehicle inventory with structured filters, keyword tokens, sorting and cursor pagination.",
            ("inventory", "search", "vehicles"),
            "aap_inventory_search",
            "inventorySearch",
        ),
        SkillInfo(
            "inventory.vehicle",
            "vehicle-detail",
            "Vehicle detail",
            "One listing by VIN, stock number or vehicle_id, with availability and pricing.",
            ("inventory", "vehicle", "detail"),
            "aap_inventory_vehicle",
            "inventoryVehicle",
        ),
        SkillInfo(
            "lead.submit",
            "lead-submit",
            "Submit lead",
            "Send a consented customer lead (vehicle interest, trade-in, appointment) to the dealer.",
            ("lead", "contact", "appointment", "test-drive"),
            "aap_lead_submit",
            "leadSubmit",
            read_only=False,
        ),
    )
}

BY_REQUEST_TYPE: dict[str, SkillInfo] = {s.request_type: s for s in SKILLS.values()}
BY_REQUEST_MEDIA_TYPE: dict[str, SkillInfo] = {s.request_media_type: s for s in SKILLS.values()}
