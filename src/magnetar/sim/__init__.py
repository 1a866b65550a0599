"""Deterministic simulations driven by one seed: of the ordering core alone, (`sim/shell`) of the
real broker's shell on virtual time, and (`sim/bookkeeper`) of the BookKeeper client against fake bookies.

Owns: the core's simulated world and its checkers (`world`, `checkers`), and the sweeps, replays and
reports of both simulators (`runner`, `report`, `__main__`). The core's world imports `magnetar.core`
(and the shared positions) only; the shell simulator runs the broker's own classes with the clock, the
storage engine's threads and the network replaced. The broker never imports this package; the
`magnetar sim` command runs it. `python -m magnetar.sim --seed N` replays one schedule exactly;
`magnetar sim` sweeps many, `--shell` for the broker.
Must not touch: ordering or the broker's behaviour: it drives them and checks what comes out.
"""
