"""``<prospect status="resend">`` (and the webhook's ``resend``) only when an earlier attempt may have
been accepted by the CRM (docs/leads.md §8, the resend rule).

May have been accepted: the whole request was sent and its answer was lost or ambiguous (a read
timeout, a connection closed after the body was sent, a 5xx answer, a 409 for a request held under
the lead id), an SMTP session lost once the message data started, a worker killed while sending,
or the operator resending a delivered lead. Never: a refused connection, a DNS or TLS failure, a
connect, pool or write timeout, a connection lost while the body was being written, an SMTP
refusal, a "not processed" answer (408, 425, 429) or a definite refusal (any other 4xx, a 3xx).
"""

from __future__ import annotations

import socketserver
import threading
import xml.etree.ElementTree as ET
from datetime import timedelta

import httpx
import orjson
import pytest

from aap.config.leads import AdfHttpTarget, DeliverySettings, Route, SmtpTarget, WebhookTarget
from aap.leads import transports
from aap.leads.operations import retry_deliveries
from aap.leads.worker import DeliveryWorker
from aap.util.rfc3339 import epoch_ms
from aap.work import Work
from lead_support import NOW, Receiver, free_port, http_route, lead_settings
from test_outbox import Clock, deliveries, make_agent, once, submit  # noqa: F401 (fixture)

#: The door for blocking work these tests' workers and schedulers are given.
WORK = Work.for_database(True)

ADF = "<?xml version='1.0'?><adf/>"


async def send_adf(target: SmtpTarget, subject_suffix: str, timeout: float) -> None:
    """lead_1's ADF document e-mailed as the SMTP transport sends it."""
    email = transports.build_email(target, ADF, "lead_1", "dlv_1", subject_suffix)
    await transports.send_email(target, email, timeout, work=WORK)


def prospect_status(request: dict) -> str:
    return ET.fromstring(request["body"]).find("prospect").get("status")


def worker_for(agent, clock: Clock) -> DeliveryWorker:
    return DeliveryWorker(agent.stores.leads, agent.settings, clock=clock, work=WORK)


@pytest.mark.slow
async def test_a_crm_that_refused_the_connection_gets_the_lead_as_new(make_agent):
    port = free_port()  # nothing listens: connection refused
    agent = make_agent(
        lead_settings(
            routes=[http_route(f"http://127.0.0.1:{port}/adf")], delivery=DeliverySettings(base_backoff_seconds=1)
        )
    )
    lead_id = submit(agent)["lead_id"]
    clock = Clock(NOW + timedelta(minutes=1))
    worker = worker_for(agent, clock)
    assert await once(worker) == 1
    clock.advance(2)
    assert await once(worker) == 1  # refused again
    (row,) = deliveries(agent, lead_id)
    assert (row["status"], row["attempts"]) == ("pending", 2) and "ConnectError" in row["last_error"]
    crm = Receiver(port)  # the CRM comes back on its address
    try:
        clock.advance(5)
        assert await once(worker) == 1
        (got,) = crm.requests
    finally:
        crm.close()
    assert deliveries(agent, lead_id)[0]["attempts"] == 3
    assert prospect_status(got) == "new"  # it never had it


@pytest.mark.slow
async def test_the_webhook_says_resend_false_after_a_refused_connection(make_agent):
    port = free_port()
    hook = WebhookTarget("hook", f"http://127.0.0.1:{port}/hook")
    agent = make_agent(
        lead_settings(routes=[Route(targets=(hook,))], delivery=DeliverySettings(base_backoff_seconds=1))
    )
    submit(agent)
    clock = Clock(NOW + timedelta(minutes=1))
    worker = worker_for(agent, clock)
    await once(worker)
    crm = Receiver(port)
    try:
        clock.advance(2)
        assert await once(worker) == 1
        (got,) = crm.requests
    finally:
        crm.close()
    assert orjson.loads(got["body"])["resend"] is False


@pytest.mark.slow
@pytest.mark.parametrize(
    ("status", "resend"), [(500, "resend"), (503, "resend"), (409, "resend"), (429, "new"), (408, "new"), (425, "new")]
)
async def test_an_answer_says_whether_the_crm_may_have_it(make_agent, status, resend):
    crm = Receiver()
    try:
        agent = make_agent(
            lead_settings(routes=[http_route(crm.url)], delivery=DeliverySettings(base_backoff_seconds=1))
        )
        submit(agent)
        clock = Clock(NOW + timedelta(minutes=1))
        worker = worker_for(agent, clock)
        crm.status = status
        await once(worker)
        crm.status = 200
        clock.advance(2)
        assert await once(worker) == 1
        assert [prospect_status(r) for r in crm.requests] == ["new", resend]
    finally:
        crm.close()


@pytest.mark.slow
async def test_an_answer_lost_to_a_read_timeout_makes_the_next_one_a_resend(make_agent):
    crm = Receiver()
    try:
        agent = make_agent(
            lead_settings(
                routes=[http_route(crm.url)], delivery=DeliverySettings(base_backoff_seconds=1, timeout_seconds=0.5)
            )
        )
        lead_id = submit(agent)["lead_id"]
        clock = Clock(NOW + timedelta(minutes=1))
        worker = worker_for(agent, clock)
        crm.hang.set()  # the CRM reads the lead and never answers in time
        await once(worker)
        assert "ReadTimeout" in deliveries(agent, lead_id)[0]["last_error"]
        crm.hang.clear()
        crm.release.set()
        clock.advance(2)
        assert await once(worker) == 1
        assert [prospect_status(r) for r in crm.requests] == ["new", "resend"]
    finally:
        crm.close()


def test_a_claim_taken_over_from_a_worker_killed_while_sending_is_a_resend(make_agent):
    agent = make_agent(lead_settings(routes=[http_route("http://127.0.0.1:9/adf")]))
    submit(agent)
    store = agent.stores.leads
    t0 = epoch_ms(NOW) + 60_000
    (first,) = store.claim_due(t0, 1_000, 10)
    assert first.reached is False  # nobody sent it before
    (second,) = store.claim_due(t0 + 1_500, 1_000, 10)  # the first worker died holding it
    assert second.reached is True
    worker = DeliveryWorker(store, agent.settings, work=WORK)
    assert worker.document(second)["resend"] is True and worker.view(second).resend is True


def test_a_failure_before_sending_keeps_the_row_new_and_an_ambiguous_one_marks_it(make_agent):
    agent = make_agent(lead_settings(routes=[http_route("http://127.0.0.1:9/adf")]))
    lead_id = submit(agent)["lead_id"]
    store = agent.stores.leads
    t0 = epoch_ms(NOW) + 60_000
    (first,) = store.claim_due(t0, 1_000, 10)
    assert store.mark_retry(first, t0 + 10, t0 + 20, "ConnectError while posting", reached=False)
    (second,) = store.claim_due(t0 + 30, 1_000, 10)
    assert second.reached is False
    assert store.mark_retry(second, t0 + 40, t0 + 50, "ReadTimeout while posting", reached=True)
    (third,) = store.claim_due(t0 + 60, 1_000, 10)
    assert third.reached is True
    assert store.mark_retry(third, t0 + 70, t0 + 80, "ConnectError while posting", reached=False)
    (fourth,) = store.claim_due(t0 + 90, 1_000, 10)
    assert fourth.reached is True  # once it may have reached, every later attempt is a resend
    assert deliveries(agent, lead_id)[0]["attempts"] == 4


def test_an_operator_resending_a_delivered_lead_flags_it(make_agent):
    agent = make_agent(lead_settings(routes=[http_route("http://127.0.0.1:9/adf")]))
    lead_id = submit(agent)["lead_id"]
    store = agent.stores.leads
    t0 = epoch_ms(NOW) + 60_000
    (first,) = store.claim_due(t0, 1_000, 10)
    assert first.reached is False
    assert store.mark_delivered(first, t0 + 10)
    assert store.retry(lead_id, t0 + 20, include_delivered=True) == 1
    (again,) = store.claim_due(t0 + 30, 1_000, 10)
    assert again.reached is True


# -- the transports' verdicts ------------------------------------------------------------------


def failing(exc: Exception) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


@pytest.mark.parametrize(
    ("exc", "reached"),
    [
        (httpx.ConnectError("[Errno 111] Connection refused"), False),
        (httpx.ConnectError("[Errno -2] Name or service not known"), False),  # DNS
        (httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"), False),  # TLS
        (httpx.ConnectTimeout("timed out"), False),
        (httpx.PoolTimeout("timed out"), False),
        (httpx.UnsupportedProtocol("no scheme"), False),
        (httpx.WriteTimeout("timed out"), False),  # the body stopped part way: nothing to act on
        (httpx.WriteError("broken pipe"), False),
        (httpx.LocalProtocolError("illegal header"), False),
        (httpx.ReadTimeout("timed out"), True),
        (httpx.ReadError("reset"), True),
        (httpx.RemoteProtocolError("Server disconnected without sending a response."), True),
    ],
)
async def test_http_failures_say_whether_the_request_may_have_reached_the_crm(exc, reached):
    async with failing(exc) as client:
        with pytest.raises(transports.SendError) as caught:
            await transports.send_adf_http(
                client, AdfHttpTarget("crm", "https://crm.example/adf"), ADF, "lead_1", "dlv_1", 5
            )
    assert caught.value.reached is reached and not caught.value.permanent


@pytest.mark.parametrize(
    ("status", "reached", "permanent"),
    [
        (500, True, False),
        (502, True, False),
        (503, True, False),
        (409, True, False),  # a request under this Idempotency-Key is held already
        (408, False, False),
        (425, False, False),
        (429, False, False),
        (400, False, True),  # a definite refusal: the CRM does not have the lead
        (401, False, True),  # an expired token
        (403, False, True),
        (404, False, True),  # a wrong URL
        (410, False, True),
        (413, False, True),
        (415, False, True),
        (422, False, True),
        (301, False, True),  # redirects are not followed: a lead goes to the configured URL only
        (307, False, True),
    ],
)
async def test_http_answers_say_whether_the_crm_may_have_the_lead(status, reached, permanent):
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(status))) as client:
        with pytest.raises(transports.SendError) as caught:
            await transports.send_adf_http(
                client, AdfHttpTarget("crm", "https://crm.example/adf"), ADF, "lead_1", "dlv_1", 5
            )
    assert (caught.value.reached, caught.value.permanent) == (reached, permanent)
    assert str(caught.value) == f"HTTP {status}"


async def test_a_down_smtp_server_was_never_reached():
    target = SmtpTarget(
        "mail", "127.0.0.1", "aap@dealer.example", ("leads@dealer.example",), port=free_port(), starttls=False
    )
    with pytest.raises(transports.SendError) as caught:
        await send_adf(target, "", 2)
    assert caught.value.reached is False


@pytest.mark.slow
@pytest.mark.parametrize("status", [404, 401, 400, 422])
@pytest.mark.parametrize("kind", ["adf_http", "webhook"])
async def test_a_lead_refused_at_first_and_retried_by_the_operator_is_delivered_as_new(make_agent, status, kind):
    """A wrong URL (404) or an expired token (401) never reached the CRM: after the fix, the
    operator's retry is the CRM's first copy of the lead, and says so."""
    crm = Receiver()
    try:
        target = http_route(crm.url) if kind == "adf_http" else Route(targets=(WebhookTarget("hook", crm.url),))
        agent = make_agent(lead_settings(routes=[target], delivery=DeliverySettings(base_backoff_seconds=1)))
        lead_id = submit(agent)["lead_id"]
        clock = Clock(NOW + timedelta(minutes=1))
        worker = worker_for(agent, clock)
        crm.status = status
        assert await once(worker) == 1
        (row,) = deliveries(agent, lead_id)
        assert (row["status"], row["last_error"]) == ("dead", f"HTTP {status}")  # no retry can help
        crm.status = 200  # the operator fixed the URL or the token
        retry_deliveries(agent.stores.leads, lead_id, NOW + timedelta(minutes=2))
        clock.advance(60)
        assert await once(worker) == 1
        assert deliveries(agent, lead_id)[0]["status"] == "delivered"
        first, second = crm.requests
        if kind == "adf_http":
            assert [prospect_status(first), prospect_status(second)] == ["new", "new"]
        else:
            assert [orjson.loads(r["body"])["resend"] for r in (first, second)] == [False, False]
    finally:
        crm.close()


async def test_a_refusal_after_an_ambiguous_attempt_keeps_the_resend_flag(make_agent):
    """Once an attempt may have been accepted (a 503), a later refusal does not unsay it."""
    crm = Receiver()
    try:
        agent = make_agent(
            lead_settings(routes=[http_route(crm.url)], delivery=DeliverySettings(base_backoff_seconds=1))
        )
        lead_id = submit(agent)["lead_id"]
        clock = Clock(NOW + timedelta(minutes=1))
        worker = worker_for(agent, clock)
        for status in (503, 404):
            crm.status = status
            await once(worker)
            clock.advance(2)
        crm.status = 200
        retry_deliveries(agent.stores.leads, lead_id, NOW + timedelta(minutes=2))
        clock.advance(60)
        assert await once(worker) == 1
        assert [prospect_status(r) for r in crm.requests] == ["new", "resend", "resend"]
    finally:
        crm.close()


class DroppingSmtp:
    """An SMTP server on loopback that drops the session at one point: ``"rcpt"`` (after the
    envelope, before DATA) or ``"data"`` (after the whole message, before the final reply)."""

    def __init__(self, drop: str) -> None:
        self.drop = drop
        self.messages: list[bytes] = []
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                self.wfile.write(b"220 test ESMTP\r\n")
                while True:
                    line = self.rfile.readline()
                    if not line:
                        return
                    verb = line[:4].upper()
                    if verb in (b"EHLO", b"HELO"):
                        self.wfile.write(b"250 test\r\n")
                    elif verb == b"MAIL":
                        self.wfile.write(b"250 ok\r\n")
                    elif verb == b"RCPT":
                        if outer.drop == "rcpt":
                            return  # the connection closes: the server never had the message
                        self.wfile.write(b"250 ok\r\n")
                    elif verb == b"DATA":
                        self.wfile.write(b"354 go ahead\r\n")
                        data = b""
                        while not data.endswith(b"\r\n.\r\n"):
                            chunk = self.rfile.readline()
                            if not chunk:
                                return
                            data += chunk
                        outer.messages.append(data)
                        return  # message complete, no reply: the server may have queued it
                    else:
                        self.wfile.write(b"250 ok\r\n")

        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize(("drop", "reached"), [("rcpt", False), ("data", True)])
async def test_an_smtp_session_lost_may_have_delivered_only_once_the_message_data_went_out(drop, reached):
    server = DroppingSmtp(drop)
    try:
        target = SmtpTarget(
            "mail", "127.0.0.1", "aap@dealer.example", ("leads@dealer.example",), port=server.port, starttls=False
        )
        with pytest.raises(transports.SendError) as caught:
            await send_adf(target, "", 5)
    finally:
        server.close()
    assert caught.value.reached is reached and not caught.value.permanent
    assert len(server.messages) == (1 if drop == "data" else 0)
