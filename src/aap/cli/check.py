"""``aap check URL``: conformance run against any AAP 3.1 endpoint (see docs/check.md)."""

from __future__ import annotations

import asyncio
import ssl
import sys

import click
from rich.console import Console

BINDING_CHOICES = ("a2a", "mcp", "poppy")


def verify_option(ca_file: str | None, insecure: bool) -> ssl.SSLContext | bool:
    """httpx ``verify``: a CA bundle (self-signed test deployments), off, or the system store."""
    if insecure:
        return False
    if ca_file:
        return ssl.create_default_context(cafile=ca_file)
    return True


@click.command("check")
@click.argument("url")
@click.option(
    "--allow-writes",
    is_flag=True,
    help="Also check lead.submit (writes one clearly marked test lead, then replays it).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (for CI).")
@click.option(
    "--binding",
    "bindings",
    multiple=True,
    type=click.Choice(BINDING_CHOICES),
    help="Exercise only these bindings (repeatable). Default: every advertised binding.",
)
@click.option(
    "--rule",
    "rules",
    multiple=True,
    metavar="GLOB",
    help="Run only rules whose id matches (repeatable), e.g. 'search.*'.",
)
@click.option(
    "--poppy-client-id",
    metavar="URL",
    help="HTTPS client_id of a personal-agent identity the dealer can fetch (enables Poppy calls).",
)
@click.option(
    "--poppy-client-key",
    type=click.Path(exists=True, dir_okay=False),
    help="ES256 private key of that identity (PEM or JWK JSON).",
)
@click.option("--poppy-key-id", metavar="KID", help="kid of that key in the identity's JWKS (default: the key's).")
@click.option(
    "--max-walk",
    default=500,
    show_default=True,
    type=click.IntRange(10, 100_000),
    help="Most listings walked by one pagination check.",
)
@click.option(
    "--ca-file",
    type=click.Path(exists=True, dir_okay=False),
    help="Trust this CA bundle (e.g. a self-signed development deployment).",
)
@click.option("--insecure", is_flag=True, help="Do not verify TLS certificates.")
@click.option(
    "--via",
    metavar="ORIGIN",
    help="Connect to ORIGIN (e.g. http://127.0.0.1:8000) for every request, keeping each URL's host in "
    "the Host header: check a platform's tenant behind its proxy, or before its DNS is set.",
)
@click.option("--timeout", default=30.0, show_default=True, help="Per-request timeout in seconds.")
@click.option("-v", "--verbose", is_flag=True, help="Show notes of passing rules too.")
def check_command(
    url,
    allow_writes,
    as_json,
    bindings,
    rules,
    poppy_client_id,
    poppy_client_key,
    poppy_key_id,
    max_walk,
    ca_file,
    insecure,
    timeout,
    via,
    verbose,
) -> None:
    """Check the AAP endpoint at URL (domain, base URL or agent-card URL) for conformance.

    Exits 0 when no rule fails, 1 when any rule fails or nothing answers at URL,
    2 on bad usage (including a --rule that matches no rule id).
    """
    # The checker, httpx and JOSE: loaded only when the command runs.
    from aap.check import CheckOptions, run_checks
    from aap.check.report import render_json, render_table
    from aap.check.rules import all_rules
    from aap.check.runner import unmatched_patterns
    from aap.client.poppy_auth import PoppyIdentity

    if via:
        from aap.client.via import ViaTransport

        try:
            ViaTransport(via)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
    unmatched = unmatched_patterns(rules)
    if unmatched:
        ids = "\n".join(f"  {rule.id}" for rule in all_rules())
        raise click.UsageError(f"--rule {', '.join(map(repr, unmatched))} matches no rule; the rule ids are:\n{ids}")

    if bool(poppy_client_id) != bool(poppy_client_key):
        raise click.UsageError("--poppy-client-id and --poppy-client-key go together")
    identity = None
    if poppy_client_id:
        try:
            identity = PoppyIdentity.from_key_file(poppy_client_id, poppy_client_key, poppy_key_id)
        except (ValueError, TypeError) as exc:
            raise click.UsageError(f"cannot use --poppy-client-key: {exc}") from None
    options = CheckOptions(
        allow_writes=allow_writes,
        bindings=tuple(bindings) or BINDING_CHOICES,
        poppy_identity=identity,
        max_walk=max_walk,
    )
    report = asyncio.run(
        run_checks(url, options, rules=rules, verify=verify_option(ca_file, insecure), timeout=timeout, via=via)
    )
    if as_json:
        click.echo(render_json(report))
    else:
        render_table(report, Console(), verbose=verbose)
    sys.exit(0 if report.ok else 1)
