"""The shell simulator: the real broker (connections, consumers, subscriptions, topics, storage) on a
deterministic event loop, driven by simulated Pulsar clients over a simulated network.

Owns: virtual time (`loop`), an engine that commits and reads on the loop (`engine`), clients that
behave as the official ones do (`client`), and the seeded world with its checks (`world`).
Must not touch: the broker's behaviour. It runs the broker's own classes; nothing in the broker
imports this package.
"""
