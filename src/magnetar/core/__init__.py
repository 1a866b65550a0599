"""The ordering core: pure, deterministic state machines for subscriptions.

Nothing in this package touches asyncio, sockets, files or the wall clock; time arrives as a
parameter. The broker feeds it events and carries out the decisions it returns.
"""
