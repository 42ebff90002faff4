"""The AAP skills: one module per skill, each exposing ``run(deps, request, ctx)``.

:class:`~aap.agent.DealerAgent` registers them; the agent card and every
binding list exactly what it registered. :mod:`aap.skills.catalog` describes
the five skills (ids, message and media types, schemas, MCP tool names, Poppy
operation ids) and is what the buyer client and the checker import, so this
package imports no skill module on its own: the client stays free of the
dealer side.
"""
