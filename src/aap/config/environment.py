"""What a loaded configuration needs from the environment it runs in.

Secrets never live in the TOML file: a lead target names the environment
variables holding its token, password or signing secret (docs/leads.md). The
loader cannot check them (the file is valid wherever it is read; ``aap import``
needs no CRM password), so :func:`missing_variables` does, for the commands
that will use them (``load_settings(..., require_secrets=True)``): ``aap config
check``, ``aap serve`` and ``aap deliver`` refuse to start when one is unset,
instead of a delivery failing hours later.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from aap.cardsign import load_private_key
from aap.config.leads import LeadSettings
from aap.config.model import Settings
from aap.telemetry.environment import problems as telemetry_problems


def referenced_variables(leads: LeadSettings) -> Iterator[tuple[str, str]]:
    """``(TOML path, variable name)`` for every environment variable the configuration names."""
    for i, route in enumerate(leads.routes):
        for j, target in enumerate(route.targets):
            at = f"leads.routes[{i}].targets[{j}]"
            for key, name in target.variables():
                yield f"{at}.{key}", name


def missing_variables(
    leads: LeadSettings, environ: Mapping[str, str], *, metrics_token_env: str | None = None
) -> list[tuple[str, str]]:
    """``(TOML path, message)`` per referenced variable that is unset or empty (never its value).

    ``metrics_token_env`` is ``[server] metrics_token_env``: ``/metrics`` would otherwise
    answer nobody, or (worse, were it read as "no token") everybody.
    """
    named = list(referenced_variables(leads))
    if metrics_token_env:
        named.append(("server.metrics_token_env", metrics_token_env))
    return [(path, f"environment variable {name} is not set") for path, name in named if not environ.get(name)]


def environment_problems(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """:func:`missing_variables` of loaded settings, as ``"path: message"`` lines."""
    missing = missing_variables(settings.leads, environ, metrics_token_env=settings.metrics_token_env)
    # Traces asked for in a way this server cannot send them (docs/deployment.md, "Traces").
    return (
        [f"{path}: {message}" for path, message in missing]
        + telemetry_problems(environ)
        + signing_problems(settings, environ)
    )


def signing_problems(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The agent card's signing key (docs/a2a.md, "Signed agent card"): set, and a private key
    that can sign a card (the key itself is never quoted)."""
    name = settings.agent.signing_key_env
    if name is None:
        return []
    value = environ.get(name)
    if not value:
        return [f"agent.signing_key_env: environment variable {name} is not set"]
    try:
        load_private_key(value)
    except Exception as exc:  # its text may quote the key
        detail = str(exc) if isinstance(exc, ValueError) and "card" in str(exc) else type(exc).__name__
        return [f"agent.signing_key_env: {name} does not hold a private key a card can be signed with ({detail})"]
    return []
