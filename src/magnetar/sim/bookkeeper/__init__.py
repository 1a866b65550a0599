"""A deterministic simulation of magnetar's BookKeeper client: the real client (ledgers, `BookieClient`, the
v2 codec) against fake bookies on the virtual loop, driven by a seed.

Owns: the fake bookie (`bookie`), the simulated connections and loop (`network`), the seeded schedule and
its checks of BookKeeper's safety properties (`world`), the replay and sweep command (`__main__`). Must not
touch: the client's behaviour; `magnetar.bookkeeper` never imports this package.
"""
