"""Which URLs a deployment may publish, and which it may call.

Two questions, one set of rules. A URL the deployment *publishes* (its
``public_url``, the agent's documentation, icon and provider URLs) ends up in
the AAP discovery documents, so it must be ``https://`` except on a loopback
host (:mod:`aap.loopback`, the hosts the agent card admits over plain http:
seed 001, ``AgentCard.url`` pattern) and carries no query. A URL the
deployment *calls* (a CRM endpoint, a webhook) may need a query, and is plain
``http://`` only to a loopback host: customer data never travels in clear text.
Neither ever carries credentials or a fragment (secrets never go in the file).

The configuration check and start-up (``check_public_url``) both ask
:func:`public_url_problem`, so a file that passes one passes the other.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from aap.loopback import is_loopback_host

_LOOPBACK_NAMES = "localhost, 127.0.0.1 or [::1]"


def public_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be published in the discovery documents, or None."""
    return _url_problem(
        url,
        query=False,
        plain_http=(
            "must use https:// (HTTPS is required for every URL the AAP discovery "
            "documents carry; plain http:// is allowed only on "
            f"{_LOOPBACK_NAMES}, for local development)"
        ),
    )


def endpoint_url_problem(url: str) -> str | None:
    """Why the deployment may not send data to ``url`` (a query is allowed), or None."""
    return _url_problem(
        url,
        query=True,
        plain_http=(
            "must use https:// (customer data never travels in clear text; "
            f"plain http:// is allowed only to {_LOOPBACK_NAMES})"
        ),
    )


def _url_problem(value: str, *, query: bool, plain_http: str) -> str | None:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018  (raises ValueError on a malformed port)
    except ValueError:
        return "is not a valid URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be an absolute http(s) URL"
    if (parts.query and not query) or parts.fragment or parts.username or parts.password:
        return (
            "must not carry a fragment or credentials" if query else "must not carry a query, fragment or credentials"
        )
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        return plain_http
    return None
