"""The OpenAPI 3.1 document of the provisioning API (``GET /_platform/openapi.json``).

It describes exactly what :mod:`aap.platform.api` serves — every operation, status, header
and body — and is tested against real answers (tests/test_platform_api.py validates them
with it and runs schemathesis on it).
"""

from __future__ import annotations

from typing import Any

from aap import __version__
from aap.config.credentials import SECRET_NAME
from aap.config.platform import TENANT_ID, PlatformSettings
from aap.tenant_secrets import MAX_SECRET_BYTES
from aap.tenants import MAX_CONFIG_BYTES, MAX_DOMAINS

API_PREFIX = "/_platform/v1"
OPENAPI_PATH = "/_platform/openapi.json"

_REF = "#/components/schemas/"
_RESPONSES = "#/components/responses/"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": _REF + name}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _hosts(description: str) -> dict[str, Any]:
    return {
        "type": "array",
        "maxItems": MAX_DOMAINS,
        "items": {"type": "string", "maxLength": 253},
        "description": description,
    }


def _tenant_properties(config: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "id": {"type": "string", "pattern": TENANT_ID.pattern},
        "domains": {
            "type": "array",
            "items": {"type": "string"},
            "description": "The host names the tenant is served at, in alphabetical order.",
        },
        "urls": {
            "type": "array",
            "items": {"type": "string", "format": "uri"},
            "description": "Where its agent is served: https://DOMAIN/ for each domain, then "
            "https://PLATFORM_HOST/t/ID/ (unless [platform] tenant_prefix is off).",
        },
        "a2a_tenant": {
            "type": ["string", "null"],
            "description": "The A2A `tenant` routing value its configuration declares, if any.",
        },
        "revision": {"type": "integer", "minimum": 1, "description": "Counted up on every change of the tenant."},
        "created_at": {"type": "string", "format": "date-time"},
        "updated_at": {"type": "string", "format": "date-time"},
        "state": {
            "type": "string",
            "enum": ["served", "suspended", "broken"],
            "description": "`suspended` by the operator (answered 503, background work paused, data kept); "
            "`broken`: its stored configuration, at this revision, failed to load in a worker (answered 503).",
        },
        "suspended_at": {"type": ["string", "null"], "format": "date-time"},
        "broken_reason": {
            "type": ["string", "null"],
            "description": "Why its configuration did not load: every problem, with its TOML path.",
        },
        "broken_at": {"type": ["string", "null"], "format": "date-time"},
    }
    if config:
        properties["config"] = {"type": "string", "description": "Its configuration (TOML), exactly as given."}
    return properties


def _object(properties: dict[str, Any], required: list[str], description: str = "") -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    if description:
        schema["description"] = description
    return schema


def _error_response(description: str, headers: dict[str, Any] | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {"description": description, "content": _json(_ref("Error"))}
    if headers:
        response["headers"] = headers
    return response


def _operation(
    operation_id: str,
    summary: str,
    ok: tuple[str, dict[str, Any]],
    errors: list[str],
    *,
    body: str | None = None,
    parameters: list[dict[str, Any]] | None = None,
    description: str = "",
) -> dict[str, Any]:
    status, response = ok
    operation: dict[str, Any] = {
        "operationId": operation_id,
        "summary": summary,
        "responses": {status: response, **{code: {"$ref": _RESPONSES + code} for code in errors}},
    }
    if description:
        operation["description"] = description
    if parameters:
        operation["parameters"] = parameters
    if body is not None:
        operation["requestBody"] = {"required": True, "content": _json(_ref(body))}
    return operation


_TENANT_ID_PARAMETER = {
    "name": "tenant_id",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": TENANT_ID.pattern},
    "description": "The tenant's id.",
}

_SECRET_NAME_PARAMETER = {
    "name": "name",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": SECRET_NAME.pattern},
    "description": "The secret's name, as the tenant's configuration names it (`token_secret = \"NAME\"`).",
}

_AUTHENTICATED = ["401", "429", "503"]
_WITH_BODY = ["400", "413", "415"]


def _create_or_replace(
    operation_id: str,
    summary: str,
    schema: str,
    answers: tuple[str, str],
    errors: list[str],
    *,
    body: str,
    description: str,
) -> dict[str, Any]:
    """A ``PUT`` that creates (201 with ``Location``) or replaces (200); ``answers`` describe the two."""
    created, replaced = answers
    operation = _operation(
        operation_id,
        summary,
        (
            "201",
            {
                "description": created,
                "headers": {"Location": {"required": True, "schema": {"type": "string"}}},
                "content": _json(_ref(schema)),
            },
        ),
        errors,
        body=body,
        description=description,
    )
    operation["responses"]["200"] = {"description": replaced, "content": _json(_ref(schema))}
    return operation


def _set_secret() -> dict[str, Any]:
    """``PUT .../secrets/{name}``: 201 for a new secret, 200 for a new value of one."""
    return _create_or_replace(
        "setSecret",
        "Set one of the tenant's secrets (sealed with the platform's key; never shown back).",
        "Secret",
        (
            "A new secret; every worker uses it within seconds.",
            "An earlier value replaced; every worker uses the new one within seconds.",
        ),
        [*_WITH_BODY, "404", *_AUTHENTICATED],
        body="SecretValue",
        description="A secret may be set before its tenant is added, so that the tenant's configuration "
        "finds every secret it names.",
    )


def _put_tenant() -> dict[str, Any]:
    """``PUT /tenants/{id}``: create or replace, idempotent (docs/platform.md, "Idempotent provisioning")."""
    return _create_or_replace(
        "putTenant",
        "Make the tenant exactly this: created when new (201), replaced when different, untouched when the same (200).",
        "Tenant",
        (
            "A new tenant, as registered.",
            "The tenant as replaced, or as it already was (its revision unchanged).",
        ),
        [*_WITH_BODY, "409", *_AUTHENTICATED],
        body="TenantConfig",
        description="The same body sent twice changes the tenant once (one revision, one audit entry): "
        "a tenant already exactly as sent is answered 200 as it is, nothing written.",
    )


#: The run of an import as the tenant's import history records it (``aap import --json``).
_IMPORT_RUN: dict[str, Any] = {
    "type": "object",
    "description": "The import as the tenant's import history records it (what `aap import --json` prints).",
    "properties": {
        "run_id": {"type": "string"},
        "trigger": {"type": "string"},
        "source": {"type": "string"},
        "outcome": {
            "type": "string",
            "enum": ["imported", "checked", "unchanged", "rejected", "refused", "failed"],
            "description": "`imported`; `checked`: a dry run that would import; `rejected` or `refused`: "
            "nothing was imported; `failed`: the feed could not be fetched.",
        },
        "message": {"type": ["string", "null"]},
        "rows": {"type": "integer"},
        "inserted": {"type": "integer"},
        "updated": {"type": "integer"},
        "unchanged": {"type": "integer"},
        "removed": {"type": "integer"},
        "skipped": {"type": "integer"},
        "warnings": {"type": "integer"},
        "total": {
            "type": ["integer", "null"],
            "description": "Listings available in total after the import (null when nothing was imported).",
        },
        "problems": {"type": "array", "items": {"type": "object"}, "description": "The first problems found."},
        "rejected_lines": {"type": "array", "items": {"type": "integer"}},
    },
    "required": ["outcome", "rows", "inserted", "updated", "unchanged", "removed", "skipped", "total", "problems"],
}

_FEED_MEDIA = (
    "application/x-ndjson",
    "text/csv",
    "application/xml",
    "application/gzip",
    "application/zip",
    "application/octet-stream",
)


def _upload_parameters() -> list[dict[str, Any]]:
    flag = {"type": "string", "enum": ["true", "false"], "default": "false"}
    described = {
        "format": "The feed's format (docs/feeds.md); default: detected from the content, as `aap import`.",
        "dealer_id": "The seller of every listing that names none; with a replace, only this seller's listings.",
        "rooftop": "The rooftop of rows that name none (one of the tenant's rooftops).",
        "dry_run": "Check and count everything; write nothing.",
        "skip_invalid": "Import the valid rows; the others are reported.",
        "strict": "A wrong VIN check digit is an error, not a warning.",
        "allow_shrink": "Let a replace remove more than half of the inventory.",
        "allow_field_loss": "Lift the content guard (docs/feeds.md, Safety).",
    }
    schemas: dict[str, dict[str, Any]] = {
        "format": {"type": "string", "enum": ["aap", "google-vehicle", "meta-vehicle", "dealer-csv", "jsonl", "csv"]},
        "dealer_id": {"type": "string", "minLength": 1, "maxLength": 200},
        "rooftop": {"type": "string", "minLength": 1, "maxLength": 200},
    }
    return [
        {"name": name, "in": "query", "required": False, "schema": schemas.get(name, flag), "description": text}
        for name, text in described.items()
    ]


def _upload(operation_id: str, summary: str, description: str) -> dict[str, Any]:
    operation = _operation(
        operation_id,
        summary,
        ("200", {"description": "Imported (or, in a dry run, would be).", "content": _json(_ref("ImportRun"))}),
        ["400", "404", "409", "413", "415", "422", *_AUTHENTICATED],
        parameters=_upload_parameters(),
        description=description + " The body is bounded by the platform's `[server] max_body_bytes`.",
    )
    operation["requestBody"] = {
        "required": True,
        "content": {media: {"schema": {"type": "string", "format": "binary"}} for media in _FEED_MEDIA},
    }
    return operation


def _inventory_paths() -> dict[str, Any]:
    """A tenant's inventory, through the import pipeline of `aap import --tenant ID`."""
    return {
        f"{API_PREFIX}/tenants/{{tenant_id}}/inventory": {
            "parameters": [_TENANT_ID_PARAMETER],
            "put": _upload(
                "replaceInventory",
                "Import a feed file as the tenant's whole inventory (listings missing from it are removed).",
                "As `aap import FILE --tenant ID --replace`: every row checked first, a refused feed publishes "
                "nothing, a replace never removes more than half of the inventory unless allow_shrink.",
            ),
            "post": _upload(
                "mergeInventory",
                "Import a feed file's listings into the tenant's inventory (added or updated; the others stay).",
                "As `aap import FILE --tenant ID`: every row checked first, a refused feed publishes nothing.",
            ),
        },
        f"{API_PREFIX}/tenants/{{tenant_id}}/feeds/{{name}}/run": {
            "parameters": [
                _TENANT_ID_PARAMETER,
                {
                    "name": "name",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "maxLength": 200},
                    "description": "The name of one of the tenant's [[feeds]].",
                },
            ],
            "post": _operation(
                "runFeed",
                "Fetch and import one of the tenant's configured feeds now, as its schedule would.",
                ("200", {"description": "Imported.", "content": _json(_ref("ImportRun"))}),
                ["404", "409", "422", "502", *_AUTHENTICATED],
            ),
        },
    }


# -- a customer's erasure (docs/leads.md, "Erasure and retention") --------------------------------
def _erasure_paths() -> dict[str, Any]:
    """``POST .../erasures``: erase one customer's leads from one tenant (a privacy request);
    201 when erased, 200 for a dry run."""
    operation = _operation(
        "eraseCustomer",
        "Erase every lead of one customer from the tenant (a privacy request), or with `dry_run` "
        "show what would be erased.",
        (
            "201",
            {
                "description": "Erased and recorded (also when no lead matched).",
                "content": _json(_ref("Erasure")),
            },
        ),
        [*_WITH_BODY, "404", *_AUTHENTICATED],
        body="ErasureRequest",
        description="Leads whose customer has this e-mail address or this phone number are deleted with "
        "their consent records, appointment seats, deliveries (pending ones cancelled), delivery attempts "
        "and notes; their idempotency records are anonymised. The record keeps a keyed digest of the "
        "address and number, never the values. A dry run answers 200 and changes nothing.",
    )
    operation["responses"]["200"] = {
        "description": "A dry run: what would be erased (`erasure_id` null); nothing changed.",
        "content": _json(_ref("Erasure")),
    }
    return {f"{API_PREFIX}/tenants/{{tenant_id}}/erasures": {"parameters": [_TENANT_ID_PARAMETER], "post": operation}}


def _erasure_schemas() -> dict[str, Any]:
    return {
        "ErasureRequest": _object(
            {
                "email": {"type": "string", "maxLength": 320, "description": "The customer's e-mail address."},
                "phone": {"type": "string", "maxLength": 64, "description": "The customer's phone number (E.164)."},
                "dry_run": {"type": "boolean", "description": "Show what would be erased; change nothing."},
            },
            [],
            "At least one of email and phone.",
        ),
        "Erasure": _object(
            {
                "erasure_id": {"type": ["string", "null"], "description": "null for a dry run."},
                "at": {"type": "string", "format": "date-time"},
                "actor": {"type": "string"},
                "reason": {"type": "string", "enum": ["request", "retention"]},
                "subject_digest": {"type": ["string", "null"], "description": "HMAC-SHA256 of the e-mail and phone."},
                "lead_count": {"type": "integer"},
                "lead_ids": {"type": "array", "items": {"type": "string"}},
                "counts": {
                    "type": "object",
                    "additionalProperties": {"type": "integer"},
                    "description": "Rows per table; `cancelled_deliveries`: those not sent yet.",
                },
                "dry_run": {"type": "boolean"},
            },
            ["erasure_id", "at", "actor", "reason", "subject_digest", "lead_count", "lead_ids", "counts", "dry_run"],
        ),
    }


def openapi_document(platform: PlatformSettings) -> dict[str, Any]:
    """The document, its server the platform host."""
    tenant = _ref("Tenant")
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"aap provisioning API of {platform.host}",
            "version": __version__,
            "description": "Add, change and remove the dealer agents a platform deployment hosts "
            '(docs/platform.md, "The provisioning API"). Every request but this document\'s carries '
            f"`Authorization: Bearer TOKEN`, the token in the platform's ${platform.api_token_env}; "
            "without one configured every operation answers 503. Every change is served by every "
            "worker within seconds, without a restart.",
        },
        "servers": [{"url": platform.base_url}],
        "security": [{"bearer": []}],
        "paths": {
            OPENAPI_PATH: {
                "get": {
                    "operationId": "openapi",
                    "summary": "This document.",
                    "security": [],
                    "responses": {
                        "200": {"description": "The OpenAPI 3.1 document.", "content": _json({"type": "object"})},
                        "429": {"$ref": _RESPONSES + "429"},
                        "503": {"$ref": _RESPONSES + "503"},
                    },
                }
            },
            f"{API_PREFIX}/tenants": {
                "get": _operation(
                    "listTenants",
                    "The tenants in id order, a page at a time.",
                    ("200", {"description": "A page of tenants.", "content": _json(_ref("TenantList"))}),
                    ["400", *_AUTHENTICATED],
                    parameters=[
                        {
                            "name": "after",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "string", "pattern": TENANT_ID.pattern, "maxLength": 48},
                            "description": "Tenants after this id (the previous page's `next_after`).",
                        },
                        {
                            "name": "limit",
                            "in": "query",
                            "required": False,
                            "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
                        },
                    ],
                ),
                "post": _operation(
                    "createTenant",
                    "Add a tenant: its configuration is checked whole, its namespace made, then it is served.",
                    (
                        "201",
                        {
                            "description": "The tenant as registered.",
                            "headers": {
                                "Location": {"required": True, "schema": {"type": "string"}},
                            },
                            "content": _json(tenant),
                        },
                    ),
                    [*_WITH_BODY, "409", *_AUTHENTICATED],
                    body="NewTenant",
                    parameters=[
                        {
                            "name": "Idempotency-Key",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string", "minLength": 1, "maxLength": 255},
                            "description": "Makes a retry safe: when the tenant now exists exactly as sent, the "
                            "answer is 201 with it, as the first request's was, instead of 409.",
                        }
                    ],
                ),
            },
            f"{API_PREFIX}/tenants/{{tenant_id}}": {
                "parameters": [_TENANT_ID_PARAMETER],
                "get": _operation(
                    "getTenant",
                    "One tenant, its configuration text included.",
                    ("200", {"description": "The tenant.", "content": _json(tenant)}),
                    ["404", *_AUTHENTICATED],
                ),
                "put": _put_tenant(),
                "delete": _operation(
                    "removeTenant",
                    "Stop serving the tenant everywhere and delete its data.",
                    ("204", {"description": "Removed; every worker answers 404 for it within seconds."}),
                    ["404", *_AUTHENTICATED],
                ),
            },
            **{
                f"{API_PREFIX}/tenants/{{tenant_id}}/{verb}": {
                    "parameters": [_TENANT_ID_PARAMETER],
                    "post": _operation(
                        f"{verb}Tenant",
                        summary,
                        ("200", {"description": "The tenant as it is now.", "content": _json(tenant)}),
                        ["404", *_AUTHENTICATED],
                    ),
                }
                for verb, summary in (
                    (
                        "suspend",
                        "Stop serving the tenant, keeping its data: 503 with Retry-After on every surface, its"
                        " feeds and lead deliveries paused (suspending a suspended tenant changes nothing).",
                    ),
                    ("resume", "Serve a suspended tenant again; its waiting deliveries and feeds are due at once."),
                )
            },
            f"{API_PREFIX}/tenants/{{tenant_id}}/domains": {
                "parameters": [_TENANT_ID_PARAMETER],
                "put": _operation(
                    "replaceDomains",
                    "Serve the tenant at exactly these host names.",
                    ("200", {"description": "The tenant as changed.", "content": _json(tenant)}),
                    [*_WITH_BODY, "404", *_AUTHENTICATED],
                    body="DomainSet",
                ),
                "patch": _operation(
                    "changeDomains",
                    "Add and remove host names of the tenant, in one change.",
                    ("200", {"description": "The tenant as changed.", "content": _json(tenant)}),
                    [*_WITH_BODY, "404", *_AUTHENTICATED],
                    body="DomainChange",
                ),
            },
            **_inventory_paths(),
            f"{API_PREFIX}/tenants/{{tenant_id}}/secrets": {
                "parameters": [_TENANT_ID_PARAMETER],
                "get": _operation(
                    "listSecrets",
                    "The names of the tenant's secrets, when each was set and the key that sealed it.",
                    ("200", {"description": "Never a value.", "content": _json(_ref("SecretList"))}),
                    ["404", *_AUTHENTICATED],
                ),
            },
            **_erasure_paths(),
            f"{API_PREFIX}/tenants/{{tenant_id}}/secrets/{{name}}": {
                "parameters": [_TENANT_ID_PARAMETER, _SECRET_NAME_PARAMETER],
                "put": _set_secret(),
                "delete": _operation(
                    "removeSecret",
                    "Remove one of the tenant's secrets.",
                    ("204", {"description": "Removed."}),
                    ["404", *_AUTHENTICATED],
                ),
            },
        },
        "components": {
            "securitySchemes": {
                "bearer": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": f"The token in the platform's ${platform.api_token_env} (32 characters or more).",
                }
            },
            "schemas": {
                "Error": _object(
                    {
                        "error": _object(
                            {
                                "status": {"type": "integer"},
                                "message": {"type": "string"},
                                "problems": {
                                    "type": "array",
                                    "items": {"type": "string"},
                                    "description": "Every problem found, each with its path (the TOML path of a"
                                    " configuration's, the field of a body's).",
                                },
                                "id": {"type": "string", "description": "The id of an unexpected failure's log line."},
                                "run": _IMPORT_RUN,
                            },
                            ["status", "message"],
                        )
                    },
                    ["error"],
                ),
                "TenantSummary": _object(_tenant_properties(False), list(_tenant_properties(False))),
                "Tenant": _object(_tenant_properties(True), list(_tenant_properties(True))),
                "TenantList": _object(
                    {
                        "tenants": {"type": "array", "items": _ref("TenantSummary")},
                        "next_after": {
                            "type": ["string", "null"],
                            "description": "Pass as `after` for the next page; null on the last one.",
                        },
                    },
                    ["tenants", "next_after"],
                ),
                "NewTenant": _object(
                    {
                        "id": {
                            "type": "string",
                            "pattern": TENANT_ID.pattern,
                            "maxLength": 48,
                            "description": "1 to 48 lower-case letters, digits and '-': it names "
                            "https://PLATFORM_HOST/t/ID/ and the tenant's database namespace, and never changes.",
                        },
                        "config": {
                            "type": "string",
                            "maxLength": MAX_CONFIG_BYTES,
                            "description": "The tenant's configuration: the dealer-level tables of aap.toml "
                            f"(`aap init --tenant FILE`), at most {MAX_CONFIG_BYTES // 1024} KiB as UTF-8.",
                        },
                        "domains": _hosts("Host names to serve it at (lower case, each served by one tenant only)."),
                    },
                    ["id", "config"],
                ),
                "TenantConfig": _object(
                    {
                        "config": {"type": "string", "maxLength": MAX_CONFIG_BYTES},
                        "domains": _hosts(
                            "Every host name the tenant is to be served at; left out, an existing tenant keeps"
                            " its domains (a new one has none)."
                        ),
                    },
                    ["config"],
                    "The whole tenant: its configuration and (optionally) its domains.",
                ),
                "ImportRun": _IMPORT_RUN,
                "DomainSet": _object(
                    {"domains": _hosts("Every host name the tenant is to be served at.")}, ["domains"]
                ),
                "Secret": _object(
                    {
                        "name": {"type": "string", "pattern": SECRET_NAME.pattern},
                        "set_at": {"type": "string", "format": "date-time"},
                        "key_id": {"type": "string", "description": "The id of the platform key that sealed it."},
                    },
                    ["name", "set_at", "key_id"],
                    "A tenant secret as shown: never its value.",
                ),
                "SecretList": _object({"secrets": {"type": "array", "items": _ref("Secret")}}, ["secrets"]),
                "SecretValue": _object(
                    {
                        "value": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": MAX_SECRET_BYTES,
                            "description": f"The value, at most {MAX_SECRET_BYTES // 1024} KiB as UTF-8.",
                        }
                    },
                    ["value"],
                ),
                **_erasure_schemas(),
                "DomainChange": _object(
                    {"add": _hosts("Host names to serve it at too."), "remove": _hosts("Host names to stop serving.")},
                    [],
                    "At least one host name to add or remove.",
                ),
            },
            "responses": {
                "400": _error_response("The request was refused: every problem is listed."),
                "401": _error_response(
                    "No bearer token, or not the platform's.",
                    {"WWW-Authenticate": {"required": True, "schema": {"type": "string"}}},
                ),
                "404": _error_response("No such tenant (or secret)."),
                "409": _error_response("The tenant, or one of its domains, exists already."),
                "413": _error_response("The request body is larger than the API reads."),
                "415": _error_response("The request body is not of a media type the operation reads."),
                "422": _error_response(
                    "The feed was refused (its problems listed, the run in `run`): nothing was imported."
                ),
                "429": _error_response(
                    "Too many requests from this client address.",
                    {"Retry-After": {"required": True, "schema": {"type": "string", "pattern": "^[0-9]+$"}}},
                ),
                "502": _error_response("The feed's source could not be fetched (the run in `run`)."),
                "503": _error_response(
                    "The API is not configured (no token), the registry is not available, or the platform's "
                    "secret keys are missing or do not open a secret."
                ),
            },
        },
    }
