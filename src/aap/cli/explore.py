"""``aap search``, ``aap vehicle``, ``aap dealer``: explore any AAP dealer from the terminal.

Thin wrappers over :class:`aap.client.AapClient`: tables for people, ``--json``
(the dealer's own response objects) for scripts.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

import click
import orjson
from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from aap.cli.check import BINDING_CHOICES, verify_option

if TYPE_CHECKING:
    from aap.client import AapClient
    from aap.client.discovery import Discovery
    from aap.client.models import DealerInfo, Listing, SearchPage, VehicleDetail

T = TypeVar("T")

CONDITIONS = ("new", "used", "cpo")


def client_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """URL argument and the connection options shared by the three commands."""
    decorators = [
        click.argument("url"),
        click.option(
            "--binding",
            default="a2a",
            show_default=True,
            type=click.Choice(BINDING_CHOICES),
            help="How to call the dealer.",
        ),
        click.option(
            "--mcp-version",
            default="2026-07-28",
            show_default=True,
            type=click.Choice(("2026-07-28", "2025-11-25")),
            help="MCP revision (with --binding mcp).",
        ),
        click.option("--poppy-client-id", metavar="URL", help="Personal-agent client_id (with --binding poppy)."),
        click.option(
            "--poppy-client-key",
            type=click.Path(exists=True, dir_okay=False),
            help="Its ES256 private key, PEM or JWK (with --binding poppy).",
        ),
        click.option("--poppy-key-id", metavar="KID", help="kid of that key in the agent's JWKS."),
        click.option("--json", "as_json", is_flag=True, help="Print the dealer's JSON response."),
        click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), help="Trust this CA bundle."),
        click.option("--insecure", is_flag=True, help="Do not verify TLS certificates."),
    ]
    for decorator in reversed(decorators):
        func = decorator(func)
    return func


def make_client(
    url: str,
    binding: str,
    mcp_version: str,
    poppy_client_id: str | None = None,
    poppy_client_key: str | None = None,
    poppy_key_id: str | None = None,
    ca_file: str | None = None,
    insecure: bool = False,
) -> AapClient:
    """An unopened :class:`AapClient` for the connection options of :func:`client_options`."""
    from aap.client import AapClient, PoppyIdentity  # httpx and JOSE: loaded only when a command runs

    identity = None
    if binding == "poppy":
        if not (poppy_client_id and poppy_client_key):
            raise click.UsageError("--binding poppy needs --poppy-client-id and --poppy-client-key")
        try:
            identity = PoppyIdentity.from_key_file(poppy_client_id, poppy_client_key, poppy_key_id)
        except (ValueError, TypeError) as exc:
            raise click.UsageError(f"cannot use --poppy-client-key: {exc}") from None
    return AapClient(
        url,
        binding=binding,
        mcp_protocol_version=mcp_version,
        poppy_identity=identity,
        verify=verify_option(ca_file, insecure),
    )


def opened(client: AapClient) -> Discovery:
    """What the client discovered when it opened (``async with`` opens it)."""
    assert client.discovery is not None
    return client.discovery


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run a client coroutine; AAP and protocol errors become a readable message and exit code 1."""
    from aap.client import AapClientError, AapRemoteError  # loaded only when a command runs

    try:
        return asyncio.run(coro)
    except AapRemoteError as exc:
        console = Console(stderr=True)
        console.print(f"[bold red]{exc.code}[/]: {exc.message}")
        for problem in exc.errors:
            console.print(f"  • {problem.get('instanceLocation') or '/'}: {problem.get('error')}")
        if exc.hint:
            console.print(f"  hint: {exc.hint}")
        sys.exit(1)
    except AapClientError as exc:
        Console(stderr=True).print(f"[bold red]error[/]: {exc}")
        sys.exit(1)


def echo_json(value: Any) -> None:
    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


def money(amount: Any, currency: str) -> str:
    return f"{amount:,} {currency}" if isinstance(amount, (int, float)) else "—"


def distance(value: Any, unit: str) -> str:
    return f"{value:,} {unit}" if isinstance(value, (int, float)) else "—"


def parse_filters(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--filters") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--filters")
    return value


def _common(values: list[str]) -> str | None:
    """The one value every row shares (a currency, a unit), else None."""
    return values[0] if values and all(v == values[0] for v in values) else None


#: Room the search table gives the rooftop (shortened with an ellipsis) and the vehicle name.
_ROOFTOP_MIN, _ROOFTOP_MAX, _VEHICLE_GOAL, _VEHICLE_MIN = 8, 24, 26, 16
_GAP = 2  # between two columns (no frame at the edges)


def results_table(title: str, cars: list[Listing], width: int = 80) -> Table:
    """One line per listing in a ``width``-column terminal (docs/client.md, "Command line").

    The unit and currency go to the header when every row shares them; a status other than
    ``available`` is said after the vehicle. Space goes first to the price, the mileage and the
    identifier (never wrapped or cut: it is pasted back into ``aap vehicle``), then to the
    vehicle name (up to 26 columns), then to the rooftop, shortened with an ellipsis; in a
    terminal too narrow for both, the rooftop column is left out and the vehicle name folds.
    """
    currency = _common([car.currency for car in cars if isinstance(car.price, (int, float))])
    unit = _common([car.mileage_unit for car in cars if isinstance(car.mileage, (int, float))])
    rows = []
    for car in cars:
        name = " ".join(str(v) for v in (car.year, car.make, car.model, car.trim) if v) or "—"
        if car.status and car.status != "available":
            name += f" ({car.status})"
        price = f"{car.price:,}" if isinstance(car.price, (int, float)) else "—"
        mileage = f"{car.mileage:,}" if isinstance(car.mileage, (int, float)) else "—"
        rows.append(
            [
                name,
                price if currency else money(car.price, car.currency),
                mileage if unit else distance(car.mileage, car.mileage_unit),
                car.rooftop or "—",
                car.vin or car.stock or car.vehicle_id or "—",
            ]
        )
    headers = [
        "Vehicle",
        f"Price {currency}" if currency else "Price",
        {"mi": "Miles", "km": "Km"}.get(unit or "", "Mileage"),
        "Rooftop",
        "VIN / stock",
    ]
    widths = [max([cell_len(h), *(cell_len(r[i]) for r in rows)]) for i, h in enumerate(headers)]
    left = width - widths[1] - widths[2] - widths[4] - 4 * _GAP  # for the vehicle and the rooftop
    rooftop = min(widths[3], _ROOFTOP_MAX, left - min(widths[0], _VEHICLE_GOAL))
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    table.add_column(headers[0], overflow="fold")
    table.add_column(headers[1], justify="right", no_wrap=True)
    table.add_column(headers[2], justify="right", no_wrap=True)
    if rooftop < _ROOFTOP_MIN and left - _ROOFTOP_MIN < _VEHICLE_MIN:  # too narrow for both
        del headers[3]
        for row in rows:
            del row[3]
    else:
        table.add_column(headers[3], overflow="ellipsis", no_wrap=True, width=max(rooftop, _ROOFTOP_MIN))
    table.add_column(headers[-1], no_wrap=True, min_width=widths[4])
    for row in rows:
        table.add_row(*row)
    return table


@click.command("search")
@client_options
@click.option("--make", multiple=True, help="Make (repeatable: values combine with OR).")
@click.option("--model", multiple=True, help="Model (repeatable).")
@click.option("--body", multiple=True, help="Body style, e.g. suv (repeatable).")
@click.option("--condition", multiple=True, type=click.Choice(CONDITIONS), help="Sale condition (repeatable).")
@click.option("--year-min", type=int)
@click.option("--year-max", type=int)
@click.option("--price-min", type=int)
@click.option("--price-max", type=int)
@click.option("--mileage-max", type=int)
@click.option("-q", "--query", help="Keyword tokens matched in make, model, trim, VIN, stock and features.")
@click.option("--filters", "filters_json", metavar="JSON", help="Any other filters as a JSON object (merged).")
@click.option("--sort", metavar="FIELD[:asc|desc]", help="e.g. price:asc, year:desc.")
@click.option("--limit", type=click.IntRange(1, 100), help="Page size.")
@click.option("--cursor", help="Continue from a previous next_cursor (same query).")
@click.option("--currency", help="Query currency, e.g. CAD.")
@click.option("--mileage-unit", type=click.Choice(("mi", "km")))
@click.option("--all", "walk_all", is_flag=True, help="Follow next_cursor through every page.")
@click.option("--max-results", default=1000, show_default=True, help="Stop --all after this many listings.")
def search_command(
    as_json,
    make,
    model,
    body,
    condition,
    year_min,
    year_max,
    price_min,
    price_max,
    mileage_max,
    query,
    filters_json,
    sort,
    limit,
    cursor,
    currency,
    mileage_unit,
    walk_all,
    max_results,
    **conn,
) -> None:
    """Search a dealer's inventory.

    --json prints the dealer's response object; with --all, a JSON array of
    them, one per page (even when there is only one).
    """
    filters = parse_filters(filters_json)
    for key, value in (("make", make), ("model", model), ("body", body), ("condition", condition)):
        if value:
            filters[key] = list(value)
    for key, value in (
        ("year_min", year_min),
        ("year_max", year_max),
        ("price_min", price_min),
        ("price_max", price_max),
        ("mileage_max", mileage_max),
        ("query", query),
    ):
        if value is not None:
            filters[key] = value
    kwargs = {"sort": sort, "limit": limit, "currency": currency, "mileage_unit": mileage_unit}
    if walk_all and cursor:
        raise click.UsageError("--all starts from the first page; drop --cursor")

    async def go() -> tuple[list[SearchPage], Discovery]:
        async with make_client(**conn) as client:
            if not walk_all:
                page = await client.search(filters, cursor=cursor, **kwargs)
                return [page], opened(client)
            pages = []
            seen = 0
            async for page in client.iter_pages(filters, **kwargs):
                pages.append(page)
                seen += len(page.vehicles)
                if seen >= max_results:
                    break
            return pages, opened(client)

    pages, found = run(go())
    if as_json:  # one page: the dealer's response object; --all: always a list of them
        echo_json([p.raw for p in pages] if walk_all else pages[0].raw)
        return
    first, last = pages[0], pages[-1]
    cars = [car for page in pages for car in page.vehicles]
    console = Console()
    title = f"{found.name}: {first.total if first.total is not None else '?'} matching"
    console.print(results_table(title, cars, console.width))
    sort_used = first.sort or {}
    console.print(f"sorted by {sort_used.get('field')} {sort_used.get('order')}; page size {first.limit}")
    if last.next_cursor:
        console.print("next page: --cursor CURSOR, with CURSOR:")
        click.echo(last.next_cursor)  # alone on its line, unwrapped, so it can be pasted back


#: What a 17-character VIN looks like (ISO 3779: digits and capitals, no I, O or Q).
VIN_SHAPE = re.compile(r"[A-HJ-NPR-Z0-9]{17}")


def lookups(identifier: str) -> list[dict[str, str]]:
    """How to ask for ``identifier`` (a VIN or a stock number): the likelier field first."""
    as_vin, as_stock = {"vin": identifier}, {"stock": identifier}
    return [as_vin, as_stock] if VIN_SHAPE.fullmatch(identifier) else [as_stock, as_vin]


@click.command("vehicle")
@client_options
@click.argument("identifier", metavar="VIN_OR_STOCK", required=False)
@click.option("--vin")
@click.option("--stock")
@click.option("--vehicle-id")
def vehicle_command(as_json, identifier, vin, stock, vehicle_id, **conn) -> None:
    """Show one listing by VIN or stock number (VIN_OR_STOCK), or by --vin, --stock or --vehicle-id.

    VIN_OR_STOCK is asked for as a VIN when it looks like one (17 characters, no I, O or Q),
    else as a stock number, and as the other when the dealer has no such listing.
    """
    if identifier is not None and (vin or stock or vehicle_id):
        raise click.UsageError("give VIN_OR_STOCK or --vin/--stock/--vehicle-id, not both")
    if not (identifier or vin or stock or vehicle_id):
        raise click.UsageError("give VIN_OR_STOCK, --vin, --stock or --vehicle-id")

    async def go() -> VehicleDetail:
        from aap.client import VehicleNotFoundError  # loaded only when a command runs

        async with make_client(**conn) as client:
            if identifier is None:
                return await client.vehicle(vin=vin, stock=stock, vehicle_id=vehicle_id)
            first, other = lookups(identifier)
            try:
                return await client.vehicle(**first)
            except VehicleNotFoundError as missing:
                if missing.details.get("matches"):  # several listings: the dealer's answer stands
                    raise
                try:
                    return await client.vehicle(**other)
                except VehicleNotFoundError:
                    raise missing from None

    detail = run(go())
    if as_json:
        echo_json(detail.raw)
        return
    car = detail.vehicle
    table = Table(title=car.title or "Vehicle", show_header=False)
    table.add_column("Field", style="bold")
    table.add_column("Value", overflow="fold")
    for key, value in car.raw.items():
        if isinstance(value, (dict, list)):
            value = orjson.dumps(value).decode()
        table.add_row(key, str(value))
    Console().print(table)
    if detail.message:
        Console().print(detail.message)


@click.command("dealer")
@client_options
@click.option("--dealer-id", help="A seller id from a listing (aggregate endpoints).")
def dealer_command(as_json, dealer_id, **conn) -> None:
    """Show the dealer's public profile and rooftops."""

    async def go() -> tuple[DealerInfo, Discovery]:
        async with make_client(**conn) as client:
            return await client.dealer_information(dealer_id), opened(client)

    info, found = run(go())
    if as_json:
        echo_json(info.raw)
        return
    console = Console()
    console.print(f"[bold]{info.name}[/]" + (f"  (dealer_id {info.dealer_id})" if info.dealer_id else ""))
    if info.welcome_message:
        console.print(info.welcome_message)
    table = Table(title="Rooftops")
    for column in ("Name", "Address", "Phone", "Time zone", "Services"):
        table.add_column(column, overflow="fold")
    for rooftop in info.rooftops:
        address = rooftop.get("address") or {}
        place = ", ".join(
            str(address[k]) for k in ("address_line_1", "city", "state", "zip", "country") if address.get(k)
        )
        phones = ", ".join(p.get("value", "") for p in rooftop.get("phones") or [])
        table.add_row(
            rooftop.get("name", ""),
            place or "—",
            phones or "—",
            rooftop.get("timezone") or "—",
            ", ".join(rooftop.get("capabilities") or []) or "—",
        )
    console.print(table)
    console.print(f"agent card: {found.card_url}")
    if found.mcp_url:
        console.print(f"MCP: {found.mcp_url}")
    if found.llms_txt_url:
        console.print(f"llms.txt: {found.llms_txt_url}")


COMMANDS = (search_command, vehicle_command, dealer_command)
