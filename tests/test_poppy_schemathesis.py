"""schemathesis against ``/poppy/openapi.json`` with a valid guest token and a fresh DPoP proof
per request: no 5xx, and every response (status, content type, headers, body) matches the
document. Bounded by example count, for valid and for schema-violating bodies."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from aap.config.model import RateLimit
from poppy_client import PersonalAgent, PoppyClient, dpop_only
from poppy_env import PoppyDeployment, agent_host, poppy_ca  # noqa: F401

#: Every test here measured 0.5 s or more (pyproject.toml, the slow marker): left out of the fast lane.
pytestmark = pytest.mark.slow

EXAMPLES_PER_OPERATION = 12
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def fuzz_target(tmp_path_factory, poppy_ca, agent_host):
    deployment = PoppyDeployment(
        tmp_path_factory.mktemp("poppy-fuzz"), poppy_ca, inventory=20, rate_limit=RateLimit(enabled=False)
    )
    client = PoppyClient(PersonalAgent(agent_host, name="fuzz-agent"), deployment.url, poppy_ca.context())
    client.discover()
    client.start_session()
    yield deployment, client
    client.close()
    deployment.stop()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_native_api_conforms_to_its_openapi_document(fuzz_target, poppy_ca, mode):
    deployment, client = fuzz_target
    schema = schemathesis.openapi.from_dict(dpop_only(client.openapi))
    server = client.openapi["servers"][0]["url"]
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.definition.raw["operationId"] for op in operations} == {
        "dealerInformation",
        "inventoryFacets",
        "inventorySearch",
        "inventoryVehicle",
        "leadSubmit",
    }
    statuses: dict[str, set[int]] = {}
    for operation in operations:
        url = server + operation.path

        @settings(
            max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None, suppress_health_check=list(HealthCheck)
        )
        @given(case=operation.as_strategy(generation_mode=mode))
        def exercise(case):
            headers = client.auth_headers("POST", url)
            response = case.call(base_url=server, headers=headers, verify=str(poppy_ca.ca_file))
            statuses.setdefault(operation.path, set()).add(response.status_code)
            case.validate_response(response, checks=CHECKS, headers=headers)

        exercise()
    assert set(statuses) == {op.path for op in operations}
    if mode is GenerationMode.POSITIVE:
        assert 200 in statuses["/dealer.information"] and 200 in statuses["/inventory.search"]
    else:
        assert all(400 in found for found in statuses.values()), statuses
