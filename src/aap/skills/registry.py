"""The five AAP skills: ids, message types, media types and schema names in one table."""

from __future__ import annotations

from dataclasses import dataclass

from aap import SCHEMA_BASE_URL


@dataclass(frozen=True)
class SkillInfo:
    id: str            # e.g. "inventory.search"
    stem: str          # media-type / schema-file stem, e.g. "inventory-search"
    name: str          # human name on the agent card
    description: str
    tags: tuple[str, ...]
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

    @property
    def tool_name(self) -> str:
        """MCP tool name (notes §10.7): ``aap_`` + id with dots as underscores."""
        return "aap_" + self.id.replace(".", "_")


SKILLS: dict[str, SkillInfo] = {
    s.id: s
    for s in (
        SkillInfo(
            "dealer.information", "dealer-information", "Dealer information",
            "Public dealership profile: rooftops, addresses, hours, contacts, fees and services.",
            ("dealer", "profile", "hours", "locations"),
        ),
        SkillInfo(
            "inventory.facets", "inventory-facets", "Inventory facets",
            "Counts and ranges over the matching inventory, and the feature-code vocabulary.",
            ("inventory", "facets", "vehicles"),
        ),
        SkillInfo(
            "inventory.search", "inventory-search", "Inventory search",
            "Search live vehicle inventory with structured filters, keyword tokens, sorting and cursor pagination.",
            ("inventory", "search", "vehicles"),
        ),
        SkillInfo(
            "inventory.vehicle", "vehicle-detail", "Vehicle detail",
            "One listing by VIN, stock number or vehicle_id, with availability and pricing.",
            ("inventory", "vehicle", "detail"),
        ),
        SkillInfo(
            "lead.submit", "lead-submit", "Submit lead",
            "Send a consented customer lead (vehicle interest, trade-in, appointment) to the dealer.",
            ("lead", "contact", "appointment", "test-drive"),
            read_only=False,
        ),
    )
}

BY_REQUEST_TYPE: dict[str, SkillInfo] = {s.request_type: s for s in SKILLS.values()}
BY_REQUEST_MEDIA_TYPE: dict[str, SkillInfo] = {s.request_media_type: s for s in SKILLS.values()}
