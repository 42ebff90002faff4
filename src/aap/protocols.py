"""Versions and identifiers of the protocols AAP rides on, as this deployment publishes them.

Several surfaces publish the same facts (the agent card's ``params.mcp`` and
llms.txt list the MCP revisions served, which ``server/discover`` also
answers), so each fact has one home here, in a module light enough that the
discovery documents never load a protocol SDK to name a version. AAP's own
constants (``AAP_VERSION``, ``EXTENSION_URI``, ``SCHEMA_BASE_URL``) live in
:mod:`aap` itself.
"""

from __future__ import annotations

#: The A2A protocol version of the JSON-RPC interface (``AgentInterface.protocolVersion``, seed 001).
A2A_PROTOCOL_VERSION = "1.0"

#: ProtoJSON ``Any`` type URLs of the details in an A2A JSON-RPC ``error.data`` (A2A §3.3.2, §9.5).
ERROR_INFO_TYPE = "type.googleapis.com/google.rpc.ErrorInfo"
BAD_REQUEST_TYPE = "type.googleapis.com/google.rpc.BadRequest"
STRUCT_TYPE = "type.googleapis.com/google.protobuf.Struct"  # carries the aap.error (docs/a2a.md)

#: The two MCP revisions AAP 3.1 requires (``McpEndpoint.protocol_versions``, seed 004): the
#: stateless one and the newest ``initialize``-handshake one. The buyer client speaks these.
MCP_MODERN_VERSION = "2026-07-28"
MCP_HANDSHAKE_VERSION = "2025-11-25"

#: Every MCP revision ``/mcp`` serves, newest first: the two above and the older handshake
#: revisions the same SDK negotiates (docs/mcp.md).
MCP_PROTOCOL_VERSIONS: tuple[str, ...] = (
    MCP_MODERN_VERSION,
    MCP_HANDSHAKE_VERSION,
    "2025-06-18",
    "2025-03-26",
    "2024-11-05",
)

#: ``McpEndpoint.transport`` (seed 004).
MCP_TRANSPORT = "streamable-http"

#: ``Poppy.protocol_version`` of the AAP publication profile (seed 004).
POPPY_PROTOCOL_VERSION = "0.3"

#: The key of the AAP bridge in poppy.json's ``extensions`` (``PoppyAapExtension``, seed 004).
POPPY_AAP_EXTENSION = "autoagentprotocol.org/aap"
