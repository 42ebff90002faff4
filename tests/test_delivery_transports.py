"""Transports against real local servers: an HTTP receiver and an aiosmtpd SMTP server."""

from __future__ import annotations

import email
import email.policy
import hashlib
import hmac
import xml.etree.ElementTree as ET
from typing import get_args

import httpx
import orjson
import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword

from aap.config.leads import AdfHttpTarget, HttpAuth, SmtpTarget, Target, WebhookTarget
from aap.leads import transports
from aap.leads.transports import TRANSPORTS
from aap.work import Work
from lead_support import free_port

#: The door for blocking work these tests' SMTP sessions are given.
WORK = Work.for_database(True)

ADF = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<?adf version="1.0"?>\n<adf><prospect status="new">'
    '<id sequence="1" source="AAP t">lead_1</id><requestdate>2026-03-02T17:00:00Z</requestdate>'
    "</prospect></adf>\n"
)


async def send_adf(target: SmtpTarget, subject_suffix: str, timeout: float) -> None:
    """lead_1's ADF document e-mailed as the SMTP transport sends it."""
    email = transports.build_email(target, ADF, "lead_1", "dlv_1", subject_suffix)
    await transports.send_email(target, email, timeout, work=WORK)


@pytest.mark.slow
async def test_adf_over_http_carries_the_lead_id_and_auth(receiver, monkeypatch):
    monkeypatch.setenv("CRM_TOKEN", "s3cret-token")
    target = AdfHttpTarget("crm", receiver.url, (("X-Dealer", "bay"),), HttpAuth("bearer", token_env="CRM_TOKEN"))
    async with httpx.AsyncClient() as client:
        await transports.send_adf_http(client, target, ADF, "lead_1", "dlv_1", 5)
    (got,) = receiver.requests
    headers = {k.lower(): v for k, v in got["headers"].items()}
    assert headers["content-type"] == "application/x-adf+xml; charset=utf-8"
    assert headers["idempotency-key"] == "lead_1" and headers["x-aap-lead-id"] == "lead_1"
    assert headers["x-aap-delivery-id"] == "dlv_1"
    assert headers["authorization"] == "Bearer s3cret-token"
    assert headers["x-dealer"] == "bay"
    assert ET.fromstring(got["body"]).findtext("prospect/id") == "lead_1"


@pytest.mark.slow
async def test_basic_auth_and_missing_secret(receiver, monkeypatch):
    monkeypatch.setenv("CRM_USER", "bay")
    monkeypatch.setenv("CRM_PASSWORD", "pw")
    target = AdfHttpTarget(
        "crm", receiver.url, auth=HttpAuth("basic", username_env="CRM_USER", password_env="CRM_PASSWORD")
    )
    async with httpx.AsyncClient() as client:
        await transports.send_adf_http(client, target, ADF, "lead_1", "dlv_1", 5)
        assert receiver.requests[0]["headers"]["Authorization"] == "Basic YmF5OnB3"
        monkeypatch.delenv("CRM_PASSWORD")
        with pytest.raises(transports.SendError) as caught:
            await transports.send_adf_http(client, target, ADF, "lead_1", "dlv_1", 5)
    assert "CRM_PASSWORD" in str(caught.value) and not caught.value.permanent


@pytest.mark.slow
@pytest.mark.parametrize(
    ("status", "permanent"),
    [(503, False), (500, False), (429, False), (408, False), (400, True), (401, True), (404, True)],
)
async def test_http_failures_say_whether_a_retry_can_help(receiver, status, permanent):
    receiver.status = status
    async with httpx.AsyncClient() as client:
        with pytest.raises(transports.SendError) as caught:
            await transports.send_adf_http(client, AdfHttpTarget("crm", receiver.url), ADF, "lead_1", "d", 5)
    assert caught.value.permanent is permanent
    assert str(caught.value) == f"HTTP {status}"


async def test_unreachable_endpoint_is_retryable():
    target = AdfHttpTarget("crm", f"http://127.0.0.1:{free_port()}/adf")
    async with httpx.AsyncClient() as client:
        with pytest.raises(transports.SendError) as caught:
            await transports.send_adf_http(client, target, ADF, "lead_1", "d", 2)
    assert not caught.value.permanent and "ConnectError" in str(caught.value)


@pytest.mark.slow
async def test_webhook_is_json_signed_with_hmac(receiver, monkeypatch):
    monkeypatch.setenv("HOOK_SECRET", "whsec")
    target = WebhookTarget("hook", receiver.url, secret_env="HOOK_SECRET")
    document = {"type": "aap.lead", "lead_id": "lead_1", "note": "ünïcode <&>"}
    async with httpx.AsyncClient() as client:
        await transports.send_webhook(client, target, document, "lead_1", "dlv_1", 5)
    (got,) = receiver.requests
    assert orjson.loads(got["body"]) == document
    stamp = got["headers"]["X-AAP-Timestamp"]
    expected = hmac.new(b"whsec", stamp.encode() + b"." + got["body"], hashlib.sha256).hexdigest()
    assert got["headers"]["X-AAP-Signature"] == "sha256=" + expected
    assert got["headers"]["Content-Type"] == "application/json"
    assert got["headers"]["Idempotency-Key"] == "lead_1"


def test_every_kind_of_target_has_one_transport():
    assert set(TRANSPORTS) == set(get_args(Target))
    for kind in (AdfHttpTarget("a", "http://127.0.0.1/"), WebhookTarget("w", "http://127.0.0.1/")):
        assert transports.transport(kind) is TRANSPORTS[type(kind)]


@pytest.mark.slow
async def test_the_payload_kept_is_the_body_sent(receiver):
    lead = transports.Outgoing(ADF, {"type": "aap.lead", "note": "ünïcode <&>"}, "lead_1", "dlv_1", "")
    targets = (AdfHttpTarget("crm", receiver.url), WebhookTarget("hook", receiver.url))
    async with httpx.AsyncClient() as client:
        for target in targets:
            await transports.transport(target).send(target, lead, transports.Via(client, 5, WORK))
    for target, got in zip(targets, receiver.requests, strict=True):
        content_type, body = transports.transport(target).payload(target, lead)
        assert (got["headers"]["Content-Type"], got["body"]) == (content_type, body.encode())


# -- SMTP ---------------------------------------------------------------------------------


class Inbox:
    def __init__(self, refuse: bool = False) -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []
        self.refuse = refuse

    async def handle_RCPT(self, server, session, envelope, address, rcpt_options):  # noqa: N802
        if self.refuse:
            return "550 5.1.1 mailbox unavailable"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server, session, envelope):  # noqa: N802
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 Message accepted"


def authenticator(server, session, envelope, mechanism, auth_data):
    ok = isinstance(auth_data, LoginPassword) and auth_data.login == b"bay" and auth_data.password == b"pw"
    return AuthResult(success=ok, handled=False)


@pytest.fixture
def smtp_server():
    started = []

    def start(inbox: Inbox, **kwargs) -> int:
        port = free_port()
        controller = Controller(inbox, hostname="127.0.0.1", port=port, **kwargs)
        controller.start()
        started.append(controller)
        return port

    yield start
    for controller in started:
        controller.stop()


def smtp_target(port: int, **kw) -> SmtpTarget:
    values = dict(
        name="mail",
        host="127.0.0.1",
        sender="aap@dealer.example",
        to=("leads@dealer.example",),
        port=port,
        starttls=False,
    )
    values.update(kw)
    return SmtpTarget(**values)


async def test_smtp_delivers_the_adf_document_with_a_stable_message_id(smtp_server):
    inbox = Inbox()
    port = smtp_server(inbox)
    target = smtp_target(port)
    await send_adf(target, "lead_1 (Bay Motors)", 5)
    ((mail_from, rcpt, content),) = inbox.messages
    assert mail_from == "aap@dealer.example" and rcpt == ["leads@dealer.example"]
    message = email.message_from_bytes(content, policy=email.policy.default)
    assert message["X-AAP-Lead-Id"] == "lead_1"
    assert message["Subject"] == "New AAP lead lead_1 (Bay Motors)"
    assert message["Message-ID"].startswith("<lead_1.") and message["Message-ID"].endswith("@dealer.example>")
    assert message.get_content_type() == "text/plain"
    body = message.get_content()
    assert ET.fromstring(body.encode()).findtext("prospect/id") == "lead_1"
    # The same lead to the same target always gets the same Message-ID (duplicate detection).
    again = transports.build_email(target, ADF, "lead_1", "dlv_2", "")
    assert again["Message-ID"] == message["Message-ID"]


async def test_smtp_login_with_credentials_from_the_environment(smtp_server, monkeypatch):
    inbox = Inbox()
    port = smtp_server(inbox, authenticator=authenticator, auth_require_tls=False)
    monkeypatch.setenv("SMTP_USER", "bay")
    monkeypatch.setenv("SMTP_PASSWORD", "pw")
    await send_adf(smtp_target(port, username_env="SMTP_USER", password_env="SMTP_PASSWORD"), "", 5)
    assert len(inbox.messages) == 1
    monkeypatch.setenv("SMTP_PASSWORD", "wrong")
    with pytest.raises(transports.SendError) as caught:
        await send_adf(smtp_target(port, username_env="SMTP_USER", password_env="SMTP_PASSWORD"), "", 5)
    assert "authentication failed" in str(caught.value)


async def test_smtp_refused_recipient_is_permanent_and_down_server_is_not(smtp_server):
    port = smtp_server(Inbox(refuse=True))
    with pytest.raises(transports.SendError) as caught:
        await send_adf(smtp_target(port), "", 5)
    assert caught.value.permanent
    with pytest.raises(transports.SendError) as caught:
        await send_adf(smtp_target(free_port()), "", 2)
    assert not caught.value.permanent
