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
from aap.config.credentials import unset_secrets
from aap.config.leads import AdfHttpTarget, LeadSettings, SmtpTarget, WebhookTarget
from aap.config.model import Settings
from aap.secretbox import SecretKeyError, read_keyring
from aap.telemetry.environment import problems as telemetry_problems


def referenced_variables(leads: LeadSettings) -> Iterator[tuple[str, str]]:
    """``(TOML path, variable name)`` for every environment variable the configuration names."""
    for i, route in enumerate(leads.routes):
        for j, target in enumerate(route.targets):
            at = f"leads.routes[{i}].targets[{j}]"
            if isinstance(target, AdfHttpTarget) and target.auth is not None:
                for key in ("username_env", "password_env", "token_env"):
                    name = getattr(target.auth, key)
                    if name:
                        yield f"{at}.auth.{key}", name
            elif isinstance(target, SmtpTarget):
                for key in ("username_env", "password_env"):
                    name = getattr(target, key)
                    if name:
                        yield f"{at}.{key}", name
            elif isinstance(target, WebhookTarget) and target.secret_env:
                yield f"{at}.secret_env", target.secret_env


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
        + unset_secrets(settings)
        + telemetry_problems(environ)
        + signing_problems(settings, environ)
        + keyring_problems(settings, environ)
    )


def keyring_problems(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """A platform's secret keys, when it names any (docs/platform.md, "Secrets"): readable and
    well formed, so that a worker never starts unable to open its tenants' secrets. A platform
    without keys is fine (its tenants then name no secret)."""
    platform = settings.platform
    if platform is None or not (platform.secret_keys_file or environ.get(platform.secret_keys_env, "").strip()):
        return []
    try:
        read_keyring(platform.secret_keys_file, platform.secret_keys_env, environ)
    except SecretKeyError as exc:
        return [f"platform.secret_keys: {exc}"]
    return []


def signing_problems(settings: Settings, environ: Mapping[str, str]) -> list[str]:
    """The agent card's signing key (docs/a2a.md, "Signed agent card"): set, and a private key
    that can sign a card (the key itself is never quoted)."""
    agent = settings.agent
    if agent.signing_key_secret is not None:  # a tenant's: unset_secrets reports a missing one
        key, name, value = "agent.signing_key_secret", f"the tenant secret {agent.signing_key_secret}", None
        value = settings.secrets.get(agent.signing_key_secret)
        if not value:
            return []
    elif agent.signing_key_env is not None:
        key, name = "agent.signing_key_env", agent.signing_key_env
        value = environ.get(name)
        if not value:
            return [f"agent.signing_key_env: environment variable {name} is not set"]
    else:
        return []
    try:
        load_private_key(value)
    except Exception as exc:  # its text may quote the key
        detail = str(exc) if isinstance(exc, ValueError) and "card" in str(exc) else type(exc).__name__
        return [f"{key}: {name} does not hold a private key a card can be signed with ({detail})"]
    return []
