"""Fetching a personal agent's client metadata and JWKS: HTTPS only, verified certificates,
no redirects, size and time limits, private addresses refused, bounded caches."""

from __future__ import annotations

import dataclasses
import ipaddress

import pytest

from aap.config.poppy import LOOPBACK_ENV, PoppySettings
from aap.netguard import Reach, refusal
from aap.poppy.client_metadata import ClientMetadataError, ClientRegistry, cache_ttl
from poppy_client import PersonalAgent
from poppy_env import agent_host, poppy_ca  # noqa: F401

LOOPBACK = PoppySettings(allow_loopback_clients=True)


@pytest.fixture(autouse=True)
def _no_loopback_env(monkeypatch):
    monkeypatch.delenv(LOOPBACK_ENV, raising=False)


def registry(ca, settings: PoppySettings = LOOPBACK) -> ClientRegistry:
    return ClientRegistry(settings, ca.context())


async def test_a_published_agent_is_loaded(agent_host, poppy_ca):
    agent = PersonalAgent(agent_host, name="meta-ok")
    info = await registry(poppy_ca).get(agent.client_id)
    assert info.client_id == agent.client_id
    assert [k["kid"] for k in info.keys] == [agent.kid]


@pytest.mark.parametrize(
    "address,allowed",
    [
        ("127.0.0.1", False),
        ("::1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.0.1", False),
        ("169.254.169.254", False),
        ("100.64.0.1", False),
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("fe80::1", False),
        ("fd00::1", False),
        ("::ffff:10.0.0.1", False),
        ("8.8.8.8", True),
        ("2606:4700:4700::1111", True),
    ],
)
def test_address_policy(address, allowed):
    # The fetcher's reach: public addresses; the development switch admits loopback and nothing else.
    assert (refusal(ipaddress.ip_address(address), Reach()) is None) is allowed
    loopback = ipaddress.ip_address(address).is_loopback
    assert (refusal(ipaddress.ip_address(address), Reach(loopback=True)) is None) is (allowed or loopback)


async def test_loopback_is_refused_without_the_development_switch(agent_host, poppy_ca, monkeypatch):
    agent = PersonalAgent(agent_host, name="meta-loopback")
    with pytest.raises(ClientMetadataError, match="not allowed"):
        await registry(poppy_ca, PoppySettings()).get(agent.client_id)  # "localhost" resolves to loopback
    assert agent_host.hits.get("/meta-loopback/agent.json", 0) == 0  # refused before connecting
    monkeypatch.setenv(LOOPBACK_ENV, "1")
    assert (await registry(poppy_ca, PoppySettings()).get(agent.client_id)).client_id == agent.client_id


@pytest.mark.parametrize(
    "client_id",
    [
        "http://localhost/agent.json",
        "https://user:pw@localhost/agent.json",
        "https://localhost/agent.json#frag",
        "https://10.0.0.1/agent.json",
        "https://[::1]:1/agent.json",
    ],
)
async def test_client_id_urls_that_are_never_fetched(poppy_ca, client_id):
    with pytest.raises(ClientMetadataError):
        await registry(poppy_ca, PoppySettings()).get(client_id)


async def test_redirects_are_not_followed(agent_host, poppy_ca):
    agent = PersonalAgent(agent_host, name="meta-redirect", publish=False)
    target = agent_host.publish("/meta-redirect/real.json", agent.metadata())
    agent_host.publish("/meta-redirect/agent.json", b"", status=302, headers={"Location": target})
    with pytest.raises(ClientMetadataError, match="HTTP 302"):
        await registry(poppy_ca).get(agent.client_id)


@pytest.mark.slow
async def test_size_and_time_limits(agent_host, poppy_ca):
    agent = PersonalAgent(agent_host, name="meta-big", publish=False)
    agent.publish({**agent.metadata(), "padding": "x" * 5000})
    with pytest.raises(ClientMetadataError, match="larger than 2048 bytes"):
        await registry(poppy_ca, dataclasses.replace(LOOPBACK, metadata_max_bytes=2048)).get(agent.client_id)
    slow = PersonalAgent(agent_host, name="meta-slow")
    agent_host.delays["/meta-slow/agent.json"] = 3.0
    with pytest.raises(ClientMetadataError, match="did not answer"):
        await registry(poppy_ca, dataclasses.replace(LOOPBACK, metadata_timeout=0.5)).get(slow.client_id)


async def test_document_rules(agent_host, poppy_ca):
    agent = PersonalAgent(agent_host, name="meta-rules", publish=False)
    cases = {
        "differs from the URL": {**agent.metadata(), "client_id": agent.client_id + "?x"},
        "jwks_uri must be on the client_id host": {
            **agent.metadata(),
            "jwks_uri": agent.jwks_uri.replace("localhost", "127.0.0.1"),
        },
        "not valid PoppyClientMetadata": {k: v for k, v in agent.metadata().items() if k != "jwks_uri"},
    }
    for expected, document in cases.items():
        agent.publish(document)
        with pytest.raises(ClientMetadataError, match=expected):
            await registry(poppy_ca).get(agent.client_id)
    agent.publish()
    agent_host.publish("/meta-rules/jwks.json", {"keys": [{"kty": "RSA", "n": "AQAB", "e": "AQAB", "kid": "r"}]})
    with pytest.raises(ClientMetadataError, match="no usable ES256"):
        await registry(poppy_ca).get(agent.client_id)


async def test_certificates_are_verified_against_the_trust_store(agent_host, poppy_ca, monkeypatch, tmp_path):
    agent = PersonalAgent(agent_host, name="meta-tls")
    empty = tmp_path / "empty.pem"
    empty.write_text("")
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "missing.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(tmp_path))
    with pytest.raises(ClientMetadataError, match="verified HTTPS"):
        await ClientRegistry(LOOPBACK).get(agent.client_id)  # the test CA is not trusted
    monkeypatch.setenv("SSL_CERT_FILE", str(poppy_ca.ca_file))
    assert (await ClientRegistry(LOOPBACK).get(agent.client_id)).client_id == agent.client_id


async def test_caches_are_bounded_and_failures_remembered(agent_host, poppy_ca):
    reg = registry(poppy_ca, dataclasses.replace(LOOPBACK, metadata_cache_entries=2))
    agents = [PersonalAgent(agent_host, name=f"meta-cache{i}") for i in range(3)]
    for agent in agents:
        await reg.get(agent.client_id)
    await reg.get(agents[2].client_id)
    assert agent_host.hits["/meta-cache2/agent.json"] == 1  # served from the cache
    await reg.get(agents[0].client_id)
    assert agent_host.hits["/meta-cache0/agent.json"] == 2  # evicted by the bound, fetched again
    broken = PersonalAgent(agent_host, name="meta-broken", publish=False)
    for _ in range(3):
        with pytest.raises(ClientMetadataError):
            await reg.get(broken.client_id)
    assert agent_host.hits["/meta-broken/agent.json"] == 1  # the failure is remembered


async def test_unknown_kid_refetches_the_jwks_at_most_once_per_interval(agent_host, poppy_ca):
    reg = registry(poppy_ca, dataclasses.replace(LOOPBACK, jwks_refresh_interval=3600))
    agent = PersonalAgent(agent_host, name="meta-kid")
    info = await reg.get(agent.client_id)
    for _ in range(3):
        info = await reg.refresh_keys(info)
    assert agent_host.hits["/meta-kid/jwks.json"] == 1
    reg0 = registry(poppy_ca, dataclasses.replace(LOOPBACK, jwks_refresh_interval=0))
    info = await reg0.get(agent.client_id)
    await reg0.refresh_keys(info)
    assert agent_host.hits["/meta-kid/jwks.json"] == 3


def test_cache_lifetimes_are_clamped():
    settings = PoppySettings()
    assert cache_ttl("max-age=5", settings) == 60
    assert cache_ttl("public, max-age=600", settings) == 600
    assert cache_ttl("max-age=999999999", settings) == 86400
    assert cache_ttl("no-store", settings) == 60
    assert cache_ttl(None, settings) == 300
