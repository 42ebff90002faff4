"""``aap serve``: run the dealer agent (the demo dealer group when no config is given)."""

from __future__ import annotations

import click
from rich.text import Text

from aap.cli.common import config_option, console, database_option, load_or_fail
from aap.config.model import Settings

DEMO_LISTINGS = 2000


@click.command("serve")
@config_option
@database_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8000, show_default=True)
@click.option("--public-url", envvar="AAP_PUBLIC_URL", default=None, metavar="URL",
              help="Public base URL published in discovery documents (also AAP_PUBLIC_URL). "
                   "Default: the configuration's; for the demo, this server's own address.")
@click.option("--ssl-certfile", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Serve HTTPS directly with this certificate (PEM).")
@click.option("--ssl-keyfile", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Private key (PEM) of --ssl-certfile.")
@click.option("--workers", type=click.IntRange(min=1), default=1, show_default=True,
              help="Worker processes (they share the database).")
def command(config: str | None, database: str | None, host: str, port: int,
            public_url: str | None, ssl_certfile: str | None, ssl_keyfile: str | None,
            workers: int) -> None:
    """Serve the AAP dealer agent over HTTP(S)."""
    if bool(ssl_certfile) != bool(ssl_keyfile):
        raise click.UsageError("--ssl-certfile and --ssl-keyfile go together.")
    if config is None and public_url is None:
        public_url = own_url(host, port, tls=bool(ssl_certfile))
    overrides = {key: value for key, value in (("database", database), ("public_url", public_url)) if value}
    settings = load_or_fail(config, overrides)
    if config is None:
        seed_demo_inventory(settings)

    from aap.server.runner import SettingsSource, run  # the web stack: loaded only to serve

    console.print(Text(f"Serving {settings.agent.name} at {settings.base_url} "
                       f"(database {settings.database_url})"))
    # Each worker process loads the settings again from the same source (see aap.server.runner).
    run(SettingsSource(config, overrides), host=host, port=port, ssl_certfile=ssl_certfile,
        ssl_keyfile=ssl_keyfile, workers=workers)


def own_url(host: str, port: int, *, tls: bool) -> str:
    """The base URL of this server as a local client reaches it."""
    if host in ("", "0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"{'https' if tls else 'http'}://{host}:{port}"


def seed_demo_inventory(settings: Settings, count: int = DEMO_LISTINGS) -> int:
    """Load the demo feed into an empty database; returns the listings added (0 if not empty)."""
    from aap.inventory.demo import generate_listings  # loaded only when the demo is served
    from aap.store import open_stores

    stores = open_stores(settings.database_url)
    try:
        if stores.inventory.count():
            return 0
        console.print(Text(f"Empty database: loading {count} demo listings ..."))
        stats = stores.inventory.import_listings(generate_listings(count, settings=settings))
        return stats.inserted
    finally:
        stores.close()
