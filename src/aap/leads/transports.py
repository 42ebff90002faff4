"""Sending one lead to one target: ADF over HTTP POST, ADF by SMTP, JSON webhook.

Every send carries the lead id so a CRM can drop a duplicate after a crash
(the worker may resend a lead whose first send it could not record): HTTP
sends ``Idempotency-Key: <lead_id>`` and ``X-AAP-Lead-Id``, e-mail a
``Message-ID`` derived from lead and target plus ``X-AAP-Lead-Id``, and the ADF
document itself an ``<id source="AAP ...">`` element.

A send either returns (delivered) or raises :class:`SendError` saying whether a
retry can help, and whether the attempt may have reached the CRM: the request
was sent and its answer was lost or ambiguous (docs/leads.md, "Resend"). A
refused connection, a DNS or TLS failure, a connect or pool timeout, an SMTP
refusal before the message data and an answer that says "not processed" (408,
425, 429) never reached it. Error texts name status codes and exception types
only, never a response body or customer value.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import smtplib
import ssl
import time
from collections.abc import Generator
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

import httpx
import orjson

from aap.config.leads import AdfHttpTarget, HttpAuth, SmtpTarget, Target, WebhookTarget

USER_AGENT = "aap-lead-delivery/1"
_RETRYABLE_STATUS = {408, 425, 429}
#: Answers saying the request was not processed: the CRM does not have the lead.
_NOT_PROCESSED_STATUS = {408, 425, 429}
#: httpx failures raised before the request left: nothing reached the CRM (DNS and TLS
#: failures are ConnectErrors: they happen while connecting).
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol, httpx.InvalidURL)


class SendError(Exception):
    """A failed send; ``permanent`` ones go straight to the dead-letter state.

    ``reached``: the attempt may have reached the CRM (sent, answer lost or ambiguous);
    the next attempt is then flagged as a resend.
    """

    def __init__(self, message: str, *, permanent: bool = False, reached: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent
        self.reached = reached


def _env(name: str | None, what: str) -> str:
    value = os.environ.get(name or "")
    if not value:
        raise SendError(f"environment variable {name} ({what}) is not set")
    return value


def _auth(auth: HttpAuth | None) -> httpx.Auth | None:
    if auth is None:
        return None
    if auth.kind == "basic":
        return httpx.BasicAuth(_env(auth.username_env, "username"), _env(auth.password_env, "password"))
    return _Bearer(_env(auth.token_env, "bearer token"))


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


async def _post(
    client: httpx.AsyncClient, url: str, body: bytes, headers: dict[str, str], auth: httpx.Auth | None, timeout: float
) -> None:
    try:
        response = await client.post(
            url, content=body, headers=headers, timeout=timeout, auth=httpx.USE_CLIENT_DEFAULT if auth is None else auth
        )  # the worker's client has none
    except httpx.HTTPError as exc:
        raise SendError(f"{type(exc).__name__} while posting", reached=not isinstance(exc, _NOT_SENT)) from None
    if 200 <= response.status_code < 300:
        return
    status = response.status_code
    permanent = 400 <= status < 500 and status not in _RETRYABLE_STATUS
    raise SendError(f"HTTP {status}", permanent=permanent, reached=status not in _NOT_PROCESSED_STATUS)


async def send_adf_http(
    client: httpx.AsyncClient, target: AdfHttpTarget, adf: str, lead_id: str, delivery_id: str, timeout: float
) -> None:
    headers = dict(target.headers)
    headers.update(lead_headers(lead_id, delivery_id))
    headers["Content-Type"] = target.content_type
    await _post(client, target.url, adf.encode("utf-8"), headers, _auth(target.auth), timeout)


def webhook_signature(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256(secret, ``"<timestamp>." + body``)."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


async def send_webhook(
    client: httpx.AsyncClient,
    target: WebhookTarget,
    document: dict[str, Any],
    lead_id: str,
    delivery_id: str,
    timeout: float,
) -> None:
    body = orjson.dumps(document)
    headers = dict(target.headers)
    headers.update(lead_headers(lead_id, delivery_id))
    headers["Content-Type"] = "application/json"
    if target.secret_env:
        stamp = str(int(time.time()))
        headers["X-AAP-Timestamp"] = stamp
        headers["X-AAP-Signature"] = webhook_signature(_env(target.secret_env, "webhook secret"), stamp, body)
    await _post(client, target.url, body, headers, None, timeout)


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


def _smtp_send(target: SmtpTarget, message: EmailMessage, timeout: float) -> None:
    context = ssl.create_default_context()
    user = password = None
    if target.username_env:
        user = _env(target.username_env, "SMTP username")
        password = _env(target.password_env, "SMTP password")
    sending = False  # True once the message itself is on its way: a failure then is ambiguous
    try:
        if target.ssl:
            server: smtplib.SMTP = smtplib.SMTP_SSL(target.host, target.port, timeout=timeout, context=context)
        else:
            server = smtplib.SMTP(target.host, target.port, timeout=timeout)
        with server:
            server.ehlo()
            if target.starttls:
                server.starttls(context=context)
                server.ehlo()
            if user is not None:
                server.login(user, password or "")
            sending = True
            server.send_message(message, from_addr=target.sender, to_addrs=list(target.to))
    except smtplib.SMTPRecipientsRefused as exc:  # before DATA: the server never took the message
        codes = sorted({code for code, _ in exc.recipients.values()})
        raise SendError(f"SMTP recipients refused ({codes})", permanent=all(500 <= c < 600 for c in codes)) from None
    except smtplib.SMTPAuthenticationError as exc:
        raise SendError(f"SMTP authentication failed ({exc.smtp_code})") from None
    except smtplib.SMTPResponseException as exc:  # a definite refusal, of the envelope or the data
        raise SendError(f"SMTP error {exc.smtp_code}", permanent=500 <= exc.smtp_code < 600) from None
    except (smtplib.SMTPException, OSError) as exc:  # a lost connection: ambiguous once sending
        raise SendError(f"{type(exc).__name__} talking to the SMTP server", reached=sending) from None


async def send_email(target: SmtpTarget, message: EmailMessage, timeout: float) -> None:
    """Send a prepared message to ``target.to`` through its SMTP server (the lead notifications)."""
    await asyncio.to_thread(_smtp_send, target, message, timeout)


async def send_smtp(
    target: SmtpTarget, adf: str, lead_id: str, delivery_id: str, subject_suffix: str, timeout: float
) -> None:
    await send_email(target, build_email(target, adf, lead_id, delivery_id, subject_suffix), timeout)


async def send(
    client: httpx.AsyncClient,
    target: Target,
    *,
    adf: str,
    document: dict[str, Any],
    lead_id: str,
    delivery_id: str,
    subject_suffix: str,
    timeout: float,
) -> None:
    """Dispatch on the target type."""
    if isinstance(target, AdfHttpTarget):
        await send_adf_http(client, target, adf, lead_id, delivery_id, timeout)
    elif isinstance(target, SmtpTarget):
        await send_smtp(target, adf, lead_id, delivery_id, subject_suffix, timeout)
    elif isinstance(target, WebhookTarget):
        await send_webhook(client, target, document, lead_id, delivery_id, timeout)
    else:
        raise SendError(f"unknown target type {type(target).__name__}", permanent=True)
