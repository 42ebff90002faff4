"""The commented template of a platform tenant's configuration (``aap init --tenant FILE``).

It is made from the deployment template (``template.toml``) rather than kept as a second
copy, so that a key documented there is documented for tenants too: the same sections, in
the same order, with the same comments, but for what a tenant's document cannot hold
(``aap.config.loader.TENANT_FORBIDDEN``: ``id``, ``public_url``, ``database``, ``[server]``)
and the feeds, which on a platform are fetched over ``https://`` or ``sftp://`` only and
name no file of the platform host (:mod:`aap.tenants`); its secrets are tenant secrets named
by ``X_secret`` keys, never environment variables (:data:`SECRETS`). It passes the
registry's every check as written (tests/test_tenants_cli.py).
"""

from __future__ import annotations

from aap.config.loader import TEMPLATE_CONFIG, packaged_toml

#: The heading line every section of ``template.toml`` starts with.
HEADING = "# -- "
#: Sections of the deployment template a tenant's document leaves out (by heading).
DEPLOYMENT_ONLY = ("HTTP server limits",)
#: Sections whose text is replaced for tenants (by heading).
FEEDS = "Scheduled inventory feeds"

HEADER = """\
# aap: configuration of one tenant of a platform deployment, a complete AAP 3.1 dealer agent.
#
# Written by `aap init --tenant`. It passes as-is (a one-rooftop example dealer): edit the
# values, check them, then register the tenant with the platform (docs/platform.md):
#
#     aap tenants check example-motors --config THIS_FILE --domain www.example-motors.example
#     aap tenants add example-motors --config THIS_FILE --domain www.example-motors.example
#
# and load its inventory with `aap import FEED.jsonl --tenant example-motors` (or [[feeds]]
# below). Later changes: `aap tenants update example-motors --config THIS_FILE`, served by
# every worker within seconds, without a restart.
#
# The platform's own file (aap tenants --config FILE, else $AAP_CONFIG, else ./aap.toml)
# keeps what every tenant shares, so this file has none of it:
#   - no `id`: the tenant id names the agent (its card's AAP extension `params.id`);
#   - no `public_url`: the agent is served at https://DOMAIN for each of its domains and at
#     https://PLATFORM_HOST/t/ID/, every published URL built from where it is asked;
#   - no `database`: every tenant has a namespace of its own in the platform's database;
#   - no [server]: the request limits and trusted proxies are the platform's.
# Reference: docs/configuration.md. Unknown keys are errors, so a typo never passes
# silently; every problem is reported at once with its path (dealer.rooftops[0].timezone).
# TOML has no null: write "closed" for a day without opening hours.

# Optional A2A `tenant` routing value (`a2a_tenant`; formerly `tenant`), unique on the platform. When set it is published on
# the agent card's JSON-RPC interface; clients echo it in every request, and a request to
# https://PLATFORM_HOST/a2a that carries it is routed to this agent.
# a2a_tenant = "example-motors"

"""

TENANT_FEEDS = """\
# -- Scheduled inventory feeds (docs/feeds.md) -------------------------------------------
# The platform fetches and imports each feed on its schedule, once across all its workers.
# A tenant's feed is fetched over https:// or sftp:// only, and names no file of the
# platform host (no local path, mapping, key_file, known_hosts or ca_file).
# Credentials: tenant secrets by NAME (aap tenants secrets set ID NAME, value on stdin).
#
# [[feeds]]
# name = "nightly"
# source = "https://feeds.provider.example/example-motors/inventory.xml"   # or sftp://user@host/path
# format = "google-vehicle"              # aap, google-vehicle, meta-vehicle, dealer-csv
# schedule = "every 6h"                  # or a cron expression such as "30 2 * * *" (timezone = "...")
# token_secret = "feed-token"           # https: bearer token (or username_secret, password_secret)
# replace = true                         # the feed is the whole inventory
# max_removed_share = 0.5                # never remove more than half of it in one run

"""


def _sections(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The template's preamble and its ``(heading, text)`` sections, in order."""
    preamble: list[str] = []
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith(HEADING):
            title = line[len(HEADING) :].split("(")[0].strip(" -\n")
            sections.append((title, [line]))
        elif sections:
            sections[-1][1].append(line)
        else:
            preamble.append(line)
    return "".join(preamble), [(title, "".join(lines)) for title, lines in sections]


#: The deployment template's secrets, as a tenant names them (docs/platform.md, "Secrets").
SECRETS = (
    (
        "# Sign the agent card (A2A signatures): the environment variable holding",
        "# Sign the agent card (A2A signatures): the tenant secret holding",
    ),
    ('# signing_key_env = "AAP_CARD_SIGNING_KEY"', '# signing_key_secret = "card-key"'),
    (
        'token_env = "CRM_TOKEN" }  # or type "basic" with username_env, password_env',
        'token_secret = "crm-token" }  # or "basic": username_secret, password_secret',
    ),
    ('# username_env = "SMTP_USER"', '# username_secret = "smtp-user"'),
    ('# password_env = "SMTP_PASSWORD"', '# password_secret = "smtp-password"'),
    ("when `secret_env` names the secret's variable", "when `secret_secret` names its tenant secret"),
)


def tenant_template(template: str | None = None) -> str:
    """The tenant template made from ``template`` (default: the packaged ``template.toml``)."""
    _preamble, sections = _sections(packaged_toml(TEMPLATE_CONFIG) if template is None else template)
    parts = [HEADER]
    for title, text in sections:
        if title in DEPLOYMENT_ONLY:
            continue
        if title == FEEDS:
            parts.append(TENANT_FEEDS)
            continue
        text = text.replace("`aap users add EMAIL --role admin`", "`aap users add EMAIL --tenant ID --role admin`")
        for deployment, tenant in SECRETS:
            text = text.replace(deployment, tenant)
        parts.append(text)
    return "".join(parts).rstrip("\n") + "\n"
