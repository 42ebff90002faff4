"""The ``aap`` command: a click group; each subcommand lives in its own module.

Adding a command is one line of :data:`COMMANDS`. A subcommand's module is
imported only when that command runs (or when ``aap --help`` lists them all):
``aap serve`` then never loads what the others need (progress bars, the buyer
client), which kept 2.3 MiB in every server process (docs/benchmarks.md, "Memory").
"""

from __future__ import annotations

import sys
from importlib import import_module

import click

from aap import AAP_VERSION, __version__

# httpx imports its own command-line tool (and with it rich's progress bars and tables) on
# `import httpx` whenever click and rich are installed, as they are here: 3 MiB in every
# server process (docs/benchmarks.md, "Memory"). Marked absent, httpx defines `httpx.main` as a
# message that its CLI is not installed. Only here, in the `aap` program (its server workers
# start from it too): a program that imports the `aap.client` SDK keeps its httpx as it is.
sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]

#: Command name -> "module:attribute" of its click command, in ``--help`` order.
COMMANDS: dict[str, str] = {
    "serve": "aap.cli.serve:command",
    "import": "aap.cli.import_:command",
    "init": "aap.cli.init:command",
    "demo-inventory": "aap.cli.demo_inventory:command",
    "check": "aap.cli.check:check_command",
    "search": "aap.cli.explore:search_command",
    "vehicle": "aap.cli.explore:vehicle_command",
    "dealer": "aap.cli.explore:dealer_command",
    "leads": "aap.cli.leads:leads",
    "deliver": "aap.cli.leads:deliver",
    "db": "aap.cli.db:command",
    "config": "aap.cli.config:command",
    "feeds": "aap.cli.feeds:feeds",
    "users": "aap.cli.users:users",
    "tenants": "aap.cli.tenants:tenants",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported from :data:`COMMANDS` when first asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attribute = target.split(":")
        command = getattr(import_module(module), attribute)
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise RuntimeError(f"{target} is not the click command {cmd_name!r}")
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="aap", message=f"%(prog)s %(version)s (AAP {AAP_VERSION})")
def main() -> None:
    """Publish an Auto Agent Protocol (AAP) 3.1 dealer agent from an inventory feed."""
