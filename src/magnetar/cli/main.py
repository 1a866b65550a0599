"""`magnetar` entry point: one subcommand per verb, each handing its arguments to the package that owns it.

Subcommands: `standalone` (the broker), `topics create-partitioned-topic` (offline, on a stopped
broker's data directory, until the admin API exists), `sim` (the deterministic simulator), `perf` (load generator).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

__all__ = ["main"]

USAGE = """usage: magnetar <command> [options]

commands:
  standalone   run a broker (magnetar standalone --help)
  topics       create-partitioned-topic on a stopped broker's data directory
  sim          run seeded simulations of the ordering core (magnetar sim --help)
  perf         load a broker like pulsar-perf (magnetar perf produce|consume --help)
"""


def _standalone(argv: list[str]) -> int:
    from magnetar.broker.config import ConfigError, load_config
    from magnetar.broker.server import run_standalone

    parser = argparse.ArgumentParser(prog="magnetar standalone", description="Run a magnetar broker.")
    parser.add_argument("--data-dir", default="data", help="where topics and cursors are stored (default ./data)")
    parser.add_argument("--config", help="a broker.conf-style file with Pulsar's setting names")
    parser.add_argument(
        "-c", "--set", action="append", default=[], metavar="KEY=VALUE", help="override one setting (repeatable)"
    )
    parser.add_argument("--port", type=int, help="brokerServicePort (default 6650)")
    parser.add_argument("--http-port", type=int, help="webServicePort (default 8080)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(argv)
    overrides = [tuple(item.split("=", 1)) for item in args.set if "=" in item]
    if len(overrides) != len(args.set):
        parser.error("-c takes KEY=VALUE")
    if args.port is not None:
        overrides.append(("brokerServicePort", str(args.port)))
    if args.http_port is not None:
        overrides.append(("webServicePort", str(args.http_port)))
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = load_config(args.config, overrides)
    except (ConfigError, OSError) as error:
        print(f"magnetar: {error}", file=sys.stderr)
        return 2
    return asyncio.run(run_standalone(config, args.data_dir))


def _topics(argv: list[str]) -> int:
    from magnetar.broker.topic_name import InvalidTopicName, TopicName
    from magnetar.storage import ManagedLedgerFactory, StorageError

    parser = argparse.ArgumentParser(prog="magnetar topics")
    sub = parser.add_subparsers(dest="verb", required=True)
    create = sub.add_parser("create-partitioned-topic", help="declare a partitioned topic (broker stopped)")
    create.add_argument("topic")
    create.add_argument("-p", "--partitions", type=int, required=True)
    create.add_argument("--data-dir", default="data")
    args = parser.parse_args(argv)

    async def run() -> int:
        try:
            name = TopicName.parse(args.topic)
            factory = await ManagedLedgerFactory.open(args.data_dir)
        except (InvalidTopicName, StorageError) as error:
            print(f"magnetar: {error}", file=sys.stderr)
            return 2
        try:
            await factory.metadata.ensure_defaults(factory.config.clusterName)
            await factory.metadata.create_partitioned_topic(str(name), args.partitions)
        except (StorageError, ValueError) as error:
            print(f"magnetar: {error}", file=sys.stderr)
            return 1
        finally:
            await factory.close()
        print(f"created {name} with {args.partitions} partitions")
        return 0

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "standalone":
        return _standalone(rest)
    if command == "topics":
        return _topics(rest)
    if command == "sim":
        from magnetar.sim.__main__ import main as sim_main

        return sim_main(rest)
    if command == "perf":
        from magnetar.perf import main as perf_main

        return perf_main(rest)
    print(f"magnetar: unknown command {command!r}\n{USAGE}", end="", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
