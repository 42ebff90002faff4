"""The ``[web]`` table: the public dealer page and the staff console (docs/console.md).

```toml
[web]
public_page = true              # "/" and the vehicle and API-docs pages; false: an API-only host
console = true                  # "/console/" (staff sign in with accounts made by `aap users add`)
session_idle_minutes = 30       # a console session unused this long ends
session_max_hours = 12          # and every session ends this long after sign-in
login_failures_per_account = 5  # failed sign-ins of one account from unknown browsers before delays start
login_failures_per_address = 20 # failed sign-ins from one client address before delays start
login_delay_seconds = 5         # the first delay; each further failure doubles it ...
lockout_minutes = 15            # ... up to this
login_failures_kept_hours = 24  # failures are forgotten this long after the last one
known_device_days = 90          # a browser that signed in is known this long (its own count, no delays of others)
login_hash_concurrency = 2      # password hashes at once per worker process (64 MiB each)
login_hash_wait_ms = 2000       # a sign-in waits this long for one, then is answered 503
check_timeout_seconds = 120     # the console's conformance run is stopped after this long
contact_form = true             # "contact the dealer" forms on the public page (leads through lead.submit)
contact_consent_text = "..."    # the consent shown on them and recorded with each lead ({dealer}: its name)
contact_form_min_seconds = 3    # a form sent sooner after it was shown is refused (spam protection)
contact_form_max_hours = 12     # a form older than this is shown again with a fresh one
```
"""

from __future__ import annotations

from dataclasses import dataclass

from aap.config.table import Problems, Table

#: The consent a shopper gives on the public page's contact forms, unless ``contact_consent_text``
#: says otherwise; ``{dealer}`` becomes the name of the dealer receiving the lead (docs/console.md).
DEFAULT_CONSENT_TEXT = (
    "By sending this form, I agree that {dealer} may contact me about this inquiry by the means I ticked "
    "above (e-mail, phone calls or text messages; message and data rates may apply). Agreeing is not a "
    "condition of any purchase, and I can ask {dealer} to stop at any time."
)
#: The longest consent text accepted (what the shopper is asked to read before sending).
MAX_CONSENT_TEXT = 2000


@dataclass(frozen=True)
class WebSettings:
    """What the browser-facing surfaces (:mod:`aap.site`, :mod:`aap.console`) are configured with."""

    public_page: bool = True
    console: bool = True
    session_idle_minutes: int = 30
    session_max_hours: int = 12
    login_failures_per_account: int = 5
    login_failures_per_address: int = 20
    login_delay_seconds: int = 5
    lockout_minutes: int = 15
    login_failures_kept_hours: int = 24
    known_device_days: int = 90
    login_hash_concurrency: int = 2
    login_hash_wait_ms: int = 2000
    check_timeout_seconds: int = 120
    contact_form: bool = True
    contact_consent_text: str = DEFAULT_CONSENT_TEXT
    contact_form_min_seconds: int = 3
    contact_form_max_hours: int = 12


def parse_web_section(table: Table, problems: Problems) -> WebSettings:
    """The ``[web]`` table; every problem goes to ``problems`` with its path."""
    base = WebSettings()
    settings = WebSettings(
        public_page=table.boolean("public_page", base.public_page),
        console=table.boolean("console", base.console),
        session_idle_minutes=table.integer(
            "session_idle_minutes", base.session_idle_minutes, minimum=1, maximum=24 * 60
        ),
        session_max_hours=table.integer("session_max_hours", base.session_max_hours, minimum=1, maximum=24 * 30),
        login_failures_per_account=table.integer(
            "login_failures_per_account", base.login_failures_per_account, minimum=1, maximum=1000
        ),
        login_failures_per_address=table.integer(
            "login_failures_per_address", base.login_failures_per_address, minimum=1, maximum=100_000
        ),
        login_delay_seconds=table.integer("login_delay_seconds", base.login_delay_seconds, minimum=1, maximum=3600),
        lockout_minutes=table.integer("lockout_minutes", base.lockout_minutes, minimum=1, maximum=24 * 60),
        login_failures_kept_hours=table.integer(
            "login_failures_kept_hours", base.login_failures_kept_hours, minimum=1, maximum=24 * 90
        ),
        known_device_days=table.integer("known_device_days", base.known_device_days, minimum=1, maximum=400),
        login_hash_concurrency=table.integer(
            "login_hash_concurrency", base.login_hash_concurrency, minimum=1, maximum=64
        ),
        login_hash_wait_ms=table.integer("login_hash_wait_ms", base.login_hash_wait_ms, minimum=0, maximum=30_000),
        check_timeout_seconds=table.integer(
            "check_timeout_seconds", base.check_timeout_seconds, minimum=5, maximum=3600
        ),
        contact_form=table.boolean("contact_form", base.contact_form),
        contact_consent_text=_consent_text(table, base.contact_consent_text),
        contact_form_min_seconds=table.integer(
            "contact_form_min_seconds", base.contact_form_min_seconds, minimum=0, maximum=600
        ),
        # at most a day: a form's idempotency key must outlive it (idempotency_retention_hours >= 24)
        contact_form_max_hours=table.integer(
            "contact_form_max_hours", base.contact_form_max_hours, minimum=1, maximum=24
        ),
    )
    table.finish()
    return settings


def _consent_text(table: Table, default: str) -> str:
    """The consent text (never blank: seed 004, ``ConsentGrant.consent_text``), of a readable length."""
    text = table.string("contact_consent_text", default)
    if len(text) > MAX_CONSENT_TEXT:
        table.problem("contact_consent_text", f"must be at most {MAX_CONSENT_TEXT} characters")
        return default
    return text
