"""Deterministic simulation of the ordering core, driven by one seed.

Imports `magnetar.core` only, and nothing at run time imports it. `python -m magnetar.sim --seed N`
replays one schedule exactly; `magnetar sim` sweeps many.
"""
