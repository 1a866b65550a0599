"""`magnetar` entry point: one subcommand per verb, each handing its arguments to the module that owns it.

Subcommands: `standalone` (the broker), `broker` and `initialize-cluster-metadata` (a broker of a cluster
and the cluster's metadata, docs/cluster.md), `local-cluster` (ZooKeeper, bookies and brokers on this
machine, local_cluster.py), `admin …` (pulsar-admin over the HTTP admin API, admin.py),
`produce` and `consume` (pulsar-client over the official client, client.py), `sim` (the deterministic
simulator) and `perf` (load generator), whose own argparse mains receive their arguments untouched.
It also turns a broker that cannot start (a port taken, its data directory locked, a TLS file missing)
into one line that says what to do. Must not touch: any logic of those packages; this module only parses,
dispatches and reports.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import sys
from importlib.metadata import version
from typing import TYPE_CHECKING, Annotated

import typer

from magnetar.cli import admin, client, tokens
from magnetar.cli.help import SuggestingGroup, name_metavars
from magnetar.cli.output import error
from magnetar.cli.rest import AdminError

if TYPE_CHECKING:
    from magnetar.broker.config import BrokerConfig

__all__ = ["app", "main"]

app = typer.Typer(
    name="magnetar",
    help="A message broker that speaks Apache Pulsar's protocol, and the tools to run and operate it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help, as the argparse of sim and perf prints it: rich's boxes cut option names at 80 columns.
    rich_markup_mode=None,
    cls=SuggestingGroup,
)


def _version(show: bool) -> None:
    if show:
        print(f"magnetar {version('magnetar')}")
        raise typer.Exit()


@app.callback()
def _magnetar(
    _show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="print magnetar's version and exit")
    ] = False,
) -> None:
    """A message broker that speaks Apache Pulsar's protocol, and the tools to run and operate it."""


# sim and perf keep their own argparse parsers: every argument, --help included, goes to them as given.
_PASS_THROUGH = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command()
def standalone(
    data_dir: Annotated[str, typer.Option("--data-dir", help="where topics and cursors are stored")] = "data",
    config: Annotated[
        str | None, typer.Option("--config", help="a broker.conf-style file with Pulsar's setting names")
    ] = None,
    settings: Annotated[
        list[str] | None, typer.Option("--set", "-c", metavar="KEY=VALUE", help="override one setting (repeatable)")
    ] = None,
    port: Annotated[int | None, typer.Option("--port", help="brokerServicePort (default 6650)")] = None,
    http_port: Annotated[int | None, typer.Option("--http-port", help="webServicePort (default 8080)")] = None,
    log_level: Annotated[
        str | None,
        typer.Option("--log-level", help="debug, info, warning or error; overrides logLevel (default info)"),
    ] = None,
) -> None:
    """Run a magnetar broker."""
    overrides = _standalone_overrides(settings or [], port, http_port, log_level)
    _serve(data_dir, config, overrides, cluster=False)


@app.command("broker")
def cluster_broker(
    config: Annotated[str, typer.Option("--config", help="broker.conf: metadataStoreUrl names the cluster's store")],
    data_dir: Annotated[str, typer.Option("--data-dir", help="where topics and cursors are stored")] = "data",
    settings: Annotated[
        list[str] | None, typer.Option("--set", "-c", metavar="KEY=VALUE", help="override one setting (repeatable)")
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option("--log-level", help="debug, info, warning or error; overrides logLevel (default info)"),
    ] = None,
) -> None:
    """Run a broker of a cluster: it shares bundle ownership with the others in the metadata store."""
    overrides = _standalone_overrides(settings or [], None, None, log_level)
    _serve(data_dir, config, overrides, cluster=True)


@app.command("initialize-cluster-metadata")
def initialize_cluster_metadata(
    cluster: Annotated[str, typer.Option("--cluster", help="the cluster's name")],
    metadata_store: Annotated[str, typer.Option("--metadata-store", help="the metadata store's URL")],
    configuration_metadata_store: Annotated[
        str, typer.Option("--configuration-metadata-store", help="the configuration store's URL")
    ],
    web_service_url: Annotated[str, typer.Option("--web-service-url", help="the cluster's http:// URL")],
    broker_service_url: Annotated[str, typer.Option("--broker-service-url", help="the cluster's pulsar:// URL")],
    web_service_url_tls: Annotated[str | None, typer.Option("--web-service-url-tls")] = None,
    broker_service_url_tls: Annotated[str | None, typer.Option("--broker-service-url-tls")] = None,
    existing_bk_metadata_service_uri: Annotated[
        str | None, typer.Option("--existing-bk-metadata-service-uri", help="BookKeeper's, when it exists already")
    ] = None,
) -> None:
    """Write a new cluster's metadata, as Pulsar's initialize-cluster-metadata."""
    import asyncio

    from magnetar.broker.cluster.setup import ClusterMetadata
    from magnetar.broker.cluster.setup import initialize_cluster_metadata as initialize
    from magnetar.broker.cluster.store import open_metadata_store
    from magnetar.broker.config import ConfigError

    setup = ClusterMetadata(
        cluster,
        web_service_url,
        broker_service_url,
        web_service_url_tls,
        broker_service_url_tls,
        existing_bk_metadata_service_uri,
    )

    async def run() -> None:
        store = await open_metadata_store(metadata_store)
        configuration = (
            store
            if configuration_metadata_store == metadata_store
            else await open_metadata_store(configuration_metadata_store)
        )
        await initialize(setup, store, configuration)
        await store.close()
        if configuration is not store:
            await configuration.close()

    try:
        asyncio.run(run())
    except ConfigError as failure:
        error(str(failure))
        raise typer.Exit(2) from None
    print(f"Cluster metadata for '{cluster}' setup correctly")


@app.command("local-cluster")
def local_cluster(
    brokers: Annotated[int, typer.Option("--brokers", min=1, help="how many magnetar brokers")] = 3,
    bookies: Annotated[int, typer.Option("--bookies", min=1, help="how many BookKeeper bookies")] = 3,
    directory: Annotated[
        str | None,
        typer.Option("--dir", help="a new or empty directory for the data and logs (default: a new temporary one)"),
    ] = None,
    session_timeout_ms: Annotated[
        int,
        typer.Option(
            "--session-timeout-ms",
            min=1000,
            help="metadataStoreSessionTimeoutMillis: how long a broker gone keeps its topics",
        ),
    ] = 30000,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="broker i's brokerServicePort: this + i; 0: free ports")
    ] = 6650,
    http_port: Annotated[
        int, typer.Option("--http-port", min=0, max=65535, help="broker i's webServicePort: this + i; 0: free ports")
    ] = 8080,
) -> None:
    """Run a cluster on this machine until Ctrl-C: ZooKeeper, BookKeeper bookies and magnetar brokers."""
    import tempfile
    from pathlib import Path

    from magnetar.cli.local_bookkeeper import MissingJava
    from magnetar.cli.local_cluster import LocalCluster, serve_local_cluster
    from magnetar.cli.processes import PortUnavailableError, ProcessStartError

    _check_port_ranges(port, http_port, brokers)
    if directory is None:
        root = Path(tempfile.mkdtemp(prefix="magnetar-cluster-"))
    else:
        root = Path(directory)
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise typer.BadParameter(
                f"{directory} is not an empty directory: each run starts a new cluster in a new or empty one",
                param_hint="--dir",
            )
    cluster = LocalCluster(
        root.resolve(), brokers, bookies, session_timeout_ms=session_timeout_ms, port=port, http_port=http_port
    )
    try:
        code = serve_local_cluster(cluster)
    except PortUnavailableError as failure:
        error(f"{failure}: stop it, or choose other ports with --port and --http-port (0 picks free ones)")
        raise typer.Exit(1) from None
    except (MissingJava, ProcessStartError) as failure:
        error(str(failure))
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def _check_port_ranges(port: int, http_port: int, brokers: int) -> None:
    """Each range of `brokers` ports fits below 65536, and the two do not overlap."""
    for option, first in (("--port", port), ("--http-port", http_port)):
        if first and first + brokers - 1 > 65535:
            raise typer.BadParameter(f"{first} + {brokers} brokers passes port 65535", param_hint=option)
    if port and http_port and abs(port - http_port) < brokers:
        raise typer.BadParameter(
            f"the brokers' ports {port}.. and their HTTP ports {http_port}.. overlap", param_hint="--http-port"
        )


def _load_config(path: str | None, overrides: list[tuple[str, str]], cluster: bool) -> BrokerConfig:
    from magnetar.broker.config import ConfigError, load_config

    try:
        broker_config = load_config(path, overrides)
    except (ConfigError, OSError) as failure:
        error(str(failure))
        raise typer.Exit(2) from None
    if cluster and not broker_config["metadataStoreUrl"]:
        error(f"{path}: metadataStoreUrl is empty: a broker of a cluster needs the cluster's metadata store")
        raise typer.Exit(2)
    if not cluster and broker_config["metadataStoreUrl"]:
        error("metadataStoreUrl is set: run a broker of a cluster with magnetar broker --config")
        raise typer.Exit(2)
    return broker_config


def _serve(data_dir: str, path: str | None, overrides: list[tuple[str, str]], *, cluster: bool) -> None:
    import uvloop

    from magnetar.broker.config import ConfigError
    from magnetar.broker.logs import configure_logging
    from magnetar.cli.standalone import run_standalone
    from magnetar.cli.tuning import tune_process
    from magnetar.storage import DataDirectoryLockedError

    broker_config = _load_config(path, overrides, cluster)
    configure_logging(broker_config["logLevel"])
    for warning in broker_config.warnings:
        logging.getLogger("magnetar.broker").warning("%s", warning)
    # libuv's event loop: the same asyncio API, with its socket reads and writes, callbacks and
    # wake-ups from the commit thread in C; the broker's event loop spends ~6% less CPU per message
    # (docs/broker.md, "The process").
    # The process-wide tuning (collector, GIL switch interval) is this command's, applied once the
    # broker serves: library code leaves the interpreter's settings alone (cli/tuning.py).
    try:
        code = uvloop.run(run_standalone(broker_config, data_dir, on_started=tune_process))
    except ConfigError as failure:
        # A TLS file, found missing or unreadable only when the TLS ports start.
        error(str(failure))
        raise typer.Exit(2) from None
    except DataDirectoryLockedError:
        error(
            f"the data directory {data_dir} is in use: another broker runs on it (it holds {data_dir}/LOCK); "
            "stop that one, or start this one with another --data-dir (make run DATA=...)"
        )
        raise typer.Exit(1) from None
    except OSError as failure:
        bind = _BIND_FAILURE.search(str(failure))
        if bind is None:
            raise
        error(_bind_failure(failure, bind[1], int(bind[2]), broker_config))
        raise typer.Exit(1) from None
    raise typer.Exit(code)


def _standalone_overrides(
    settings: list[str], port: int | None, http_port: int | None, log_level: str | None
) -> list[tuple[str, str]]:
    """The settings the command line gives: every -c KEY=VALUE, then --port, --http-port and --log-level,
    which win over the file as -c does."""
    from magnetar.broker.logs import parse_log_level

    overrides = [(key, value) for key, equals, value in (item.partition("=") for item in settings) if equals]
    if len(overrides) != len(settings):
        raise typer.BadParameter("-c takes KEY=VALUE", param_hint="--set")
    if port is not None:
        overrides.append(("brokerServicePort", str(port)))
    if http_port is not None:
        overrides.append(("webServicePort", str(http_port)))
    if log_level is not None:
        try:
            overrides.append(("logLevel", parse_log_level(log_level)))
        except ValueError as failure:
            raise typer.BadParameter(str(failure), param_hint="--log-level") from None
    return overrides


# How asyncio and the admin server name the address a listener could not bind.
_BIND_FAILURE = re.compile(r"error while attempting to bind on address \('([^']*)', (\d+)\)")
# The option that moves each listener, as `make run` and `magnetar standalone` spell it.
_PORT_OPTIONS = {
    "brokerServicePort": "--port (make run PORT=...)",
    "webServicePort": "--http-port (make run HTTP_PORT=...)",
    "brokerServicePortTls": "-c brokerServicePortTls=...",
    "webServicePortTls": "-c webServicePortTls=...",
}


def _bind_failure(failure: OSError, host: str, port: int, config: BrokerConfig) -> str:
    """One line for a listener that could not bind: which port (and setting), why, and what to do."""
    setting = next((key for key in _PORT_OPTIONS if str(config[key]).strip() == str(port)), None)
    what = f"port {port} ({setting})" if setting else f"port {port}"
    if failure.errno == errno.EADDRINUSE:
        option = f" with {_PORT_OPTIONS[setting]}" if setting else ""
        return f"{what} on {host} is in use by another program: stop it, or choose another port{option}"
    reason = os.strerror(failure.errno) if failure.errno else str(failure)
    return f"cannot listen on {host} {what}: {reason}"


app.add_typer(admin.app, name="admin")
app.add_typer(tokens.app, name="tokens")
app.command("produce")(client.produce)
app.command("consume")(client.consume)


@app.command(context_settings=_PASS_THROUGH, add_help_option=False)
def sim(ctx: typer.Context) -> None:
    """Run seeded simulations of the ordering core (magnetar sim --help)."""
    from magnetar.sim.__main__ import main as sim_main

    raise typer.Exit(sim_main(ctx.args))


@app.command(context_settings=_PASS_THROUGH, add_help_option=False)
def perf(ctx: typer.Context) -> None:
    """Load a broker like pulsar-perf (magnetar perf produce|consume --help)."""
    from magnetar.client.perf import main as perf_main

    raise typer.Exit(perf_main(ctx.args))


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit code: 0 done, 1 failed (reason on stderr), 2 bad usage."""
    command = typer.main.get_command(app)
    name_metavars(command)
    try:
        command.main(args=argv, prog_name="magnetar", standalone_mode=True)
    except SystemExit as finished:
        code = finished.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except AdminError as failure:
        error(failure.reason)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
