"""The first storage layout, kept to upgrade the databases made with it (docs/platform.md, "Upgrading").

Until this layout changed, every agent's tables had no tenant column: a deployment that is one
agent kept them in its database, and a platform kept one copy of them per tenant (a PostgreSQL
schema ``tenant_<id>``, or a SQLite file ``<platform>.tenants/<id>.db``). Its migration steps are
frozen here exactly as they shipped (versions counted in ``schema_migrations``), so that a
database of any earlier version is first brought to that layout's last version and then moved
into the shared tables keyed by tenant (:mod:`aap.store.upgrade`). Nothing here is ever changed.
"""

from __future__ import annotations

import orjson

from aap.store.db import Migrations, Tx
from aap.store.inventory.schema import (
    FEATURE_MASKS,
    LISTING_TABLES,
    day_number,
    photo_count,
)
from aap.store.leads import customer_keys, loads

# -- state ----------------------------------------------------------------------------------

_STATE_SCHEMA_V1 = """
CREATE TABLE state_secret (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE state_bucket (
    bucket_key TEXT PRIMARY KEY,
    tokens DOUBLE PRECISION NOT NULL,
    updated_at DOUBLE PRECISION NOT NULL,
    full_at DOUBLE PRECISION NOT NULL
);
CREATE INDEX state_bucket_full ON state_bucket (full_at);
CREATE TABLE state_once (
    namespace TEXT NOT NULL,
    once_key TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (namespace, once_key)
);
CREATE INDEX state_once_expiry ON state_once (expires_at);
CREATE TABLE state_value (
    namespace TEXT NOT NULL,
    value_key TEXT NOT NULL,
    value TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (namespace, value_key)
);
CREATE INDEX state_value_expiry ON state_value (expires_at)
"""

# Facts about the database itself (e.g. that the demo dealer group seeded it).
_STATE_SCHEMA_V2 = """
CREATE TABLE state_mark (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
)
"""

STATE = Migrations("state", (_STATE_SCHEMA_V1, _STATE_SCHEMA_V2))


# -- inventory ------------------------------------------------------------------------------

_INV_SCHEMA_V1 = f"""
CREATE TABLE inv_listing (
    id TEXT NOT NULL,
    dealer_id TEXT,
    status TEXT NOT NULL,
    condition TEXT,
    vehicle_type TEXT NOT NULL,
    currency TEXT NOT NULL,
    vin TEXT,
    stock TEXT,
    stock_k TEXT,
    make TEXT,
    make_k TEXT,
    model TEXT,
    model_k TEXT,
    trim_k TEXT,
    transmission_k TEXT,
    fuel_k TEXT,
    driveline_k TEXT,
    body_k TEXT,
    exterior_color_k TEXT,
    interior_color_k TEXT,
    charge_port_k TEXT,
    rooftop TEXT,
    year INTEGER,
    price BIGINT,
    list_price BIGINT,
    msrp BIGINT,
    odometer_mm BIGINT,
    updated_us BIGINT NOT NULL,
    electric_range_mi DOUBLE PRECISION,
    dc_fast_charge INTEGER,
    displacement_cc BIGINT,
    {", ".join(f"{m} BIGINT NOT NULL DEFAULT 0" for m in FEATURE_MASKS)}
);
CREATE UNIQUE INDEX inv_listing_id ON inv_listing (id);
CREATE INDEX inv_listing_make ON inv_listing (make_k, currency, price);
CREATE INDEX inv_listing_price ON inv_listing (price, currency);
CREATE INDEX inv_listing_updated ON inv_listing (updated_us, currency);
CREATE INDEX inv_listing_odometer ON inv_listing (odometer_mm, currency);
CREATE INDEX inv_listing_year ON inv_listing (year, currency);
CREATE INDEX inv_listing_rooftop ON inv_listing (rooftop, currency, id);
CREATE INDEX inv_listing_vin ON inv_listing (vin);
CREATE INDEX inv_listing_stock ON inv_listing (stock);
CREATE TABLE inv_text (
    id TEXT NOT NULL,
    query TEXT NOT NULL
);
CREATE UNIQUE INDEX inv_text_id ON inv_text (id);
CREATE TABLE inv_doc (
    id TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE UNIQUE INDEX inv_doc_id ON inv_doc (id);
CREATE TABLE inv_feature_extra (
    id TEXT NOT NULL,
    code TEXT NOT NULL,
    PRIMARY KEY (id, code)
);
CREATE INDEX inv_feature_extra_code ON inv_feature_extra (code, id);
CREATE TABLE inv_tombstone (
    id TEXT PRIMARY KEY,
    dealer_id TEXT,
    vin TEXT,
    stock TEXT,
    removed_us BIGINT NOT NULL
);
CREATE INDEX inv_tombstone_vin ON inv_tombstone (vin);
CREATE INDEX inv_tombstone_stock ON inv_tombstone (stock);
CREATE INDEX inv_tombstone_removed ON inv_tombstone (removed_us);
CREATE TABLE inv_term (
    field TEXT NOT NULL,
    term TEXT NOT NULL,
    display TEXT NOT NULL,
    PRIMARY KEY (field, term)
);
CREATE TABLE inv_vocab (
    code TEXT PRIMARY KEY,
    label TEXT NOT NULL,
    bit INTEGER
);
CREATE TABLE inv_facet_count (
    currency TEXT NOT NULL,
    dealer_key TEXT NOT NULL,
    field TEXT NOT NULL,
    value TEXT NOT NULL,
    n BIGINT NOT NULL,
    PRIMARY KEY (currency, dealer_key, field, value)
);
CREATE TABLE inv_meta (
    name TEXT PRIMARY KEY,
    num BIGINT NOT NULL
);
INSERT INTO inv_meta (name, num) VALUES ('version', 0)
"""

# Exact totals that were slow to count, per inventory version and matching set.
_INV_SCHEMA_V2 = """
CREATE TABLE inv_count (
    version BIGINT NOT NULL,
    matching TEXT NOT NULL,
    total BIGINT NOT NULL,
    PRIMARY KEY (version, matching)
)
"""


def _keyword_index(tx: Tx) -> None:
    """Made a trigram index of the keyword text, which a later step of this layout drops
    (:data:`_NO_KEYWORD_INDEX`): a database upgraded from before it skips making it."""


def _vacuum_often(tx: Tx) -> None:
    """Listing tables change in many small imports: keep their statistics fresh."""
    tx.db.dialect.vacuum_eagerly(tx, LISTING_TABLES)


def _row_numbers_and_sellers(tx: Tx) -> None:
    """Per-seller versions and row numbers (docs/search.md, "Counting at marketplace scale").

    ``rid`` numbers available listings for the posting index; a listing keeps its
    number while it stays available, and a number is never given twice
    (``next_rid``), so a seller's old numbers can be taken out of the index without
    touching another seller's. ``inv_seller.version`` is the inventory version of
    the seller's last change: what a remembered count of that seller depends on.
    """
    tx.script("""
ALTER TABLE inv_listing ADD COLUMN rid BIGINT;
UPDATE inv_listing SET rid = n.rn FROM (SELECT id, ROW_NUMBER() OVER (ORDER BY id) AS rn FROM inv_listing) n
    WHERE inv_listing.id = n.id;
CREATE UNIQUE INDEX inv_listing_rid ON inv_listing (rid);
CREATE INDEX inv_listing_dealer ON inv_listing (dealer_id);
CREATE TABLE inv_seller (
    dealer_key TEXT PRIMARY KEY,
    version BIGINT NOT NULL
);
INSERT INTO inv_seller (dealer_key, version)
    SELECT DISTINCT COALESCE(l.dealer_id, ''), m.num FROM inv_listing l, inv_meta m WHERE m.name = 'version';
INSERT INTO inv_meta (name, num) SELECT 'next_rid', COALESCE(MAX(rid), 0) + 1 FROM inv_listing;
CREATE TABLE inv_change (
    version BIGINT NOT NULL,
    rid BIGINT NOT NULL
);
CREATE INDEX inv_change_version ON inv_change (version);
INSERT INTO inv_meta (name, num) SELECT 'changes_from', num FROM inv_meta WHERE name = 'version';
ALTER TABLE inv_count ADD COLUMN partials TEXT;
CREATE INDEX inv_count_matching ON inv_count (matching, version)
""")


# The posting index (:mod:`.postings`) answers keyword tokens now; the trigram index cost
# imports half their speed on PostgreSQL (docs/search.md, "Counting at marketplace scale").
_NO_KEYWORD_INDEX = "DROP INDEX IF EXISTS inv_text_trgm"


def _browse_columns(tx: Tx) -> None:
    """What the console's inventory browser filters and sorts on (docs/console.md, "Inventory"): the
    photo count and the day the vehicle came into stock, on the narrow row, and the indexes its
    keyset pages walk (price, mileage, days in stock, each with the id that breaks ties). Listings
    stored before this step get theirs from their documents, in one pass."""
    tx.script("""
ALTER TABLE inv_listing ADD COLUMN photos INTEGER NOT NULL DEFAULT 0;
ALTER TABLE inv_listing ADD COLUMN in_stock_day INTEGER;
CREATE INDEX inv_listing_browse_price ON inv_listing (price, id);
CREATE INDEX inv_listing_browse_odometer ON inv_listing (odometer_mm, id);
CREATE INDEX inv_listing_browse_stock_day ON inv_listing (in_stock_day, id);
CREATE INDEX inv_listing_no_photo ON inv_listing (id) WHERE photos = 0
""")
    updates = []
    for ident, doc in tx.fetchall("SELECT id, doc FROM inv_doc"):
        listing = orjson.loads(doc)
        photos, day = photo_count(listing.get("photos")), day_number(listing.get("inventory_date"))
        if photos or day is not None:
            updates.append((photos, day, ident))
    if updates:
        tx.executemany("UPDATE inv_listing SET photos = ?, in_stock_day = ? WHERE id = ?", updates)


INVENTORY = Migrations(
    "inventory",
    (
        _INV_SCHEMA_V1,
        _INV_SCHEMA_V2,
        _keyword_index,
        _vacuum_often,
        _row_numbers_and_sellers,
        _NO_KEYWORD_INDEX,
        _browse_columns,
    ),
)


# -- leads ----------------------------------------------------------------------------------

_LEADS_V1 = """
CREATE TABLE leads (
    lead_id TEXT PRIMARY KEY,
    dealer_id TEXT NOT NULL,
    rooftop TEXT,
    status TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    binding TEXT NOT NULL,
    client_id TEXT,
    source_agent TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    vehicle_id TEXT,
    vehicle_link TEXT NOT NULL,
    listing_json TEXT,
    appointment_id TEXT,
    appointment_status TEXT,
    appointment_json TEXT,
    request_json TEXT NOT NULL,
    response_json TEXT NOT NULL,
    received_at TEXT NOT NULL,
    received_ms INTEGER NOT NULL
);
CREATE INDEX leads_received ON leads (received_ms);
CREATE TABLE lead_consents (
    lead_id TEXT PRIMARY KEY REFERENCES leads (lead_id),
    granted_at TEXT NOT NULL,
    expires_at TEXT,
    expires_ms INTEGER,
    allowed_channels TEXT NOT NULL,
    scope TEXT NOT NULL,
    consent_text TEXT NOT NULL,
    grant_json TEXT NOT NULL
);
CREATE TABLE lead_idempotency (
    dealer_id TEXT NOT NULL,
    caller_id TEXT NOT NULL,
    idem_key TEXT NOT NULL,
    payload_hash TEXT NOT NULL,
    lead_id TEXT,
    response_json TEXT,
    created_ms INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL,
    PRIMARY KEY (dealer_id, caller_id, idem_key)
);
CREATE INDEX lead_idempotency_expiry ON lead_idempotency (expires_ms);
CREATE TABLE appointment_seats (
    dealer_id TEXT NOT NULL,
    rooftop TEXT NOT NULL,
    department TEXT NOT NULL,
    slot_start TEXT NOT NULL,
    seat INTEGER NOT NULL,
    appointment_id TEXT NOT NULL,
    lead_id TEXT NOT NULL,
    PRIMARY KEY (dealer_id, rooftop, department, slot_start, seat)
);
CREATE TABLE lead_deliveries (
    delivery_id TEXT PRIMARY KEY,
    lead_id TEXT NOT NULL REFERENCES leads (lead_id),
    target TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_ms INTEGER NOT NULL,
    claim_token TEXT,
    claimed_until_ms INTEGER,
    last_error TEXT,
    created_ms INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL,
    delivered_ms INTEGER,
    UNIQUE (lead_id, target)
);
CREATE INDEX lead_deliveries_due ON lead_deliveries (status, next_attempt_ms);
CREATE INDEX lead_deliveries_claim ON lead_deliveries (claim_token)
"""

# ``attempts`` counts every try, for ever; ``retry_base`` is its value when an
# operator last re-queued the row (``aap leads retry``), so the retry policy
# (max_attempts, backoff) starts again while the count stays true.
_LEADS_V2 = "ALTER TABLE lead_deliveries ADD COLUMN retry_base INTEGER NOT NULL DEFAULT 0"

# The staff console (docs/console.md): "handled" marks, customer search keys (casefolded
# name, last name and e-mail, the phone's digits reversed so a suffix is a prefix), the
# indexes of the inbox's filters, and one row per delivery attempt with what was sent.
_LEADS_V3 = """
ALTER TABLE leads ADD COLUMN handled_ms INTEGER;
ALTER TABLE leads ADD COLUMN handled_by TEXT;
ALTER TABLE leads ADD COLUMN customer_name_k TEXT;
ALTER TABLE leads ADD COLUMN customer_last_k TEXT;
ALTER TABLE leads ADD COLUMN customer_email_k TEXT;
ALTER TABLE leads ADD COLUMN customer_phone_r TEXT;
CREATE INDEX leads_dealer_received ON leads (dealer_id, received_ms);
CREATE INDEX leads_rooftop_received ON leads (rooftop, received_ms);
CREATE INDEX leads_status_received ON leads (status, received_ms);
CREATE INDEX leads_customer_name ON leads (customer_name_k);
CREATE INDEX leads_customer_last ON leads (customer_last_k);
CREATE INDEX leads_customer_email ON leads (customer_email_k);
CREATE INDEX leads_customer_phone ON leads (customer_phone_r);
CREATE INDEX lead_deliveries_state ON lead_deliveries (status, lead_id);
CREATE TABLE lead_delivery_attempts (
    attempt_id TEXT PRIMARY KEY,
    delivery_id TEXT NOT NULL,
    lead_id TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    error TEXT,
    content_type TEXT,
    payload TEXT
);
CREATE INDEX lead_delivery_attempts_lead ON lead_delivery_attempts (lead_id, finished_ms)
"""


def _backfill_customer_keys(tx: Tx) -> None:
    """Search keys for the leads stored before :data:`_LEADS_V3` (one pass, in the migration)."""
    rows = tx.fetchall("SELECT lead_id, request_json FROM leads")
    tx.executemany(
        "UPDATE leads SET customer_name_k = ?, customer_last_k = ?, customer_email_k = ?, customer_phone_r = ?"
        " WHERE lead_id = ?",
        [(*customer_keys(loads(request) or {}), lead_id) for lead_id, request in rows],
    )


# ``reached``: an earlier attempt may have reached the target (it was sent and its answer
# was lost or ambiguous, or a worker died holding the claim, or an operator re-sent a
# delivered row); the next attempts are flagged as resends (docs/leads.md §8, the resend rule).
# Rows from before this step count as reached when they were tried, as the flag said then.
_LEADS_V4 = (
    "ALTER TABLE lead_deliveries ADD COLUMN reached INTEGER NOT NULL DEFAULT 0;\n"
    "UPDATE lead_deliveries SET reached = 1 WHERE attempts > 0"
)


LEADS = Migrations("leads", (_LEADS_V1, _LEADS_V2, _LEADS_V3, _backfill_customer_keys, _LEADS_V4))


# -- pipeline -------------------------------------------------------------------------------

_PIPELINE_V1 = """
ALTER TABLE leads ADD COLUMN stage TEXT NOT NULL DEFAULT 'new';
ALTER TABLE leads ADD COLUMN stage_ms INTEGER;
ALTER TABLE leads ADD COLUMN owner TEXT;
ALTER TABLE leads ADD COLUMN follow_up TEXT;
ALTER TABLE leads ADD COLUMN responded_ms INTEGER;
ALTER TABLE leads ADD COLUMN response_ms INTEGER;
ALTER TABLE leads ADD COLUMN notes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX leads_stage_received ON leads (stage, received_ms);
CREATE INDEX leads_owner_received ON leads (owner, received_ms DESC, lead_id DESC, stage);
CREATE INDEX leads_follow_up ON leads (follow_up, received_ms, lead_id, stage, owner);
CREATE INDEX leads_response_order ON leads (rooftop, response_ms, received_ms, dealer_id, status);
CREATE TABLE lead_events (
    event_id TEXT PRIMARY KEY,
    lead_id TEXT NOT NULL REFERENCES leads (lead_id),
    at_ms INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    actor TEXT NOT NULL,
    kind TEXT NOT NULL,
    old_value TEXT,
    new_value TEXT,
    note TEXT
);
CREATE INDEX lead_events_lead ON lead_events (lead_id, at_ms, seq)
"""

PIPELINE = Migrations("pipeline", (_PIPELINE_V1,))


# -- poppy ----------------------------------------------------------------------------------

POPPY = Migrations(
    "poppy",
    (
        """
        CREATE TABLE poppy_signing_keys (
            kid TEXT PRIMARY KEY,
            private_jwk TEXT NOT NULL,
            created_at REAL NOT NULL,
            retired_at REAL
        );
        CREATE TABLE poppy_replay (
            scope TEXT NOT NULL,
            entry TEXT NOT NULL,
            expires_at REAL NOT NULL,
            PRIMARY KEY (scope, entry)
        );
        CREATE INDEX poppy_replay_expiry ON poppy_replay (expires_at);
        CREATE TABLE poppy_sessions (
            id TEXT PRIMARY KEY,
            jkt TEXT NOT NULL UNIQUE,
            client_id TEXT NOT NULL,
            sub TEXT NOT NULL,
            agent_id TEXT,
            created_at REAL NOT NULL,
            last_used_at REAL NOT NULL,
            ended_at REAL
        );
        CREATE TABLE poppy_tokens (
            token_hash TEXT PRIMARY KEY,
            session_id TEXT NOT NULL REFERENCES poppy_sessions (id),
            token_type TEXT NOT NULL,
            resource TEXT,
            issued_at REAL NOT NULL,
            expires_at REAL NOT NULL,
            revoked_at REAL
        );
        CREATE INDEX poppy_tokens_session ON poppy_tokens (session_id);
        CREATE INDEX poppy_tokens_expiry ON poppy_tokens (expires_at);
        CREATE TABLE poppy_feedback (
            id TEXT PRIMARY KEY,
            received_at REAL NOT NULL,
            client_id TEXT NOT NULL,
            sub TEXT NOT NULL,
            agent_id TEXT,
            kind TEXT NOT NULL,
            task TEXT NOT NULL,
            description TEXT NOT NULL,
            body TEXT NOT NULL,
            answered_with_alternative INTEGER NOT NULL
        );
        CREATE INDEX poppy_feedback_caller ON poppy_feedback (client_id, sub, received_at)
        """,
    ),
)


# -- feeds ----------------------------------------------------------------------------------

_FEEDS_V1 = """
CREATE TABLE feed_runs (
    run_id TEXT PRIMARY KEY,
    feed TEXT,
    trigger TEXT NOT NULL,
    source TEXT NOT NULL,
    format TEXT,
    dealer_id TEXT,
    replace_mode INTEGER NOT NULL,
    dry_run INTEGER NOT NULL,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    message TEXT,
    rows_read INTEGER NOT NULL,
    inserted INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    removed INTEGER NOT NULL,
    skipped INTEGER NOT NULL,
    warnings INTEGER NOT NULL,
    total INTEGER,
    problems_json TEXT NOT NULL,
    rejected_lines_json TEXT NOT NULL,
    details_json TEXT NOT NULL
);
CREATE INDEX feed_runs_started ON feed_runs (started_ms);
CREATE INDEX feed_runs_feed ON feed_runs (feed, started_ms);
CREATE TABLE feed_state (
    feed TEXT PRIMARY KEY,
    next_run_ms INTEGER NOT NULL,
    failures INTEGER NOT NULL,
    lease_token TEXT,
    lease_until_ms INTEGER,
    etag TEXT,
    last_modified TEXT,
    fingerprint TEXT,
    last_run_ms INTEGER,
    last_outcome TEXT,
    last_success_ms INTEGER
)
"""

# Listings an import found exactly as published (not rewritten), apart from ``updated``.
_FEEDS_V2 = "ALTER TABLE feed_runs ADD COLUMN unchanged INTEGER NOT NULL DEFAULT 0"

# The warnings and rejected rows of each run, one row each, with the listing they are about.
_FEEDS_V3 = """
CREATE TABLE feed_notes (
    run_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    line INTEGER NOT NULL,
    listing_id TEXT,
    location TEXT,
    column_name TEXT,
    value TEXT,
    message TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX feed_notes_kind ON feed_notes (run_id, kind, listing_id);
CREATE INDEX feed_notes_listing ON feed_notes (listing_id, run_id)
"""

FEEDS = Migrations("feeds", (_FEEDS_V1, _FEEDS_V2, _FEEDS_V3))


# -- console --------------------------------------------------------------------------------

_CONSOLE_V1 = """
CREATE TABLE console_users (
    user_id TEXT PRIMARY KEY,
    email TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    role TEXT NOT NULL,
    dealer_id TEXT,
    rooftops TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    password_ms INTEGER NOT NULL
);
CREATE TABLE console_sessions (
    session_hash TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES console_users (user_id) ON DELETE CASCADE,
    csrf_token TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    seen_ms INTEGER NOT NULL
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);
CREATE INDEX console_sessions_seen ON console_sessions (seen_ms);
CREATE TABLE console_throttle (
    throttle_key TEXT PRIMARY KEY,
    failures INTEGER NOT NULL,
    first_ms INTEGER NOT NULL,
    locked_until_ms INTEGER
);
CREATE TABLE console_audit (
    audit_id TEXT PRIMARY KEY,
    at_ms INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    subject TEXT,
    detail TEXT NOT NULL
);
CREATE INDEX console_audit_at ON console_audit (at_ms, audit_id);
CREATE INDEX console_audit_subject ON console_audit (subject, at_ms, audit_id);
CREATE TABLE console_checks (
    run_id TEXT PRIMARY KEY,
    started_ms INTEGER NOT NULL,
    finished_ms INTEGER,
    started_by TEXT NOT NULL,
    target TEXT NOT NULL,
    state TEXT NOT NULL,
    report TEXT
);
CREATE INDEX console_checks_started ON console_checks (started_ms)
"""

# Sign-in throttling counts attempts *before* the password is hashed (aap.accounts): one row per
# key with the attempts counted and the time of the last; the old lockout rows are dropped (a
# lockout in force when upgrading ends). Sessions keep the browser's name for the account page.
_CONSOLE_V2 = """
DROP TABLE console_throttle;
CREATE TABLE console_throttle (
    throttle_key TEXT PRIMARY KEY,
    attempts INTEGER NOT NULL,
    last_ms INTEGER NOT NULL
);
CREATE INDEX console_throttle_last ON console_throttle (last_ms);
ALTER TABLE console_sessions ADD COLUMN user_agent TEXT
"""

CONSOLE = Migrations("console", (_CONSOLE_V1, _CONSOLE_V2))


#: Every domain of the first layout, as ``schema_migrations`` counted them.
DOMAINS: tuple[Migrations, ...] = (STATE, INVENTORY, LEADS, PIPELINE, POPPY, FEEDS, CONSOLE)
