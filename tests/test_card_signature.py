"""Signed agent cards (docs/a2a.md, "Signed agent card"; A2A §8.4): with ``[agent]
signing_key_env`` the card carries a JWS over its RFC 8785 canonical form, which the official
a2a-sdk's own signature verifier accepts (and a card the SDK signs, ours verifies); the public key
is published at the card's ``jku``; ``aap check`` verifies it; the buyer SDK verifies a signed card
and can require one."""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from collections.abc import Iterator

import httpx
import pytest
from a2a.types import AgentCard as SdkAgentCard
from a2a.utils.signing import InvalidSignaturesError, create_agent_card_signer, create_signature_verifier
from google.protobuf.json_format import MessageToDict, ParseDict
from joserfc.jwk import ECKey, OKPKey, RSAKey
from jwt.api_jwk import PyJWK

from aap import cardsign
from aap.check import run_checks
from aap.client import AapClient, DiscoveryError
from aap.config.environment import environment_problems
from aap.config.model import AgentIdentity
from aap.discovery import build as discovery_build
from aap.discovery.card_keys import ConfiguredCardKeys
from aap.server.app import SURFACES, create_app
from aap.store import open_stores
from http_helpers import LiveServer, make_settings

KEY_ENV = "DEALER_CARD_KEY"


def pem(key) -> str:
    return key.as_pem(private=True).decode()


def card_of(base: str) -> dict:
    return httpx.get(base + "/.well-known/agent-card.json").json()


@pytest.fixture(scope="module")
def signing_key() -> ECKey:
    return ECKey.generate_key("P-256")


def serve(tmp_path, key_text: str | None, kid: str | None = None) -> tuple[LiveServer, object]:
    server = LiveServer()
    settings = make_settings(server.base_url, f"sqlite:///{tmp_path}/aap.db")
    if key_text is not None:
        agent = dataclasses.replace(settings.agent, signing_key_env=KEY_ENV, signing_kid=kid)
        settings = dataclasses.replace(settings, agent=agent)
    keys = ConfiguredCardKeys({KEY_ENV: key_text} if key_text else {})
    surfaces = tuple(
        dataclasses.replace(s, build=lambda gateway: discovery_build(gateway, keys=keys))
        if s.build is discovery_build
        else s
        for s in SURFACES
    )
    stores = open_stores(settings.database_url)
    server.start(create_app(settings, stores, surfaces=surfaces, services=()))
    return server, stores


@pytest.fixture(scope="module")
def signed_dealer(tmp_path_factory, signing_key) -> Iterator[str]:
    server, stores = serve(tmp_path_factory.mktemp("signed"), pem(signing_key), kid="card-2026")
    try:
        yield server.base_url
    finally:
        server.stop()
        stores.close()


@pytest.fixture(scope="module")
def unsigned_dealer(tmp_path_factory) -> Iterator[str]:
    server, stores = serve(tmp_path_factory.mktemp("unsigned"), None)
    try:
        yield server.base_url
    finally:
        server.stop()
        stores.close()


# -- the served card, and the official SDK's verifier ----------------------------------------------


def sdk_card(card: dict) -> SdkAgentCard:
    return ParseDict(card, SdkAgentCard())


def test_the_served_card_is_signed_and_its_key_published(signed_dealer, signing_key):
    card = card_of(signed_dealer)
    (signature,) = card["signatures"]
    header = json.loads(base64.urlsafe_b64decode(signature["protected"] + "=="))
    jku = signed_dealer + "/.well-known/agent-card-keys.json"
    assert header == {"alg": "ES256", "typ": "JOSE", "kid": "card-2026", "jku": jku}
    keys = httpx.get(jku)
    assert keys.status_code == 200 and keys.headers["content-type"] == "application/jwk-set+json"
    (jwk,) = keys.json()["keys"]
    assert jwk["kid"] == "card-2026" and "d" not in jwk  # the public half only
    assert (jwk["x"], jwk["y"]) == (signing_key.as_dict(private=False)["x"], signing_key.as_dict(private=False)["y"])
    assert cardsign.verify(card, cardsign.key_set_finder(keys.json())) == "card-2026"


def test_the_official_a2a_sdk_verifies_the_served_card(signed_dealer):
    card = card_of(signed_dealer)
    jwks = httpx.get(signed_dealer + "/.well-known/agent-card-keys.json").json()
    seen = []

    def key_provider(kid, jku):
        seen.append((kid, jku))
        (jwk,) = [k for k in jwks["keys"] if k["kid"] == kid]
        return PyJWK(jwk)

    create_signature_verifier(key_provider, ["ES256"])(sdk_card(card))
    assert seen == [("card-2026", signed_dealer + "/.well-known/agent-card-keys.json")]
    tampered = copy.deepcopy(card)
    tampered["name"] = "Someone Else Motors"
    with pytest.raises(InvalidSignaturesError):
        create_signature_verifier(key_provider, ["ES256"])(sdk_card(tampered))


@pytest.mark.parametrize(
    "key",
    [ECKey.generate_key("P-256"), ECKey.generate_key("P-384"), RSAKey.generate_key(2048)],
    ids=["ES256", "ES384", "RS256"],
)
def test_cards_signed_by_either_side_verify_on_the_other(signed_dealer, key):
    card = {k: v for k, v in card_of(signed_dealer).items() if k != "signatures"}
    ours = cardsign.signed(card, cardsign.load_private_key(pem(key), kid="k1"))
    public = PyJWK({**key.as_dict(private=False), "kid": "k1"})
    algorithms = [cardsign.algorithm_of(key)]
    create_signature_verifier(lambda kid, jku: public, algorithms)(sdk_card(ours))
    # The SDK's signer over its own reading of the card; our verifier accepts it.
    signer = create_agent_card_signer(PyJWK(key.as_dict(private=True)), {"alg": algorithms[0], "kid": "k1"})
    theirs = MessageToDict(signer(sdk_card(card)))
    jwks = {"keys": [{**key.as_dict(private=False), "kid": "k1"}]}
    assert cardsign.verify(theirs, cardsign.key_set_finder(jwks)) == "k1"


def test_what_a_verifier_refuses(signed_dealer, signing_key):
    card = card_of(signed_dealer)
    finder = cardsign.key_set_finder({"keys": [{**signing_key.as_dict(private=False), "kid": "card-2026"}]})
    for name, change in (
        ("a changed member", lambda c: c.__setitem__("description", "changed")),
        ("a signature of another card", lambda c: c["signatures"][0].__setitem__("signature", "AAAA")),
        ("no signatures", lambda c: c.pop("signatures")),
    ):
        changed = copy.deepcopy(card)
        change(changed)
        with pytest.raises(cardsign.SignatureError):
            cardsign.verify(changed, finder)
        assert name
    # An HMAC "signature" with the public key as its secret (algorithm confusion) is refused unread.
    forged = copy.deepcopy(card)
    header = base64.urlsafe_b64encode(b'{"alg":"HS256","kid":"card-2026"}').rstrip(b"=").decode()
    forged["signatures"] = [{"protected": header, "signature": "x"}]
    with pytest.raises(cardsign.SignatureError, match="HS256"):
        cardsign.verify(forged, finder)
    # Member order and empty members do not change what is signed (RFC 8785; A2A §8.4.1).
    reordered = dict(reversed(list(card.items())))
    assert "securitySchemes" not in card
    reordered["securitySchemes"] = {}  # an empty member is a default: not signed
    assert cardsign.canonical_payload(reordered) == cardsign.canonical_payload(card)


# -- aap check, the buyer SDK, the configuration --------------------------------------------------


async def test_aap_check_verifies_a_signed_card_and_skips_an_unsigned_one(signed_dealer, unsigned_dealer):
    report = await run_checks(signed_dealer, rules=["card.available", "card.signature"])
    assert report.result("card.signature").status == "pass"
    assert "card-2026" in report.result("card.signature").message
    unsigned = await run_checks(unsigned_dealer, rules=["card.available", "card.signature"])
    assert unsigned.result("card.signature").status == "skip"


async def test_the_client_verifies_a_signed_card_and_can_require_one(signed_dealer, unsigned_dealer):
    async with AapClient.discover(signed_dealer, require_signed_card=True) as client:
        assert client.card_signed_by == "card-2026"
        assert (await client.dealer_information()).name
    with pytest.raises(DiscoveryError, match="not signed"):
        await AapClient.discover(unsigned_dealer, require_signed_card=True)
    async with AapClient.discover(unsigned_dealer) as client:  # not required: an unsigned card is fine
        assert client.card_signed_by is None
    # Keys the caller trusts are looked up first: a key other than the dealer's refuses the card
    # unless the card's own origin publishes the right one (it does: the signature still verifies).
    other = ECKey.generate_key("P-256")
    trusted = {"keys": [{**other.as_dict(private=False), "kid": "card-2026"}]}
    with pytest.raises(DiscoveryError, match="do not verify"):
        await AapClient.discover(signed_dealer, card_keys=trusted)


def test_a_signing_key_that_is_missing_or_not_one_is_a_start_up_problem(tmp_path, signing_key):
    settings = make_settings("https://dealer.example", f"sqlite:///{tmp_path}/aap.db")
    settings = dataclasses.replace(settings, agent=AgentIdentity(name="x", description="y", signing_key_env=KEY_ENV))
    assert environment_problems(settings, {}) == [f"agent.signing_key_env: environment variable {KEY_ENV} is not set"]
    secret = '{"kty":"oct","k":"c2VjcmV0LXRoYXQtbXVzdC1ub3QtbGVhaw"}'
    (problem,) = environment_problems(settings, {KEY_ENV: secret})
    assert problem.startswith(f"agent.signing_key_env: {KEY_ENV} does not hold a private key") and "c2Vj" not in problem
    public_only = json.dumps(signing_key.as_dict(private=False))
    assert len(environment_problems(settings, {KEY_ENV: public_only})) == 1
    ed25519 = OKPKey.generate_key("Ed25519").as_pem(private=True).decode()
    assert "P-256, P-384 or RSA" in environment_problems(settings, {KEY_ENV: ed25519})[0]
    assert environment_problems(settings, {KEY_ENV: pem(signing_key)}) == []
