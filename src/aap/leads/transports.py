"""Sending one lead to one target: ADF over HTTP POST, ADF by SMTP, JSON webhook.

Every send carries the lead id so a CRM can drop a duplicate after a crash
(the worker may resend a lead whose first send it could not record): HTTP
sends ``Idempotency-Key: <lead_id>`` and ``X-AAP-Lead-Id``, e-mail a
``Message-ID`` derived from lead and target plus ``X-AAP-Lead-Id``, and the ADF
document itself an ``<id source="AAP ...">`` element.

A send either returns (delivered) or raises :class:`SendError` saying whether a
retry can help, and whether the attempt may have been accepted by the CRM
(docs/leads.md §8, the resend rule): the whole request was sent and its answer was lost or
ambiguous (a read timeout, a connection lost after the body was sent, a 5xx
answer, a 409 saying the CRM holds a request under this ``Idempotency-Key``, an
SMTP session lost once the message data started). Nothing sent, or a definite
answer that the lead was not taken (a refused connection, a DNS or TLS failure, a
connect, pool or write timeout, a connection lost while the body was still being
written, any other 4xx or a 3xx answer, an SMTP refusal), never was. Error texts
name status codes and exception types only, never a response body or customer
value.

Every connection goes where the deployment's outbound policy allows (:mod:`aap.netguard`,
``Settings.outbound``): the HTTP client's pool vets each resolved address and the socket's
peer (:func:`delivery_client`), and an SMTP session connects to an address vetted the same
way. A destination refused by the policy is a permanent failure: no retry can change it
until the configuration does.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import smtplib
import socket
import ssl
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

import httpcore
import httpx
import orjson

from aap.config.credentials import Credential, SecretValues
from aap.config.leads import AdfHttpTarget, HttpAuth, SmtpTarget, Target, WebhookTarget
from aap.netguard import (
    LOCAL,
    Reach,
    RefusedAddress,
    Resolve,
    connect_socket,
    guarded_transport,
    refused_cause,
    vetted_addresses,
)
from aap.work import Work

USER_AGENT = "aap-lead-delivery/1"
T = TypeVar("T", contravariant=True)
#: Answers saying the request was not processed, and that it may succeed later (RFC 9110
#: §15.5.9 408, RFC 8470 §5.2 425, RFC 6585 §4 429): retried, the CRM does not have the lead.
_NOT_PROCESSED_STATUS = frozenset({408, 425, 429})
#: 409 Conflict: the CRM holds (or is still processing) a request with this ``Idempotency-Key``
#: (the Idempotency-Key header draft's answer to a concurrent duplicate): retried, as a resend.
_CONFLICT_STATUS = 409
#: httpx failures raised before the whole request left: the CRM cannot have accepted it. DNS and
#: TLS failures are ConnectErrors (they happen while connecting); a write error or timeout stops
#: the body part way, and a receiver acts on a complete request only.
_NOT_SENT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.WriteError,
    httpx.WriteTimeout,
    httpx.LocalProtocolError,
    httpx.UnsupportedProtocol,
    httpx.InvalidURL,
)


class SendError(Exception):
    """A failed send; ``permanent`` ones go straight to the dead-letter state.

    ``reached``: the attempt may have reached the CRM (sent, answer lost or ambiguous);
    the next attempt is then flagged as a resend.
    """

    def __init__(self, message: str, *, permanent: bool = False, reached: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.reached = reached


def delivery_client(reach: Reach, resolve: Resolve | None = None) -> httpx.AsyncClient:
    """The delivery worker's HTTP client: every connection within ``reach`` (:mod:`aap.netguard`).

    A deployment that is one agent (:data:`aap.netguard.LOCAL`) keeps proxies from the
    environment (``HTTPS_PROXY``), as before; for anything narrower (a platform's tenants) the
    guard must see the destination itself, so no proxy is used."""
    headers = {"User-Agent": USER_AGENT}
    transport = guarded_transport(reach, max_connections=100, resolve=resolve)
    if reach == LOCAL:
        return httpx.AsyncClient(headers=headers, transport=transport, trust_env=True)
    return httpx.AsyncClient(headers=headers, transport=transport, trust_env=False)


def _refused(exc: RefusedAddress) -> SendError:
    return SendError(f"{exc.host} resolves to {exc.why} ({exc.address}); refused", permanent=True)


#: No tenant secrets: a deployment that is one agent names environment variables only.
NO_SECRETS = SecretValues()


def _value(credential: Credential, what: str, secrets: SecretValues) -> str:
    """The value of a secret the configuration names: a platform tenant's secret (read when its
    worker built it) or an environment variable of this process (read now)."""
    if credential.secret is not None:
        found = secrets.get(credential.secret)
        if not found:
            raise SendError(f"{secrets.missing(credential.secret)} ({what})")
        return found
    value = os.environ.get(credential.env or "")
    if not value:
        raise SendError(f"environment variable {credential.env} ({what}) is not set")
    return value


def _auth(auth: HttpAuth | None, secrets: SecretValues) -> httpx.Auth | None:
    if auth is None:
        return None
    named = dict(auth.credentials())  # by stem: username, password, token
    if auth.kind == "basic":
        return httpx.BasicAuth(
            _value(named["username"], "username", secrets), _value(named["password"], "password", secrets)
        )
    return _Bearer(_value(named["token"], "bearer token", secrets))


class _Bearer(httpx.Auth):
    """``Authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self.token = token

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.token}"
        yield request


def lead_headers(lead_id: str, delivery_id: str) -> dict[str, str]:
    return {
        "Idempotency-Key": lead_id,
        "X-AAP-Lead-Id": lead_id,
        "X-AAP-Delivery-Id": delivery_id,
        "User-Agent": USER_AGENT,
    }


async def post(
    client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], auth: httpx.Auth | None, timeout: float
) -> None:
    try:
        response = await client.post(
            url, content=body, headers=headers, timeout=timeout, auth=httpx.USE_CLIENT_DEFAULT if auth is None else auth
        )  # the worker's client has none
    except httpx.HTTPError as exc:
        refused = refused_cause(exc)
        if refused is not None:
            raise _refused(refused) from None
        raise SendError(f"{type(exc).__name__} while posting", reached=not isinstance(exc, _NOT_SENT)) from None
    if 200 <= response.status_code < 300:
        return
    raise refusal(response.status_code)


def refusal(status: int) -> SendError:
    """What a non-2xx answer means for the lead: retry or not, and whether the CRM may have it.

    5xx: the CRM failed while handling the request, so it may have stored the lead (retried, as a
    resend). 408/425/429: not processed, retried as new. 409: a request with this lead id is held
    already (retried, as a resend). Any other 4xx is a definite refusal (a bad URL, an expired
    token, a rejected document): no retry can help and the CRM does not have the lead, so an
    operator's ``aap leads retry`` after the fix sends it as new. A 3xx is not followed (a lead is
    posted to the configured URL only) and is a refusal too.
    """
    if status >= 500:
        return SendError(f"HTTP {status}", reached=True)
    if status in _NOT_PROCESSED_STATUS:
        return SendError(f"HTTP {status}")
    if status == _CONFLICT_STATUS:
        return SendError(f"HTTP {status}", reached=True)
    if 300 <= status < 500:
        return SendError(f"HTTP {status}", permanent=True)
    return SendError(f"HTTP {status}", reached=True)  # an answer outside HTTP's classes: ambiguous


async def send_adf_http(
    client: httpx.AsyncClient,
    target: AdfHttpTarget,
    adf: str,
    lead_id: str,
    delivery_id: str,
    timeout: float,
    secrets: SecretValues = NO_SECRETS,
) -> None:
    headers = dict(target.headers)
    headers.update(lead_headers(lead_id, delivery_id))
    headers["Content-Type"] = target.content_type
    await post(client, target.url, adf.encode("utf-8"), headers, _auth(target.auth, secrets), timeout)


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256(secret, ``"<timestamp>." + body``)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def signature_headers(secret: str, body: bytes) -> dict[str, str]:
    """``X-AAP-Timestamp`` (now, in seconds since the epoch) and ``X-AAP-Signature`` of ``body``:
    how every JSON document the deployment posts is signed (lead webhooks, platform events;
    the webhook row of docs/leads.md)."""
    stamp = str(int(time.time()))
    return {"X-AAP-Timestamp": stamp, "X-AAP-Signature": webhook_signature(secret, stamp, body)}


async def send_webhook(
    client: httpx.AsyncClient,
    target: WebhookTarget,
    document: dict[str, Any],
    lead_id: str,
    delivery_id: str,
    timeout: float,
    secrets: SecretValues = NO_SECRETS,
) -> None:
    body = orjson.dumps(document)
    headers = dict(target.headers)
    headers.update(lead_headers(lead_id, delivery_id))
    headers["Content-Type"] = "application/json"
    ((_, secret),) = target.credentials()
    if secret:
        headers.update(signature_headers(_value(secret, "webhook secret", secrets), body))
    await post(client, target.url, body, headers, None, timeout)


def build_email(target: SmtpTarget, adf: str, lead_id: str, delivery_id: str, subject_suffix: str) -> EmailMessage:
    """A text/plain message whose body is the ADF document (what CRM lead parsers read)."""
    message = EmailMessage()
    message["From"] = target.sender
    message["To"] = ", ".join(target.to)
    message["Subject"] = f"{target.subject} {subject_suffix}".strip()
    message["Date"] = formatdate(localtime=False, usegmt=True)
    domain = target.sender.rsplit("@", 1)[-1]
    digest = hashlib.sha256(f"{lead_id}\x1f{target.name}".encode()).hexdigest()[:16]
    message["Message-ID"] = f"<{lead_id}.{digest}@{domain}>"
    message["X-AAP-Lead-Id"] = lead_id
    message["X-AAP-Delivery-Id"] = delivery_id
    message.set_content(adf, subtype="plain", charset="utf-8")
    return message


@dataclass(frozen=True)
class _Vetted:
    """Where an SMTP session may connect: the addresses its host resolved to, all within ``reach``."""

    addresses: tuple[str, ...]
    reach: Reach


class _Session(smtplib.SMTP):
    """An SMTP session that knows whether the message data has started (``data_started``) and
    connects only to vetted addresses (STARTTLS still verifies the host's name)."""

    data_started = False

    def __init__(self, host: str, port: int, *, timeout: float, vetted: _Vetted) -> None:
        self.vetted = vetted
        super().__init__(host, port, timeout=timeout)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        return connect_socket(host, self.vetted.addresses, port, timeout, self.vetted.reach)

    def data(self, msg: Any) -> tuple[int, bytes]:
        self.data_started = True  # from here on a lost session is ambiguous: the server may queue it
        return super().data(msg)


class _TlsSession(smtplib.SMTP_SSL):
    """:class:`_Session` over implicit TLS (port 465), the certificate checked for the host's name."""

    data_started = False

    def __init__(self, host: str, port: int, *, timeout: float, context: ssl.SSLContext, vetted: _Vetted) -> None:
        self.vetted = vetted
        super().__init__(host, port, timeout=timeout, context=context)

    def _get_socket(self, host: str, port: int, timeout: float) -> socket.socket:
        sock = connect_socket(host, self.vetted.addresses, port, timeout, self.vetted.reach)
        return self.context.wrap_socket(sock, server_hostname=host)

    def data(self, msg: Any) -> tuple[int, bytes]:
        self.data_started = True
        return super().data(msg)


def _smtp_login(target: SmtpTarget, secrets: SecretValues) -> tuple[str, str] | None:
    """The SMTP user name and password, when the target names them."""
    named = dict(target.credentials())
    if not named["username"]:
        return None
    return _value(named["username"], "SMTP username", secrets), _value(named["password"], "SMTP password", secrets)


def _smtp_send(
    target: SmtpTarget, message: EmailMessage, timeout: float, vetted: _Vetted, login: tuple[str, str] | None
) -> None:
    context = ssl.create_default_context()
    server: _Session | _TlsSession | None = None
    try:
        if target.ssl:
            server = _TlsSession(target.host, target.port, timeout=timeout, context=context, vetted=vetted)
        else:
            server = _Session(target.host, target.port, timeout=timeout, vetted=vetted)
        with server:
            server.ehlo()
            if target.starttls:
                server.starttls(context=context)
                server.ehlo()
            if login is not None:
                server.login(*login)
            server.send_message(message, from_addr=target.sender, to_addrs=list(target.to))
    except RefusedAddress as exc:  # the socket's peer was not a vetted address
        raise _refused(exc) from None
    except smtplib.SMTPRecipientsRefused as exc:  # before DATA: the server never took the message
        codes = sorted({code for code, _ in exc.recipients.values()})
        raise SendError(f"SMTP recipients refused ({codes})", permanent=all(500 <= c < 600 for c in codes)) from None
    except smtplib.SMTPAuthenticationError as exc:
        raise SendError(f"SMTP authentication failed ({exc.smtp_code})") from None
    except smtplib.SMTPResponseException as exc:  # a definite refusal, of the envelope or the data
        raise SendError(f"SMTP error {exc.smtp_code}", permanent=500 <= exc.smtp_code < 600) from None
    except (smtplib.SMTPException, OSError) as exc:  # a lost session: ambiguous once the data started
        sent = server is not None and server.data_started
        raise SendError(f"{type(exc).__name__} talking to the SMTP server", reached=sent) from None


async def send_email(
    target: SmtpTarget,
    message: EmailMessage,
    timeout: float,
    reach: Reach = LOCAL,
    resolve: Resolve | None = None,
    secrets: SecretValues = NO_SECRETS,
    *,
    work: Work,
) -> None:
    """Send a prepared message to ``target.to`` through its SMTP server (the lead notifications),
    connecting only to an address within ``reach``: the name is resolved and vetted here, the
    session (``smtplib``, blocking: on ``work``'s executor of long calls) connects to those
    addresses and vets its socket's peer again."""
    login = _smtp_login(target, secrets)
    try:
        addresses = await vetted_addresses(target.host, target.port, reach, resolve)
    except RefusedAddress as exc:
        raise _refused(exc) from None
    except httpcore.ConnectError:
        raise SendError("the SMTP server's name could not be resolved") from None
    await work.long(_smtp_send, target, message, timeout, _Vetted(tuple(addresses), reach), login)


@dataclass(frozen=True)
class Outgoing:
    """One lead as every kind of target is sent it: the ADF document, the JSON webhook document
    (:meth:`aap.leads.worker.DeliveryWorker.document`), its ids and the e-mail subject's suffix."""

    adf: str
    document: dict[str, Any]
    lead_id: str
    delivery_id: str
    subject_suffix: str


@dataclass(frozen=True)
class Via:
    """What a send goes through: HTTP on ``client`` (built with the same ``reach``), an SMTP
    session connecting within ``reach`` on ``work``'s executor of long calls."""

    client: httpx.AsyncClient
    timeout: float
    work: Work
    reach: Reach = LOCAL
    resolve: Resolve | None = None
    #: A platform tenant's secrets (``Settings.secrets``), named by the targets' ``X_secret`` keys.
    secrets: SecretValues = NO_SECRETS


class Transport(Protocol[T]):
    """How one kind of target is sent a lead (docs/leads.md): what it is sent, and the send."""

    def payload(self, target: T, lead: Outgoing) -> tuple[str, str]:
        """``(content type, body)``: the bytes the send carries, kept with the attempt for the console."""
        ...

    async def send(self, target: T, lead: Outgoing, via: Via) -> None:
        """Deliver, or raise :class:`SendError`."""
        ...


class AdfOverHttp:
    """The ADF document POSTed to a CRM endpoint (:func:`send_adf_http`)."""

    def payload(self, target: AdfHttpTarget, lead: Outgoing) -> tuple[str, str]:
        return target.content_type, lead.adf

    async def send(self, target: AdfHttpTarget, lead: Outgoing, via: Via) -> None:
        await send_adf_http(via.client, target, lead.adf, lead.lead_id, lead.delivery_id, via.timeout, via.secrets)


class AdfByEmail:
    """The ADF document as the body of a text/plain message (:func:`build_email`, :func:`send_email`)."""

    def payload(self, target: SmtpTarget, lead: Outgoing) -> tuple[str, str]:
        return "text/plain; charset=utf-8", lead.adf

    async def send(self, target: SmtpTarget, lead: Outgoing, via: Via) -> None:
        email = build_email(target, lead.adf, lead.lead_id, lead.delivery_id, lead.subject_suffix)
        await send_email(target, email, via.timeout, via.reach, via.resolve, via.secrets, work=via.work)


class JsonWebhook:
    """The AAP lead as JSON, signed when the target has a secret (:func:`send_webhook`)."""

    def payload(self, target: WebhookTarget, lead: Outgoing) -> tuple[str, str]:
        return "application/json", orjson.dumps(lead.document).decode()

    async def send(self, target: WebhookTarget, lead: Outgoing, via: Via) -> None:
        await send_webhook(via.client, target, lead.document, lead.lead_id, lead.delivery_id, via.timeout, via.secrets)


#: The transport of each kind of target: the one place a target's type chooses how it is sent.
TRANSPORTS: Mapping[type, Transport[Any]] = MappingProxyType(
    {AdfHttpTarget: AdfOverHttp(), SmtpTarget: AdfByEmail(), WebhookTarget: JsonWebhook()}
)


def transport(target: Target) -> Transport[Any]:
    """The transport that sends ``target`` (a permanent failure for a kind with none)."""
    found = TRANSPORTS.get(type(target))
    if found is None:
        raise SendError(f"unknown target type {type(target).__name__}", permanent=True)
    return found
