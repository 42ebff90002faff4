"""HTTP plumbing every surface shares: bounded body reading, error shapes and the one
unexpected-exception handler, the access log and metrics, static documents, the client
address, and :class:`~aap.web.parts.BindingParts`. It knows no protocol and builds no app
(that is :mod:`aap.server`)."""
