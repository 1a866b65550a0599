"""The load manager of a broker of a cluster, as Pulsar's ModularLoadManagerImpl runs: its load report,
and on the leader the shedding of load and the splitting of hot bundles.

Owns: the load data (load_manager.py's LoadData) kept up to date from the brokers' reports whenever the
store notifies a change under `/loadbalance/brokers` (Pulsar's `updateAll`); this broker's report,
measured every loadBalancerReportUpdateMinIntervalMillis and written when `need_broker_data_update` says
so, and at once when the bundles it owns change (so that the next assignment counts them); the choice of
a broker for a bundle nobody owns; on the leader, shedding every loadBalancerSheddingIntervalMinutes
(ThresholdShedder) and splitting hot bundles after each update of the load data (BundleSplitterTask),
both carried out by the bundles' owners (`BundleOwners`). loadBalancerEnabled=false stops the periodic
report, the shedding and the splits. Must not touch: the decisions themselves (load_manager.py, pure),
ownership, or the wire.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from magnetar.broker.cluster.brokers import BROKERS_ROOT, BrokerRegistry, LocalBrokerData
from magnetar.broker.cluster.bundles import Bundle, BundleDirectory, range_equally_divide
from magnetar.broker.cluster.leader import LeaderElection
from magnetar.broker.cluster.load_manager import (
    LoadData,
    LoadSettings,
    ThresholdShedder,
    find_bundles_to_split,
    need_broker_data_update,
    select_broker,
    select_broker_for_assignment,
)
from magnetar.broker.cluster.load_report import LoadedTopics, LoadSampler
from magnetar.broker.config import BrokerConfig
from magnetar.broker.topic_name import TopicName
from magnetar.clock import Clock
from magnetar.metadata.store import Notification

__all__ = ["BundleOwners", "ModularLoadManager", "REPORTING", "SHEDDING"]

log = logging.getLogger("magnetar.broker.cluster")

# The names the periodic tasks are spawned with.
REPORTING = "writing the load report"
SHEDDING = "load shedding"


class BundleOwners(Protocol):
    """The brokers that own bundles, as the leader asks them to unload or split one (this broker does it
    itself, the others over their admin API)."""

    async def unload(self, broker_id: str, owner: LocalBrokerData, bundle: Bundle) -> None: ...

    async def split(self, broker_id: str, owner: LocalBrokerData, bundle: Bundle, unload: bool) -> None: ...


class ModularLoadManager:
    def __init__(
        self,
        config: BrokerConfig,
        clock: Clock,
        registry: BrokerRegistry,
        bundles: BundleDirectory,
        leader: LeaderElection,
        topics: LoadedTopics,
        owners: BundleOwners,
        spawn: Callable[[Coroutine[Any, Any, None], str], object],
        cpu_time_s: Callable[[], float],
    ) -> None:
        self._config = config
        self._clock = clock
        self._registry = registry
        self._bundles = bundles
        self._leader = leader
        self._topics = topics
        self._owners = owners
        self._spawn = spawn
        self._sampler = LoadSampler(clock, cpu_time_s)
        self.load = LoadData()
        self._shedder = ThresholdShedder()
        # The report as last written (Pulsar's lastData), which the next one is compared with.
        self._written = dataclasses.replace(registry.data)
        # Bundles the leader asked to split, until no report shows them any more.
        self._splitting: set[str] = set()
        self._running = False
        # One update of the load data at a time: a notification meanwhile runs another after it.
        self._updating = False
        self._update_again = False

    @property
    def settings(self) -> LoadSettings:
        return LoadSettings.of(self._config)

    def start(self) -> None:
        self._running = True
        if self._config["loadBalancerEnabled"]:
            self._spawn(self._report_periodically(), REPORTING)
            self._spawn(self._shed_periodically(), SHEDDING)

    def stop(self) -> None:
        self._running = False

    # ------------------------------------------------------------------ the report

    async def write_report(self) -> None:
        """Measure this broker's load; write its report when it changed enough since the last one
        written, or that one is too old (`writeBrokerDataOnZooKeeper`)."""
        data = self._registry.data
        owned = list(data.bundles)
        cpu, stats = self._sampler.sample(self._topics.topic_counters(), self._bundle_name_of, owned)
        data.update_stats(cpu, stats)
        now_ms = self._clock.time_ms()
        if need_broker_data_update(self._written, data, now_ms, self.settings):
            await self._write(now_ms)

    def report_bundles(self, owned: list[Bundle]) -> None:
        """The bundles this broker owns changed: written at once, with the last figures measured (a bundle
        gained has none until the next measure)."""
        data = self._registry.data
        data.bundles = [str(bundle) for bundle in owned]
        data.num_bundles = len(owned)
        data.update_stats(data.cpu, {b: stats for b, stats in data.last_stats.items() if b in data.bundles})
        self._spawn(self._write(self._clock.time_ms()), "broker data update")

    async def _write(self, now_ms: int) -> None:
        data = self._registry.data
        data.last_update = now_ms
        self._written = dataclasses.replace(data)
        await self._registry.update()

    def _bundle_name_of(self, name: TopicName) -> str | None:
        bundle = self._bundles.known_bundle_of(name)
        return None if bundle is None else str(bundle)

    async def _report_periodically(self) -> None:
        """Pulsar's LoadReportUpdaterTask."""
        while self._running:
            await self._clock.sleep(self._config["loadBalancerReportUpdateMinIntervalMillis"] / 1000)
            try:
                await self.write_report()
            except Exception:
                log.exception("Writing the load report failed")

    # ------------------------------------------------------------------ the load data

    def on_notification(self, notification: Notification) -> None:
        """A broker's report changed, or the brokers did: update the load data (Pulsar's
        `handleDataNotification`)."""
        if notification.path.startswith(f"{BROKERS_ROOT}/") and self._running:
            self._spawn(self.update_all(), "load data update")

    async def update_all(self) -> None:
        """Read every live broker's report into the load data; on the leader, split the bundles found hot
        (`updateAll`, `checkNamespaceBundleSplit`)."""
        if self._updating:
            self._update_again = True
            return
        self._updating = True
        try:
            while True:
                self._update_again = False
                brokers = await self._registry.live_brokers()
                self.load.update(brokers)
                self._splitting &= {bundle for data in brokers.values() for bundle in data.last_stats}
                await self._split_hot_bundles(brokers)
                if not self._update_again:
                    return
        finally:
            self._updating = False

    def select_broker_for_assignment(self, bundle: Bundle, brokers: dict[str, LocalBrokerData]) -> str | None:
        """The live broker that gets `bundle`, which nobody owns (load_manager.py)."""
        self.load.update(brokers)
        return select_broker_for_assignment(str(bundle), brokers, self.load, self.settings)

    def forget(self, bundle: Bundle) -> None:
        """`bundle` is no more (it was split): no broker is assigned it, none is to get it."""
        self.load.preallocated.pop(str(bundle), None)
        self.load.affinity.pop(str(bundle), None)

    # ------------------------------------------------------------------ the leader: shedding

    async def _shed_periodically(self) -> None:
        """Pulsar's LoadSheddingTask, which runs on the leader only."""
        while self._running:
            await self._clock.sleep(self._config["loadBalancerSheddingIntervalMinutes"] * 60)
            if not self._leader.is_leader:
                continue
            try:
                await self.shed()
            except Exception:
                log.exception("Load shedding failed")

    async def shed(self) -> None:
        """`doLoadShedding`: the bundles the shedder chooses, each unloaded by its owner once a broker other
        than the owner is chosen to take it (it gets it at its next assignment)."""
        config = self._config
        if not (config["loadBalancerEnabled"] and config["loadBalancerSheddingEnabled"]):
            return
        brokers = await self._registry.live_brokers()
        if len(brokers) <= 1:
            log.info("Only 1 broker available: no load shedding will be performed")
            return
        settings = self.settings
        self.load.update(brokers)
        now_ms = self._clock.time_ms()
        self.load.forget_unloaded_before(now_ms - settings.shedding_grace_period_ms)
        for broker, names in self._shedder.find_bundles_for_unloading(self.load, settings).items():
            for name in names:
                destination = select_broker(name, brokers, self.load, settings)
                if destination is None or destination == broker:
                    log.info("Bundle %s stays on %s: no other broker would take it", name, broker)
                    continue
                if await self._unload(broker, brokers[broker], name, destination):
                    self.load.recently_unloaded[name] = now_ms

    async def _unload(self, broker: str, owner: LocalBrokerData, name: str, destination: str) -> bool:
        log.info("Unloading bundle %s from %s to %s", name, broker, destination)
        self.load.affinity[name] = destination
        try:
            await self._owners.unload(broker, owner, Bundle.from_name(name))
        except Exception:
            log.exception("Unloading bundle %s from %s failed", name, broker)
            self.load.affinity.pop(name, None)
            return False
        return True

    # ------------------------------------------------------------------ the leader: splitting

    async def _split_hot_bundles(self, brokers: dict[str, LocalBrokerData]) -> None:
        config = self._config
        if not (config["loadBalancerEnabled"] and config["loadBalancerAutoBundleSplitEnabled"]):
            return
        if not self._leader.is_leader or len(brokers) <= 1:
            return
        counts = {}
        for namespace in {Bundle.from_name(b).namespace for data in brokers.values() for b in data.last_stats}:
            counts[namespace] = len((await self._bundles.bundles(namespace)).bundles)
        for name, broker in find_bundles_to_split(self.load, counts, self.settings).items():
            bundle = Bundle.from_name(name)
            known = await self._bundles.bundles(bundle.namespace)
            if name in self._splitting or range_equally_divide(bundle) is None or bundle not in known.bundles:
                continue
            self._splitting.add(name)
            self.load.bundles.pop(name, None)
            unload = bool(config["loadBalancerAutoUnloadSplitBundlesEnabled"])
            log.info("Splitting bundle %s of %s (unloading the halves: %s)", name, broker, unload)
            try:
                await self._owners.split(broker, brokers[broker], bundle, unload)
            except Exception:
                log.exception("Splitting bundle %s failed", name)
