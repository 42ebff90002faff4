"""Registers the ``[mcp]`` configuration table (listed in ``aap.config.loader.SECTION_MODULES``)."""

from aap.bindings.mcp_settings import parse_mcp_section
from aap.config.loader import register_section

register_section("mcp", parse_mcp_section)
