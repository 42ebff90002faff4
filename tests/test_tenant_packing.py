"""A dropped tenant is built again from its packed settings (docs/platform.md, "Sizing").

A worker keeps at most ``tenants_in_memory`` tenants built; when requests spread over more
tenants than that, most requests build their tenant again. What a build needs of the registry
(the tenant's row, its TOML parsed into Settings) is kept packed, ``settings_in_memory`` tenants
of it, until the tenant changes: these tests check that a packed tenant is built without a read,
that what it is built from equals what a read would give, and that a change is never hidden by
what was packed before it.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import pickle
import pickletools
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aap.config.credentials import SecretValues
from aap.config.model import Settings
from aap.config.shared import PACKED_FIELDS, SHARED_FIELDS, LazySettings, SettingsPacker
from aap.server.platform import create_platform_app
from aap.server.tenant_runtime import Runtimes
from aap.store import Stores, open_platform_database
from aap.tenants import TenantRegistry
from http_helpers import AAP_HEADERS, send_message
from platform_support import PLATFORM_HOST, eventually, platform_settings, tenant_config

HOSTS = {"dealer-a": "alpha.example", "dealer-b": "beta.example", "dealer-c": "gamma.example"}
RICH = """
[rate_limit]
per_minute = 30
burst = 10

[agent.provider]
organization = "Gamma Group"
url = "https://gamma-group.example"

[search]
max_limit = 40

[[feeds]]
name = "main"
source = "https://feeds.example/gamma.csv"
format = "dealer-csv"
schedule = "every 6h"
"""


class Reads:
    """Counts the registry rows the worker's runtimes read."""

    def __init__(self, client: TestClient) -> None:
        self.count = 0
        store = runtimes_of(client).registry.store
        read = store.tenant

        def tenant(*args, **kwargs):
            self.count += 1
            return read(*args, **kwargs)

        store.tenant = tenant  # type: ignore[method-assign]


@pytest.fixture
def platform(tmp_path: Path, request) -> Iterator[tuple[TestClient, TenantRegistry]]:
    options = getattr(request, "param", {"tenants_in_memory": 1})
    settings = platform_settings(f"sqlite:///{tmp_path}/platform.db", **options)
    stores = Stores(open_platform_database(settings.database_url))
    registry = TenantRegistry(settings, stores.db, environ={})
    registry.add("dealer-a", tenant_config("Alpha Motors"), [HOSTS["dealer-a"]])
    registry.add("dealer-b", tenant_config("Beta Cars"), [HOSTS["dealer-b"]])
    registry.add("dealer-c", tenant_config("Gamma Autos", extra=RICH), [HOSTS["dealer-c"]])
    app = create_platform_app(settings, stores)
    with TestClient(app, base_url=f"https://{PLATFORM_HOST}") as client:
        yield client, registry
    stores.close()


def runtimes_of(client: TestClient) -> Runtimes:
    return client.app.state.platform.runtimes  # type: ignore[attr-defined]


def dealer_name(client: TestClient, tenant_id: str) -> str:
    request = {"type": "dealer.information.request"}
    answer = client.post("/a2a", json=send_message(request), headers={**AAP_HEADERS, "host": HOSTS[tenant_id]})
    assert answer.status_code == 200, answer.text
    artifact = answer.json()["result"]["message"]["parts"][0]["data"]
    return artifact["data"]["name"]


def settings_of(client: TestClient, tenant_id: str):
    async def get():
        runtime = await runtimes_of(client).get(tenant_id, f"https://{HOSTS[tenant_id]}")
        assert runtime is not None
        return runtime.gateway.settings

    return client.portal.call(get)


def test_a_tenant_pushed_out_is_built_again_without_reading_the_registry(platform) -> None:
    client, registry = platform
    runtimes = runtimes_of(client)
    assert dealer_name(client, "dealer-c") == "Gamma Autos"
    first = settings_of(client, "dealer-c")
    assert dealer_name(client, "dealer-a") == "Alpha Motors"  # one built at a time: Gamma is dropped
    assert len(runtimes) == 1
    reads = Reads(client)
    assert dealer_name(client, "dealer-c") == "Gamma Autos"
    assert reads.count == 0
    again = settings_of(client, "dealer-c")
    assert again == first and again is not first
    loaded = registry.settings_for(registry.store.tenant("dealer-c"), f"https://{HOSTS['dealer-c']}")
    assert again == loaded
    for name in SHARED_FIELDS:  # what tenants share is still shared, not a copy of it
        assert getattr(again, name) is getattr(first, name)


def test_requests_arriving_together_for_a_packed_tenant_share_one_build(platform) -> None:
    """A tenant built again from its packed settings is built before any other request runs,
    and so is a surface with no lifespans to enter: requests arriving together get one runtime
    and one surface, each built once, and nothing is left that lingers when it is pushed out."""
    client, _ = platform
    runtimes = runtimes_of(client)
    assert dealer_name(client, "dealer-a") == "Alpha Motors"
    assert dealer_name(client, "dealer-b") == "Beta Cars"  # Alpha pushed out, its settings packed
    reads = Reads(client)
    assembled: list[object] = []
    assemble = runtimes._assemble

    def counted(*args):
        runtime = assemble(*args)
        assembled.append(runtime)
        return runtime

    runtimes._assemble = counted  # type: ignore[method-assign]
    a2a = next(i for i, surface in enumerate(runtimes.surfaces) if surface.name == "a2a")

    async def together():
        got = await asyncio.gather(*(runtimes.get("dealer-a", f"https://{HOSTS['dealer-a']}") for _ in range(4)))
        surfaces = await asyncio.gather(*(got[0].surface(a2a, client.app) for _ in range(4)))
        return got, surfaces

    got, surfaces = client.portal.call(together)
    assert reads.count == 0 and len(assembled) == 1
    assert all(runtime is assembled[0] for runtime in got)
    assert all(surface is surfaces[0] for surface in surfaces) and got[0].built(a2a) is surfaces[0]
    assert not got[0].lingering
    assert dealer_name(client, "dealer-b") == "Beta Cars"  # Alpha pushed out again: closed at once
    assert got[0].closed and not runtimes._closing


def test_a_change_is_served_by_a_tenant_built_again_from_packed_settings(platform) -> None:
    client, registry = platform
    runtimes = runtimes_of(client)
    assert dealer_name(client, "dealer-a") == "Alpha Motors"
    assert dealer_name(client, "dealer-b") == "Beta Cars"  # Alpha dropped, its settings packed
    assert "dealer-a" in runtimes._packed
    old = runtimes._packed["dealer-a"].revision
    changed = registry.update("dealer-a", tenant_config("Alpha Motors Renamed"))
    assert changed.revision > old
    # The worker follows the change: what was packed goes (and its check loads the new revision).
    assert eventually(lambda: getattr(runtimes._packed.get("dealer-a"), "revision", None) != old)
    assert dealer_name(client, "dealer-a") == "Alpha Motors Renamed"
    assert dealer_name(client, "dealer-b") == "Beta Cars"
    assert dealer_name(client, "dealer-a") == "Alpha Motors Renamed"  # from what was packed after the change


def test_settings_loaded_before_a_change_are_not_packed_after_it(platform) -> None:
    client, registry = platform
    runtimes = runtimes_of(client)
    record = registry.store.tenant("dealer-a")
    packed = runtimes.packer.pack(registry.settings_for(record, "https://alpha.example"), record.revision)
    seen = runtimes._drops.get("dealer-a", 0)

    async def change_then_park() -> None:
        runtimes.drop("dealer-a")  # the change arrives while the load was in the executor
        runtimes._park("dealer-a", packed, seen, evict=True)

    client.portal.call(change_then_park)
    assert "dealer-a" not in runtimes._packed


@pytest.mark.parametrize("platform", [{"tenants_in_memory": 1, "settings_in_memory": 2}], indirect=True)
def test_packed_settings_are_bounded_and_a_sweep_does_not_push_out_asked_for_tenants(platform) -> None:
    client, _ = platform
    runtimes = runtimes_of(client)
    dealer_name(client, "dealer-a")
    dealer_name(client, "dealer-b")
    assert list(runtimes._packed) == ["dealer-a", "dealer-b"]
    client.portal.call(runtimes.check, "dealer-c")  # the background sweep's load: no room, not kept
    assert list(runtimes._packed) == ["dealer-a", "dealer-b"]
    dealer_name(client, "dealer-c")  # asked for: kept, the least recently used goes
    assert list(runtimes._packed) == ["dealer-b", "dealer-c"]


@pytest.mark.parametrize("platform", [{"tenants_in_memory": 1, "settings_in_memory": 0}], indirect=True)
def test_without_room_for_packed_settings_every_build_reads_the_registry(platform) -> None:
    client, registry = platform
    dealer_name(client, "dealer-a")
    dealer_name(client, "dealer-b")
    reads = Reads(client)
    dealer_name(client, "dealer-a")
    assert reads.count == 1 and not runtimes_of(client)._packed


def test_a_tenant_built_again_uses_the_secrets_its_worker_kept_until_it_changes(platform) -> None:
    """The cursor key of a tenant pushed out and built again is the one its worker kept (its
    stored row is not read again); a change of the tenant makes the worker read it again, and
    no tenant's build is given another's."""
    client, _ = platform
    runtimes = runtimes_of(client)

    def state_of(tenant_id: str):
        async def get():
            runtime = await runtimes.get(tenant_id, f"https://{HOSTS[tenant_id]}")
            assert runtime is not None
            return runtime.gateway.stores.state

        return client.portal.call(get)

    state = state_of("dealer-a")
    key = state.secret("cursor-hmac")
    with state.db.transaction() as tx:  # the stored row changed behind the worker (nothing does)
        tx.execute("UPDATE state_secret SET value = ? WHERE tenant_id = ?", ("00" * 32, tx.tenant))
    beta = state_of("dealer-b")  # one tenant kept built: dealer-a is pushed out
    assert beta.secret("cursor-hmac") not in (key, bytes(32))
    again = state_of("dealer-a")
    assert again is not state and again.secret("cursor-hmac") == key
    runtimes.drop("dealer-a")  # what the registry's change feed does when the tenant changes
    assert state_of("dealer-a").secret("cursor-hmac") == bytes(32)


def test_packing_keeps_every_value_and_the_shared_sections_by_reference(platform) -> None:
    client, _ = platform
    packer = SettingsPacker()
    first = packer.pack(settings_of(client, "dealer-a"), 1)  # its pickle is the others' dictionary
    settings = settings_of(client, "dealer-c")
    settings = dataclasses.replace(settings, secrets=SecretValues({"crm-token": "s3cret"}))
    packed = packer.pack(settings, 7)
    assert first is not None and packed is not None and packed.revision == 7
    back = packer.unpack(packed)
    assert back == settings and back.public_url == "https://gamma.example"
    assert back.secrets.get("crm-token") == "s3cret"
    for name in SHARED_FIELDS:
        assert getattr(back, name) is getattr(settings, name)
    assert packer.unpack(first) == settings_of(client, "dealer-a")
    assert len(packed.data) < 1024  # the tenant's own parts, not a copy of the shared sections


def test_settings_pickle_every_field_through_their_slots(platform) -> None:
    """Settings set their slots from their own state (the generic frozen-slots path is slower):
    every field comes back, the one that does not compare (the secret values) included, and a
    state of another length is refused rather than half-applied."""
    client, _ = platform
    settings = dataclasses.replace(settings_of(client, "dealer-c"), secrets=SecretValues({"crm-token": "s3cret"}))
    back = pickle.loads(pickle.dumps(settings, pickle.HIGHEST_PROTOCOL))
    for name in Settings.__slots__:
        assert getattr(back, name) == getattr(settings, name), name
    assert back.secrets.get("crm-token") == "s3cret"
    with pytest.raises(ValueError):
        object.__new__(Settings).__setstate__(settings.__getstate__()[:-1])


def test_packed_settings_name_no_class_and_unpack_after_the_table_grew(platform) -> None:
    """A packed tenant refers to its classes by their place in the packer's table, so that an
    unpacking looks none up by name; a place once given stays, so what was packed before the
    table grew (a tenant with sections of classes met later) unpacks to what it was."""
    client, _ = platform
    packer = SettingsPacker()
    plain = settings_of(client, "dealer-a")
    first = packer.pack(plain, 1)
    assert first is not None
    known = packer.class_index(Settings)
    rich = dataclasses.replace(settings_of(client, "dealer-c"), secrets=SecretValues({"crm-token": "s3cret"}))
    later = packer.pack(rich, 2)
    assert later is not None and packer.class_index(Settings) == known
    for packed in (first, later):
        assert packer._dictionary is not None
        raw = zlib.decompressobj(wbits=-zlib.MAX_WBITS, zdict=packer._dictionary).decompress(packed.data)
        named = [op.name for op, _arg, _pos in pickletools.genops(raw) if "GLOBAL" in op.name]
        assert named == []
    assert packer.unpack(first) == plain
    back = packer.unpack(later)
    assert back == rich and back.secrets.get("crm-token") == "s3cret"


def test_tenants_sharing_their_sections_hold_them_once(platform) -> None:
    """The ready fields of packed settings are the tenants' sections themselves: those most
    tenants hold alike are one object for all of them, a tenant's own is its own."""
    client, _ = platform
    packer = SettingsPacker()
    a = packer.pack(settings_of(client, "dealer-a"), 1)
    b = packer.pack(settings_of(client, "dealer-b"), 1)
    c = packer.pack(settings_of(client, "dealer-c"), 1)  # its own rate limit and search sections
    assert a is not None and b is not None and c is not None
    assert a.common is b.common and c.common is not a.common
    for name in SHARED_FIELDS:
        assert a.ready[name] is b.ready[name], name
    assert c.ready["rate_limit"] is not a.ready["rate_limit"] and c.ready["search"] is not a.ready["search"]
    assert c.ready["mcp"] is a.ready["mcp"]
    assert a.ready["public_url"] == "https://alpha.example" and b.ready["public_url"] == "https://beta.example"


def test_a_tenant_built_again_for_a_search_unpacks_none_of_its_own_parts(platform) -> None:
    """Building a packed tenant again sets its ready fields and leaves its own parts packed
    until a request reads one: a search reads none; ``dealer.information`` reads the dealer,
    and every packed field is then set, equal to what the registry gives."""
    client, _ = platform
    runtimes = runtimes_of(client)
    unpacked: list[str] = []
    unpack_own = runtimes.packer.unpack_own

    def counted(packed):
        unpacked.append("own parts")
        return unpack_own(packed)

    runtimes.packer.unpack_own = counted  # type: ignore[method-assign]
    loaded = settings_of(client, "dealer-c")
    assert dealer_name(client, "dealer-a") == "Alpha Motors"  # one built at a time: Gamma is dropped
    reads = Reads(client)
    unpacked.clear()  # Alpha's own parts, read by its dealer.information
    search = {"type": "inventory.search.request", "filters": {"make": ["Honda"]}}
    answer = client.post("/a2a", json=send_message(search), headers={**AAP_HEADERS, "host": HOSTS["dealer-c"]})
    assert answer.status_code == 200 and "result" in answer.json(), answer.text
    assert reads.count == 0 and unpacked == []
    settings = settings_of(client, "dealer-c")
    assert isinstance(settings, LazySettings)
    for name in PACKED_FIELDS:
        with pytest.raises(AttributeError):
            Settings.__dict__[name].__get__(settings)  # the slot itself: not set yet
    assert dealer_name(client, "dealer-c") == "Gamma Autos"
    assert unpacked == ["own parts"]
    for name in PACKED_FIELDS:
        assert Settings.__dict__[name].__get__(settings) == getattr(loaded, name), name
    assert settings == loaded and reads.count == 0


def test_settings_built_again_compare_pickle_and_copy_as_settings(platform) -> None:
    """What a tenant is built again from behaves as the Settings it was packed from: it
    compares equal either way round, a copy, a pickle and ``dataclasses.replace`` keep every
    value, and its fields stay frozen."""
    client, _ = platform
    loaded = dataclasses.replace(settings_of(client, "dealer-c"), secrets=SecretValues({"crm-token": "s3cret"}))
    packer = SettingsPacker()
    packed = packer.pack(loaded, 3)
    assert packed is not None
    for make in (
        lambda: packer.unpack(packed),
        lambda: copy.copy(packer.unpack(packed)),
        lambda: pickle.loads(pickle.dumps(packer.unpack(packed), pickle.HIGHEST_PROTOCOL)),
    ):
        back = make()
        assert back == loaded and loaded == back
        assert back.secrets.get("crm-token") == "s3cret"
        for name in Settings.__slots__:
            assert getattr(back, name) == getattr(loaded, name), name
    assert type(copy.copy(packer.unpack(packed))) is Settings  # a copy holds no packed parts
    changed = dataclasses.replace(packer.unpack(packed), public_url="https://other.example")
    assert changed.public_url == "https://other.example" and changed.dealer == loaded.dealer
    assert changed != loaded
    with pytest.raises(dataclasses.FrozenInstanceError):
        packer.unpack(packed).dealer = loaded.dealer  # type: ignore[misc]


def test_settings_that_do_not_pickle_are_not_packed(platform) -> None:
    client, _ = platform
    loaded = settings_of(client, "dealer-a")
    unpicklable = dataclasses.replace(loaded.dealer, info={**loaded.dealer.info, "x": lambda: None})
    settings = dataclasses.replace(loaded, dealer=unpicklable)
    assert SettingsPacker().pack(settings, 1) is None
