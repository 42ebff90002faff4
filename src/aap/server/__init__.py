"""The composition root: the app (:mod:`.app`), the operator endpoints (:mod:`.operations`),
and the uvicorn runner (:mod:`.runner`) with its JSON log format (:mod:`.logconfig`).

This is the only package that imports every surface; nothing imports it but the CLI. Its
modules are imported by name (``aap.server.app``, ``aap.server.runner``): the package itself
imports none of them, so loading one (the platform's root, say) never loads the runner.
"""
