"""Where a secret's value comes from: an environment variable, or a platform tenant's secret.

Secrets never live in the TOML file. Every key that names one comes in two forms
(docs/configuration.md, "Secrets"):

- ``X_env = "VARIABLE"``: the environment variable of the process that uses it (a deployment
  that is one agent: ``aap serve``, ``aap deliver``);
- ``X_secret = "name"``: the tenant secret ``name``, stored sealed in the platform's database
  (``aap tenants secrets set ID NAME``, docs/platform.md, "Secrets") and read by every worker
  when it builds the tenant, so a new value is used without a restart.

A deployment's own file cannot name a tenant secret (it has none); a platform tenant names its
secrets by name, never the platform workers' environment (:func:`environment_references`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from aap.config.table import Table

if TYPE_CHECKING:
    from aap.config.feeds import FeedSettings
    from aap.config.leads import LeadSettings
    from aap.config.model import AgentIdentity, Settings

#: A tenant secret's name: what ``X_secret`` keys, the CLI and the API name it by.
SECRET_NAME = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def secret_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a tenant secret, or None."""
    if not SECRET_NAME.match(name):
        return "must be 1 to 64 lower-case letters, digits, '.', '_' or '-', starting and ending with a letter or digit"
    return None


@dataclass(frozen=True)
class Credential:
    """One secret a configuration names: by environment variable (``env``) or tenant secret
    (``secret``); never both."""

    env: str | None = None
    secret: str | None = None

    def __bool__(self) -> bool:
        return self.env is not None or self.secret is not None


NONE = Credential()


def stem_credentials(holder: object, *stems: str) -> tuple[tuple[str, Credential], ...]:
    """The secrets a parsed table keeps as ``{stem}_env``/``{stem}_secret`` attributes, by stem:
    the one reading of the naming rule :func:`credential` checks when it parses them."""
    return tuple(
        (stem, Credential(getattr(holder, f"{stem}_env"), getattr(holder, f"{stem}_secret"))) for stem in stems
    )


def credential(table: Table, stem: str) -> Credential:
    """``{stem}_env`` or ``{stem}_secret`` of ``table``: the secret's name, checked."""
    env = table.string(f"{stem}_env")
    if env is not None and not _ENV_NAME.match(env):
        table.problem(f"{stem}_env", "must be an environment variable name (the secret itself never goes in the file)")
        env = None
    secret = table.string(f"{stem}_secret")
    if secret is not None and secret_name_problem(secret):
        table.problem(f"{stem}_secret", "must be a tenant secret's name: " + str(secret_name_problem(secret)))
        secret = None
    if env is not None and secret is not None:
        table.problem(f"{stem}_secret", f"give {stem}_env or {stem}_secret, not both")
    return Credential(env, secret)


_NONE: Mapping[str, str] = MappingProxyType({})


class SecretValues:
    """The values of the tenant secrets an agent's configuration names, as its worker read them
    when it built the agent. Never printed: ``repr`` names the secrets, not their values."""

    __slots__ = ("_problems", "_values")

    def __init__(self, values: Mapping[str, str] | None = None, problems: Mapping[str, str] | None = None) -> None:
        # No secrets (most agents): one empty mapping for all, not two dicts each.
        self._values: Mapping[str, str] = dict(values) if values else _NONE
        #: Why a secret that is set could not be read (its name: the reason, never a value).
        self._problems: Mapping[str, str] = dict(problems) if problems else _NONE

    def __repr__(self) -> str:
        return f"SecretValues({sorted(self._values)!r})"

    def __reduce__(self) -> tuple[type[SecretValues], tuple[dict[str, str], dict[str, str]]]:
        """Pickled as its two mappings (a deployment's settings go to its worker processes)."""
        return SecretValues, (dict(self._values), dict(self._problems))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretValues) and other._values == self._values

    def __hash__(self) -> int:
        return hash(tuple(sorted(self._values)))

    def __deepcopy__(self, memo: dict[int, Any]) -> SecretValues:
        return self

    def get(self, name: str) -> str | None:
        return self._values.get(name)

    def names(self) -> list[str]:
        return sorted(self._values)

    def missing(self, name: str) -> str:
        """Why ``name`` has no value, for an error message: not set, or not readable."""
        problem = self._problems.get(name)
        return (
            f"the tenant secret {name} cannot be read ({problem})"
            if problem
            else f"the tenant secret {name} is not set"
        )


#: The secrets of an agent whose configuration names none (most): one for all, never changed.
NO_SECRETS = SecretValues()


@dataclass(frozen=True)
class Reference:
    """A secret an agent's configuration names, at its TOML path (``path`` ends with ``X``;
    the key written is ``X_env`` or ``X_secret``)."""

    path: str
    credential: Credential

    @property
    def key(self) -> str:
        return f"{self.path}_env" if self.credential.env is not None else f"{self.path}_secret"


def references(settings: Settings) -> Iterator[Reference]:
    """Every secret ``settings`` name: lead targets, notifications, feeds, the card's signing key."""
    return references_of(settings.leads, settings.feeds, settings.agent)


def references_of(
    leads: LeadSettings, feeds: Iterable[FeedSettings], agent: AgentIdentity | None
) -> Iterator[Reference]:
    """:func:`references` of the parts of a configuration being parsed."""

    def named(path: str, pairs: Iterable[tuple[str, Credential]]) -> Iterator[Reference]:
        for stem, cred in pairs:
            if cred:
                yield Reference(f"{path}.{stem}", cred)

    for i, route in enumerate(leads.routes):
        for j, target in enumerate(route.targets):
            yield from named(f"leads.routes[{i}].targets[{j}]", target.credentials())
    if leads.notifications.enabled:
        yield from named("leads.notifications", leads.notifications.credentials())
    for i, feed in enumerate(feeds):
        yield from named(f"feeds[{i}]", feed.credentials())
    if agent is not None:
        yield from named("agent", (("signing_key", agent.signing_key),))


def environment_references(settings: Settings) -> list[str]:
    """A platform tenant's ``X_env`` keys, as problems: its secrets are the tenant's own, set in the
    platform's database, never variables of the platform's workers (docs/platform.md, "Secrets")."""
    return [
        f"{ref.key}: names an environment variable of the platform's workers; a tenant's secret is set with "
        f'`aap tenants secrets set ID NAME` and named by {ref.path.rsplit(".", 1)[-1]}_secret = "NAME"'
        for ref in references(settings)
        if ref.credential.env is not None
    ]


def secret_references(settings: Settings) -> list[Reference]:
    """The references to tenant secrets (``X_secret`` keys)."""
    return [ref for ref in references(settings) if ref.credential.secret is not None]


def unset_secrets(settings: Settings) -> list[str]:
    """The tenant secrets ``settings`` name that its worker found no value for, as problems."""
    return [
        f"{ref.key}: {settings.secrets.missing(ref.credential.secret)}"
        for ref in secret_references(settings)
        if ref.credential.secret is not None and not settings.secrets.get(ref.credential.secret)
    ]
