"""The Poppy binding (Personal Agent Protocol 0.3 as pinned by AAP 3.1).

``build(gateway)`` returns the routes of the whole publication: poppy.json, the
issuer and protected-resource metadata, the excluded-tasks document, the guest
OAuth issuer (``/oauth/token``, ``/oauth/revoke``, ``/oauth/jwks.json``), the
native OpenAPI API (``/poppy/openapi.json``, ``/poppy/v1/{skill id}``) and
feedback (``/poppy/feedback``). With ``mcp_enabled`` the issuer also exchanges
Session tokens for MCP Bearer tokens (:mod:`.exchange`), poppy.json lists the
MCP endpoint and its RFC 9728 metadata is served; :func:`mcp_verifier` gives
the MCP binding the matching verifier (:mod:`.bearer`). See docs/poppy.md for
every rule enforced.

The route table is :mod:`.routes`'; :func:`rotate_signing_key` (:mod:`.keys`) is the
operator's key rotation.
"""

from aap.config.poppy import PoppySettings
from aap.poppy.bearer import mcp_verifier
from aap.poppy.context import PoppyContext
from aap.poppy.keys import rotate_signing_key
from aap.poppy.routes import ERROR_SHAPES, PATHS, build

__all__ = ["ERROR_SHAPES", "PATHS", "build", "mcp_verifier", "PoppySettings", "PoppyContext", "rotate_signing_key"]
