"""Discovery documents that agree with each other: the agent card, llms.txt, api-catalog, the AI
Catalog, schemas, A2A OpenAPI.

``build(gateway)`` returns the routes as :class:`~aap.web.parts.BindingParts`; each
document is rendered from the deployment settings on its first request and kept (so
each ETag is a hash of exactly what is served, and an agent that is never asked for
its documents — one tenant among thousands — never renders them). poppy.json is
served by the Poppy binding; every document takes its URLs from
:class:`~aap.paths.DeploymentUrls`. The route table is :mod:`.routes`'.
"""

from aap.discovery.routes import ERROR_SHAPES, PATHS, build

__all__ = ["ERROR_SHAPES", "PATHS", "build"]
