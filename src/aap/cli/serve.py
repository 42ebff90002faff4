"""``aap serve``: run the dealer agent (the demo dealer group when no configuration is found).

The order matters to an operator: the configuration is found and checked
(every problem at once, unset secret variables included), then the socket is
bound (a port in use is one line and exit status 2), then the published URL is
settled (docs/deployment.md, "Public URL"), and only then is the banner
printed and the server started on that socket.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click
from rich.text import Text

from aap.cli.common import (
    claim_for_demo,
    config_option,
    console,
    database_option,
    fail,
    is_demo,
    load_or_fail,
    log_options,
    open_stores_or_fail,
    redacted,
    reload_or_fail,
    require_moved,
)
from aap.config.model import Settings

if TYPE_CHECKING:
    from aap.store import Stores

DEMO_LISTINGS = 2000


@click.command("serve")
@config_option
@database_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8000,
    show_default=True,
    help="Port to listen on (0: any free port, published as chosen).",
)
@click.option(
    "--public-url",
    envvar="AAP_PUBLIC_URL",
    default=None,
    metavar="URL",
    help="Public base URL published in discovery documents (also AAP_PUBLIC_URL). "
    "Default: the configuration's; a loopback one on another port than "
    "--port becomes this server's own address.",
)
@click.option(
    "--ssl-certfile",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Serve HTTPS directly with this certificate (PEM).",
)
@click.option(
    "--ssl-keyfile",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Private key (PEM) of --ssl-certfile.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker processes (they share the database).",
)
@log_options
def command(
    config: str | None,
    database: str | None,
    host: str,
    port: int,
    public_url: str | None,
    ssl_certfile: str | None,
    ssl_keyfile: str | None,
    workers: int,
    log_level: str,
    log_format: str,
) -> None:
    """Serve the AAP dealer agent over HTTP(S)."""
    if bool(ssl_certfile) != bool(ssl_keyfile):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together.")
    overrides = {key: value for key, value in (("database", database), ("public_url", public_url)) if value}
    settings = load_or_fail(config, overrides, require_secrets=True)

    # The web stack: loaded only to serve.
    from aap.server.app import PublicUrlError, check_public_url
    from aap.server.listen import ListenError, bind, local_public_url, own_url
    from aap.server.runner import SettingsSource, run

    try:
        sock = bind(host, port)
    except ListenError as exc:
        fail(str(exc), code=2)
    bound = [sock]
    try:  # until the server runs, a refusal closes what was bound (nothing else would serve it)
        metrics_sock = None
        if settings.metrics_listen:
            try:
                metrics_sock = bind(*settings.metrics_listen)
            except ListenError as exc:
                fail(str(exc), code=2)
            bound.append(metrics_sock)
        port = sock.getsockname()[1]
        tls = bool(ssl_certfile)
        if public_url is not None:  # given for this run: a statement of intent, published as given
            served = None
        elif is_demo(settings):  # the demo's public_url is a placeholder: it lives where it is served
            served = own_url(host, port, tls=tls)
        else:
            served = local_public_url(settings.public_url, host, port, tls=tls)
        if served is not None and served != settings.public_url and not is_demo(settings):
            console.print(
                Text(
                    f"public_url {settings.public_url} is a loopback address other than this "
                    f"server's; publishing {served} instead.",
                    style="yellow",
                )
            )
        if served is not None and served != settings.public_url:
            overrides["public_url"] = served
            settings = reload_or_fail(settings, overrides)
        try:
            check_public_url(settings.public_url)
        except PublicUrlError as exc:
            fail(f"Cannot serve: {exc}")

        if settings.platform is not None:
            _platform_banner(settings)
        else:
            _agent_banner(settings)
    except BaseException:
        for opened in bound:
            opened.close()
        raise

    if metrics_sock is not None:
        metrics_host, metrics_port = metrics_sock.getsockname()[:2]
        console.print(Text(f"Metrics: {own_url(metrics_host, metrics_port, tls=False)}/metrics (not on {port})"))
    # Each worker process loads the settings again from the same source (see aap.server.runner).
    run(
        SettingsSource(settings.source_path, overrides),
        host=host,
        port=port,
        sock=sock,
        metrics_sock=metrics_sock,
        ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile,
        workers=workers,
        log_level=log_level,
        log_format=log_format,
    )


def _platform_banner(settings: Settings) -> None:
    """What a platform deployment serves (its tenants are in its database: docs/platform.md)."""
    # The store: loaded only when a command needs it (aap.cli.main).
    from aap.store import open_platform_database
    from aap.store.platform import PlatformStore

    assert settings.platform is not None
    try:
        db = open_platform_database(settings.database_url)
    except Exception as exc:
        fail(f"Cannot open the database {redacted(settings.database_url)}", [f"{type(exc).__name__}: {exc}"])
    try:
        tenants = PlatformStore(db).count()
        require_moved(db)
    finally:
        db.close()
    console.print(
        Text(
            f"Serving the platform {settings.platform.host}: {tenants} tenant(s) "
            f"(database {redacted(settings.database_url)})"
        )
    )
    console.print(
        Text(
            "Each tenant answers at its domains and at "
            f"{settings.platform.base_url}/t/ID/" + ("" if tenants else " (none yet: aap tenants add ID --config FILE)")
        )
    )


def _agent_banner(settings: Settings) -> None:
    """What a deployment that is one agent serves; the demo's inventory loaded on first start."""
    stores = open_stores_or_fail(settings)
    try:
        if is_demo(settings):
            if not claim_for_demo(stores, settings):
                fail(
                    f"The database {redacted(settings.database_url)} holds inventory the demo dealer "
                    "group did not load; the demo never serves it as its own.",
                    ["serve it with its configuration (--config), or give the demo another database"],
                )
            seed_demo_inventory(settings, stores)
        no_accounts = settings.web.console and not stores.console.users()
    finally:
        stores.close()
    console.print(
        Text(f"Serving {settings.agent.name} at {settings.base_url} (database {redacted(settings.database_url)})")
    )
    pages = ([f"public page {settings.base_url}/"] if settings.web.public_page else []) + (
        [f"staff console {settings.base_url}/console/"] if settings.web.console else []
    )
    if pages:
        console.print(
            Text(
                "Browse: "
                + ", ".join(pages)
                + (" (no account yet: aap users add EMAIL --role admin)" if no_accounts else "")
            )
        )


def seed_demo_inventory(settings: Settings, stores: Stores, count: int = DEMO_LISTINGS) -> int:
    """Load the demo feed into an empty database; returns the listings added (0 if not empty)."""
    from aap.inventory.demo import generate_listings  # loaded only when the demo is served

    if stores.inventory.count():
        return 0
    console.print(Text(f"Empty database: loading {count} demo listings ..."))
    stats = stores.inventory.import_listings(generate_listings(count, settings=settings))
    return stats.inserted
