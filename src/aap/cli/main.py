"""The ``aap`` command: a click group; each subcommand lives in its own module.

Adding a command is one ``main.add_command(...)`` line below; modules import
their heavy dependencies (the web server, the stores) only when they run.
"""

from __future__ import annotations

import click

from aap import AAP_VERSION, __version__
from aap.cli import check, db, demo_inventory, explore, feed_import, feeds, init, leads, serve, users
from aap.cli import config as config_cli


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aap", message=f"%(prog)s %(version)s (AAP {AAP_VERSION})")
def main() -> None:
    """Publish an Auto Agent Protocol (AAP) 3.1 dealer agent from an inventory feed."""


main.add_command(serve.command)
main.add_command(feed_import.command)
main.add_command(init.command)
main.add_command(demo_inventory.command)
main.add_command(check.check_command)
for _command in explore.COMMANDS:
    main.add_command(_command)
main.add_command(leads.leads)
main.add_command(leads.deliver)
main.add_command(db.command)
main.add_command(config_cli.command)
main.add_command(feeds.feeds)
main.add_command(users.users)
