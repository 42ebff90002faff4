"""The public page's contact forms: a shopper's message to the dealer, as a real ``lead.submit``.

A form is a door's envelope like any other: this module turns its fields into a
``lead.submit.request`` (seed 004, ``LeadSubmitRequest``) and the core's answer back into
what the shopper reads; the site sends the request through the gateway as door ``web``, so
the same validation, rate limits and idempotency apply as on ``/a2a`` (docs/console.md,
"Contact forms").

Each rendered form carries a **form token**: what the form was made for (its vehicle or
seller, the dealer's name, the consent text shown, the region its phone numbers are read
in) and a random nonce, signed with a key kept in the database and stamped with the time it
was made (``itsdangerous``). The token

- is the lead's idempotency key (``web-`` + the nonce; seed 004,
  ``LeadSubmitRequest.idempotency_key``), so a double submit or a reload replays the first
  answer instead of making a second lead, and one token makes at most one lead;
- dates the consent: ``consent.granted_at`` is the moment the consent text was shown, the
  same for every submission of that form, so a resubmission is the same request;
- carries the consent text itself, so the text recorded with the lead is verbatim the text
  the shopper read, even if the configuration changed in between (seed 004,
  ``ConsentGrant.consent_text``);
- is bound to a cookie of the browser it was shown to (``SameSite=Lax``), and is refused
  when sent sooner than ``contact_form_min_seconds`` after it was made (no person fills a
  form that fast) or later than ``contact_form_max_hours``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson
from itsdangerous import BadSignature, TimestampSigner

from aap.config.phones import to_e164
from aap.errors import AapError
from aap.util.rfc3339 import to_utc_z

#: The consent channels a shopper may tick, in the order they are recorded (seed 004,
#: ``ConsentGrant.allowed_channels``), with what the form calls them.
CHANNELS: tuple[tuple[str, str], ...] = (("email", "E-mail"), ("phone", "Phone call"), ("sms", "Text message"))
CHANNEL_LABELS = dict(CHANNELS)
#: The channels in a sentence ("may contact you by e-mail or text message").
CHANNEL_WORDS = {"email": "e-mail", "phone": "phone", "sms": "text message"}
#: ``Customer.preferred_contact`` (seed 004) as the form offers it; blank: no preference.
PREFERENCES: tuple[tuple[str, str], ...] = (("", "No preference"), *CHANNELS)

#: ``source_agent.name`` of every lead the public page makes (**decision**, docs/console.md):
#: the dealer's own public page, with its address as ``source_agent.url``.
SOURCE_AGENT_NAME = "public-page"
#: The prefix of the idempotency keys of the page's leads (the rest is the form's nonce).
KEY_PREFIX = "web-"

TOKEN_FIELD = "form_token"
#: The honeypot: a field people never see (hidden by the stylesheet) and bots fill in.
HONEYPOT_FIELD = "website"
BROWSER_COOKIE = "aap_contact"
#: The browser cookie lives this long (refreshed with every form shown): beyond any form's life.
BROWSER_COOKIE_SECONDS = 2 * 24 * 3600
#: The longest form token read (a token this module makes is well under 2 KiB).
MAX_TOKEN = 4096
#: The form fields read (anything else in the body is ignored; more fields are refused).
MAX_FORM_FIELDS = 30
#: ``maxlength`` of the form's inputs (the core bounds what an agent sends the same way).
MAX_LENGTHS = {"first_name": 100, "last_name": 100, "email": 254, "phone": 40, "message": 4000}


@dataclass(frozen=True)
class FormClaims:
    """What one rendered form was made for; signed into its token."""

    nonce: str
    browser: str  #: digest of the browser cookie the form was shown with
    dealer_name: str
    consent_text: str
    region: str  #: where a phone number written without a country code is read
    vehicle_id: str | None = None
    vehicle_title: str | None = None
    seller_id: str | None = None  #: the seller a general form is for, on an aggregate endpoint

    @property
    def idempotency_key(self) -> str:
        return KEY_PREFIX + self.nonce

    def _pack(self) -> list[Any]:
        return [
            self.nonce,
            self.browser,
            self.dealer_name,
            self.consent_text,
            self.region,
            self.vehicle_id,
            self.vehicle_title,
            self.seller_id,
        ]

    @classmethod
    def _unpack(cls, items: Any) -> FormClaims | None:
        if not isinstance(items, list) or len(items) != 8:
            return None
        nonce, browser, dealer, consent, region, vehicle_id, title, seller = items
        if not all(isinstance(v, str) for v in (nonce, browser, dealer, consent, region)):
            return None
        if not all(v is None or isinstance(v, str) for v in (vehicle_id, title, seller)):
            return None
        return cls(nonce, browser, dealer, consent, region, vehicle_id, title, seller)

    def renewed(self, browser: str) -> FormClaims:
        """The same form for a new showing: a new nonce (so a new lead), for ``browser``."""
        return replace(self, nonce=new_nonce(), browser=browser)


def channel_phrase(channels: list[str]) -> str:
    """``e-mail``, ``e-mail or text message``, ``e-mail, phone or text message``."""
    words = [CHANNEL_WORDS.get(c, c) for c in channels]
    return " or ".join(words) if len(words) < 3 else ", ".join(words[:-1]) + " or " + words[-1]


def new_nonce() -> str:
    return secrets.token_urlsafe(16)


def new_browser_id() -> str:
    return secrets.token_urlsafe(18)


def browser_digest(cookie: str) -> str:
    """What a token keeps of the browser cookie (never the cookie itself)."""
    return hashlib.sha256(cookie.encode()).hexdigest()[:32]


def consent_text(template: str, dealer_name: str) -> str:
    """The configured consent text for the dealer receiving the lead (``{dealer}``: its name)."""
    return template.replace("{dealer}", dealer_name)


class _ClockSigner(TimestampSigner):
    """A timestamp signer on the agent's clock (the one the core dates consents with)."""

    def __init__(self, secret: bytes, clock: Callable[[], datetime]) -> None:
        super().__init__(secret, salt="aap-site-contact-form")
        self._clock = clock

    def get_timestamp(self) -> int:
        return int(self._clock().timestamp())


@dataclass(frozen=True)
class ReadToken:
    """A token that carried a valid signature: its claims and when its form was made."""

    claims: FormClaims
    issued: datetime


class FormTokens:
    """Makes and reads form tokens (zlib-compressed JSON, base64url, signed and timestamped)."""

    def __init__(self, secret: bytes, clock: Callable[[], datetime]) -> None:
        self._signer = _ClockSigner(secret, clock)

    def issue(self, claims: FormClaims) -> str:
        packed = zlib.compress(orjson.dumps(claims._pack()), 9)
        return self._signer.sign(base64.urlsafe_b64encode(packed).rstrip(b"=")).decode()

    def read(self, token: object) -> ReadToken | None:
        """The claims of a token this deployment made, or None (absent, altered, not ours)."""
        if not isinstance(token, str) or not token or len(token) > MAX_TOKEN:
            return None
        try:
            value, stamp = self._signer.unsign(token.encode(), return_timestamp=True)
            raw = base64.urlsafe_b64decode(value + b"=" * (-len(value) % 4))
            packed = zlib.decompressobj().decompress(raw, MAX_TOKEN * 4)
            claims = FormClaims._unpack(orjson.loads(packed))
        except (BadSignature, ValueError, zlib.error, orjson.JSONDecodeError):
            return None
        return None if claims is None else ReadToken(claims, stamp)


def same_browser(claims: FormClaims, cookie: str | None) -> bool:
    return bool(cookie) and hmac.compare_digest(claims.browser, browser_digest(cookie or ""))


@dataclass
class ContactValues:
    """What the shopper typed and ticked, as sent (strings trimmed, nothing else changed)."""

    first_name: str = ""
    last_name: str = ""
    email: str = ""
    phone: str = ""
    channels: list[str] = field(default_factory=list)
    preferred: str = ""
    message: str = ""
    honeypot: str = ""

    @classmethod
    def of(cls, form: Mapping[str, Any], channels: list[Any]) -> ContactValues:
        """The values of a posted form (``channels``: every ``channels`` field it carried)."""

        def text(name: str) -> str:
            value = form.get(name)
            return value.strip() if isinstance(value, str) else ""

        message = form.get("message")
        ticked = {c for c in channels if isinstance(c, str)}
        return cls(
            first_name=text("first_name"),
            last_name=text("last_name"),
            email=text("email"),
            phone=text("phone"),
            channels=[code for code, _ in CHANNELS if code in ticked],
            preferred=text("preferred"),
            # browsers send line breaks as CRLF (WHATWG forms); the textarea counted them as one
            message=message.replace("\r\n", "\n").strip() if isinstance(message, str) else "",
            honeypot=text(HONEYPOT_FIELD),
        )


def phone_e164(text: str, region: str) -> str:
    """The number in E.164 when it is a valid one in ``region``'s way of writing; else as typed
    (the core then reports it at ``/customer/phone``, seed 004 ``Customer.phone``)."""
    return to_e164(text, region) or text


def lead_request(values: ContactValues, read: ReadToken, home_url: str) -> dict[str, Any]:
    """The ``lead.submit.request`` of a filled-in form: the same for every submission of one form.

    A blank field is left out (the schema then says what is missing); nothing is invented.
    """
    claims = read.claims
    customer: dict[str, Any] = {}
    for name in ("first_name", "last_name", "email"):
        if getattr(values, name):
            customer[name] = getattr(values, name)
    if values.phone:
        customer["phone"] = phone_e164(values.phone, claims.region)
    if values.preferred:
        customer["preferred_contact"] = values.preferred
    request: dict[str, Any] = {
        "type": "lead.submit.request",
        "customer": customer,
        "consent": {
            "granted_at": to_utc_z(read.issued),
            "allowed_channels": list(values.channels),
            "consent_text": claims.consent_text,
            "scope": ["lead_submission"],
        },
        "source_agent": {"name": SOURCE_AGENT_NAME, "url": home_url},
        "idempotency_key": claims.idempotency_key,
    }
    if claims.vehicle_id:
        request["vehicle_of_interest"] = {"vehicle_id": claims.vehicle_id}
    elif claims.seller_id:
        request["vehicle_of_interest"] = {"dealer_id": claims.seller_id}
    if values.message:
        request["message"] = values.message
    return request


#: The form field each lead location belongs to.
_FIELDS = {
    "/customer/first_name": "first_name",
    "/customer/last_name": "last_name",
    "/customer/email": "email",
    "/customer/phone": "phone",
    "/customer/preferred_contact": "preferred",
    "/consent/allowed_channels": "channels",
    "/message": "message",
    "/customer": "email",
}
#: What the form calls each field (in the summary of problems).
FIELD_LABELS = {
    "first_name": "First name",
    "last_name": "Last name",
    "email": "E-mail",
    "phone": "Phone",
    "channels": "How we may contact you",
    "preferred": "Preferred way",
    "message": "Message",
}


def _words(name: str, keyword: str, error: str, values: ContactValues, dealer: str) -> str:
    """The core's problem at a field, in the words of the form (never quoting what was typed)."""
    if keyword in ("maxLength", "maxValues", "maxItems"):
        if name == "message":
            return f"Shorten the message to {MAX_LENGTHS['message']:,} characters or fewer."
        return "This is longer than the form accepts."
    if name in ("first_name", "last_name") and keyword == "required":
        return f"Enter your {FIELD_LABELS[name].lower()}."
    if name == "email":
        if keyword == "format":
            return "Enter an e-mail address like name@example.com."
        if "one of email or phone" in error:
            return "Enter an e-mail address or a phone number (or both)."
        if keyword == "required":
            return "Enter your e-mail address, or untick E-mail below."
    if name == "phone":
        if keyword == "pattern":
            return "Enter a phone number with its area code."
        if keyword == "required":
            return "Enter your phone number, or untick Phone call and Text message below."
    if name == "channels" and keyword == "minItems":
        return f"Tick at least one way {dealer} may contact you."
    if name == "preferred":
        if keyword == "contains":
            preferred = CHANNEL_LABELS.get(values.preferred, values.preferred)
            return f"Tick {preferred} above too, or choose another preference."
        return "Choose one of the listed preferences."
    return error[:1].upper() + error[1:] + ("" if error.endswith(".") else ".")


@dataclass
class Problems:
    """The problems of one submission: by field (shown next to it), and of the form as a whole."""

    fields: dict[str, list[str]] = field(default_factory=dict)
    form: list[str] = field(default_factory=list)

    def add(self, name: str, text: str) -> None:
        self.fields.setdefault(name, [])
        if text not in self.fields[name]:
            self.fields[name].append(text)

    def __bool__(self) -> bool:
        return bool(self.fields or self.form)

    @property
    def summary(self) -> list[tuple[str | None, str]]:
        """``(field or None, text)`` for the list at the top of the form, in the form's order."""
        out: list[tuple[str | None, str]] = [(None, text) for text in self.form]
        out += [(name, text) for name in FIELD_LABELS for text in self.fields.get(name, [])]
        return out


def problems_of(error: AapError, values: ContactValues, dealer: str) -> Problems:
    """Every problem the core found (``details.errors[]``), each at its field."""
    found = Problems()
    items = list(error.errors)
    if any(
        i.get("instanceLocation") in ("/customer/email", "/customer/phone") and i.get("keyword") == "required"
        for i in items
    ):
        # a ticked channel without its contact field says more than "one of email or phone"
        items = [i for i in items if i.get("instanceLocation") != "/customer"]
    for item in items:
        location = str(item.get("instanceLocation", ""))
        keyword = str(item.get("keyword", ""))
        text = str(item.get("error", ""))
        name = _FIELDS.get(location)
        if location == "/consent/allowed_channels" and keyword == "contains":
            name = "preferred"
        if name is None and location.startswith("/customer/"):
            name = _FIELDS.get("/customer/" + location.split("/")[2])
        if name is None:
            found.form.append("This form could not be sent as it is; please send it again.")
            continue
        found.add(name, _words(name, keyword, text, values, dealer))
    if not found:
        found.form.append(error.message)
    found.form = list(dict.fromkeys(found.form))
    return found
