"""Typed dealer configuration: :class:`Settings` and the core sections' classes.

A deployment is described by one TOML file (see ``aap init``). Its ``[dealer]``
table mirrors the AAP ``DealerInformation`` object key for key, so the
``dealer.information`` answer is the configuration itself, validated once at
load time. TOML has no ``null``: a closed day is written ``"closed"``.

The subsystems' sections have their classes next to their parsers
(:mod:`aap.config.mcp`, :mod:`aap.config.leads`, :mod:`aap.config.poppy`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aap.config.credentials import NO_SECRETS, Credential, SecretValues
from aap.config.feeds import FeedSettings
from aap.config.leads import LeadSettings
from aap.config.mcp import McpSettings
from aap.config.platform import PlatformSettings
from aap.config.poppy import PoppySettings
from aap.config.web import WebSettings
from aap.netguard import LOCAL, Reach
from aap.paths import DeploymentUrls

ALL_FILTERS: tuple[str, ...] = (
    "make",
    "model",
    "trim",
    "condition",
    "vehicle_type",
    "transmission",
    "fuel",
    "electric_range_mi_min",
    "electric_range_mi_max",
    "dc_fast_charge",
    "charge_port",
    "driveline",
    "body",
    "displacement_cc_min",
    "displacement_cc_max",
    "exterior_color",
    "interior_color",
    "rooftops",
    "status",
    "features_all",
    "features_any",
    "near",
    "year_min",
    "year_max",
    "price_min",
    "price_max",
    "mileage_max",
    "vin",
    "stock",
    "query",
)

ALL_SORT_FIELDS: tuple[str, ...] = (
    "price",
    "list_price",
    "msrp",
    "mileage",
    "year",
    "make",
    "model",
    "stock",
    "updated_at",
    "distance_mi",
)

#: How far behind its primary a read replica may be and still answer (``[database]``).
DEFAULT_REPLICA_LAG_MS = 5000

WEEKDAYS: tuple[str, ...] = (
    "monday",
    "tuesday",
    "wednesday",
    "thursday",
    "friday",
    "saturday",
    "sunday",
)


@dataclass(frozen=True)
class SearchCapabilities:
    """What ``inventory.search`` really honours; published verbatim on every binding."""

    scope: str = "dealer"
    filters: tuple[str, ...] = ALL_FILTERS
    sort_fields: tuple[str, ...] = ALL_SORT_FIELDS
    default_sort: tuple[str, str] = ("updated_at", "desc")
    default_limit: int = 20
    max_limit: int = 100
    offset: bool = True
    currencies: tuple[str, ...] = ("USD",)
    default_currency: str = "USD"
    default_mileage_unit: str = "mi"

    def to_json(self) -> dict[str, Any]:
        """The ``InventoryCapabilities`` object."""
        return {
            "scope": self.scope,
            "filters": list(self.filters),
            "sort_fields": list(self.sort_fields),
            "default_sort": {"field": self.default_sort[0], "order": self.default_sort[1]},
            "default_limit": self.default_limit,
            "max_limit": self.max_limit,
            "offset": self.offset,
            "currencies": list(self.currencies),
            "default_currency": self.default_currency,
            "default_mileage_unit": self.default_mileage_unit,
        }


@dataclass(frozen=True)
class Feature:
    """One advertised feature code (the vocabulary of ``features_all``/``features_any``)."""

    code: str
    label: str


@dataclass(frozen=True)
class DealerProfile:
    """One seller: the ``DealerInformation`` object plus its identifier."""

    info: dict[str, Any]  # a valid DealerInformation object (JSON shape)
    #: The rooftops' feed store codes (casefolded) -> rooftop name: configuration only, never
    #: published (``store_codes`` of a rooftop table, docs/configuration.md).
    store_codes: Mapping[str, str] = field(default_factory=dict)

    @property
    def dealer_id(self) -> str | None:
        return self.info.get("dealer_id")

    @property
    def name(self) -> str:
        name: str = self.info["name"]
        return name

    @property
    def rooftops(self) -> list[dict[str, Any]]:
        rooftops: list[dict[str, Any]] = self.info["rooftops"]
        return rooftops

    def rooftop(self, name: str | None) -> dict[str, Any] | None:
        """Resolve a listing's ``rooftop`` value; null resolves only for a single rooftop."""
        if name is None:
            return self.rooftops[0] if len(self.rooftops) == 1 else None
        for rooftop in self.rooftops:
            if rooftop["name"] == name:
                return rooftop
        return None


@dataclass(frozen=True)
class AgentIdentity:
    """How the agent names itself on the agent card and in llms.txt."""

    name: str
    description: str
    version: str = "1.0.0"
    provider_organization: str | None = None
    provider_url: str | None = None
    documentation_url: str | None = None
    icon_url: str | None = None
    #: The environment variable holding the private key the agent card is signed with (PEM or a
    #: JWK), and the key's id (default: its RFC 7638 thumbprint): docs/a2a.md, "Signed agent card".
    signing_key_env: str | None = None
    signing_kid: str | None = None
    #: A platform tenant's: the tenant secret holding that key (docs/platform.md, "Secrets").
    signing_key_secret: str | None = None

    @property
    def signing_key(self) -> Credential:
        return Credential(self.signing_key_env, self.signing_key_secret)


@dataclass(frozen=True)
class RateLimit:
    """Token bucket per caller: ``burst`` tokens, refilled at ``per_minute``."""

    enabled: bool = True
    per_minute: int = 600
    burst: int = 120


@dataclass(frozen=True)
class ConnectionLimits:
    """What the HTTP server accepts of a request before the app sees it (``[server]``).

    Applied by the server's own HTTP protocol on every worker (:mod:`aap.server.protocol`)
    and by the body reader (:mod:`aap.web.body`); docs/deployment.md, "Request limits".
    """

    max_request_line_bytes: int = 8_192  # method, target and version; larger → 414
    max_header_field_bytes: int = 8_192  # one header field, name and value; larger → 431
    max_head_bytes: int = 32_768  # the request line and every header field together; larger → 431
    max_header_fields: int = 100  # header fields in one request; more → 431
    header_timeout_seconds: float = 10.0  # connection (or next request's first byte) to the end of the head
    body_timeout_seconds: float = 30.0  # end of the head to the end of the body; past it → 408
    keep_alive_seconds: float = 5.0  # an idle connection between requests is closed after this
    max_connections: int = 1_000  # open connections per worker; one more is answered 503 and closed


@dataclass(frozen=True, slots=True)
class Settings:
    """Everything a deployment is configured with.

    Every optional section has its defaults, so a ``Settings`` built in code
    (tests, tools) names only what it needs. Slotted: a platform worker holds one for each
    tenant it serves, and a dictionary of its fields would be most of it.
    """

    deployment_id: str
    public_url: str
    agent: AgentIdentity
    dealer: DealerProfile
    search: SearchCapabilities = field(default_factory=SearchCapabilities)
    features: tuple[Feature, ...] = ()
    dealers: tuple[DealerProfile, ...] = ()  # aggregate scope: the sellers behind the endpoint
    rate_limit: RateLimit = field(default_factory=RateLimit)
    database_url: str = "sqlite:///aap.db"
    #: A platform tenant's id: its rows in the platform's database (``database_url``) are those
    #: keyed by it (docs/platform.md, "Isolation"); None for a deployment that is one agent.
    tenant_id: str | None = None
    database_read_urls: tuple[str, ...] = ()  # PostgreSQL replicas for the read skills
    max_replica_lag_ms: int = DEFAULT_REPLICA_LAG_MS
    max_body_bytes: int = 1_048_576
    cursor_ttl_seconds: int = 86_400
    count_timeout_ms: int = 0  # 0: always count exactly; else total is null past this budget
    search_timeout_ms: int = 10_000  # the inventory reads of one search or facets request; 0: none
    #: Proxies whose X-Forwarded-For/-Proto are believed (addresses or networks); none by default.
    forwarded_allow_ips: tuple[str, ...] = ()
    limits: ConnectionLimits = field(default_factory=ConnectionLimits)
    #: (host, port) of a second socket serving ``/metrics`` (and ``/healthz``) instead of the public one.
    metrics_listen: tuple[str, int] | None = None
    #: Environment variable holding the bearer token ``/metrics`` requires (None: no token).
    metrics_token_env: str | None = None
    #: ``Strict-Transport-Security`` max-age sent when ``public_url`` is https (0: never sent).
    hsts_max_age: int = 31_536_000
    #: The A2A ``tenant`` routing value the card's JSON-RPC interface declares (A2A v1.0
    #: ``AgentInterface.tenant``; ``a2a_tenant`` in the file): not a platform tenant.
    a2a_tenant: str | None = None
    source_path: str | None = None
    mcp: McpSettings = field(default_factory=McpSettings)
    leads: LeadSettings = field(default_factory=LeadSettings)
    poppy: PoppySettings = field(default_factory=PoppySettings)
    feeds: tuple[FeedSettings, ...] = ()
    web: WebSettings = field(default_factory=WebSettings)
    #: Platform hosting (docs/platform.md): the deployment serves the tenants in its database;
    #: None for a deployment that is one agent.
    platform: PlatformSettings | None = None
    #: The A2A endpoint the card names when it is not ``public_url``'s own ``/a2a``: set for a
    #: platform tenant that declares an A2A ``tenant`` routing value (``a2a_tenant``) (docs/platform.md).
    a2a_url: str | None = None
    #: Where the destinations this configuration names may be: the operator's own network too
    #: for a deployment that is one agent, the public internet only for a platform's tenant
    #: (docs/deployment.md, "Outbound connections").
    outbound: Reach = LOCAL
    #: A platform tenant's: the values of the tenant secrets its configuration names, read when its
    #: worker built it (docs/platform.md, "Secrets"); empty for a deployment that is one agent.
    secrets: SecretValues = field(default=NO_SECRETS, repr=False, compare=False)

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getter(self) for getter in _SLOT_GETTERS)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        """Each field set through its slot's own descriptor: a worker unpacks a tenant's
        Settings for each build (:mod:`aap.config.shared`), and the generic frozen-slots path
        looks the fields up again for every object."""
        if len(state) != len(_SLOT_SETTERS):  # refused before any field is set
            raise ValueError(f"a Settings state of {len(state)} fields, not {len(_SLOT_SETTERS)}")
        for setter, value in zip(_SLOT_SETTERS, state):
            setter(self, value)

    @property
    def scope(self) -> str:
        return self.search.scope

    @property
    def base_url(self) -> str:
        return self.public_url.rstrip("/")

    @property
    def urls(self) -> DeploymentUrls:
        """The absolute URLs this agent publishes."""
        return DeploymentUrls(self.public_url, self.a2a_url)

    def url(self, path: str) -> str:
        """Absolute public URL of a path on this deployment."""
        return self.base_url + path

    def profile_for(self, dealer_id: str | None) -> DealerProfile | None:
        """The seller profile for ``dealer_id`` (the default profile when ``None``)."""
        if dealer_id is None:
            return self.dealer
        if self.dealer.dealer_id == dealer_id:
            return self.dealer
        for profile in self.dealers:
            if profile.dealer_id == dealer_id:
                return profile
        return None

    def all_profiles(self) -> list[DealerProfile]:
        """Every seller whose rooftops can hold listings."""
        if self.scope == "aggregate" and self.dealers:
            return list(self.dealers)
        return [self.dealer]


_SLOT_GETTERS = tuple(Settings.__dict__[name].__get__ for name in Settings.__slots__)
_SLOT_SETTERS = tuple(Settings.__dict__[name].__set__ for name in Settings.__slots__)
