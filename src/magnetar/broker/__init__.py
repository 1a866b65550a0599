"""The broker: an asyncio shell that serves the Pulsar protocol and carries out the core's decisions.

All mutable broker state lives on one event loop. It feeds each subscription's dispatcher events
and carries out its decisions; it never decides ordering itself (docs/architecture.md).
"""
