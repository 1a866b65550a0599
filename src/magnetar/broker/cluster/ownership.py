"""Bundle ownership: who serves a bundle, as Pulsar's OwnershipCache keeps it.

Owns: acquiring a bundle (creating the ephemeral `/namespace/{tenant}/{namespace}/{range}` holding
Pulsar's NamespaceEphemeralData JSON; a create that finds the node learns the owner from it), the bundles
this broker owns with the version of their node (the `Check` a storage engine adds to its `multi` writes,
so that a broker whose ownership is gone writes nothing), releasing one, and forgetting them all when the
session is lost. Must not touch: topics (the cluster service closes them) or the choice of an owner.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field

from magnetar.broker.cluster.bundles import Bundle
from magnetar.metadata.store import BadVersionError, Check, MetadataStore, NotFoundError

__all__ = ["BundleNotOwnedError", "OwnerData", "OwnershipCache", "ownership_path"]

log = logging.getLogger("magnetar.broker.cluster")


class BundleNotOwnedError(Exception):
    """A topic whose bundle this broker does not own: Pulsar's ServiceNotReady."""

    server_error = "ServiceNotReady"


def ownership_path(bundle: Bundle) -> str:
    return f"/namespace/{bundle.namespace}/{bundle.range}"


@dataclass(frozen=True, slots=True)
class OwnerData:
    """Pulsar's NamespaceEphemeralData: the owner's URLs. `advertised_listeners` maps a listener's name to
    its (pulsar://, pulsar+ssl://) URLs."""

    native_url: str
    native_url_tls: str | None
    http_url: str
    http_url_tls: str | None
    disabled: bool = False
    advertised_listeners: dict[str, tuple[str, str | None]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "nativeUrl": self.native_url,
                "nativeUrlTls": self.native_url_tls,
                "httpUrl": self.http_url,
                "httpUrlTls": self.http_url_tls,
                "disabled": self.disabled,
                "advertisedListeners": {
                    name: {"brokerServiceUrl": url, "brokerServiceUrlTls": url_tls}
                    for name, (url, url_tls) in self.advertised_listeners.items()
                },
            }
        ).encode()

    @classmethod
    def from_json(cls, value: bytes) -> OwnerData:
        data = json.loads(value)
        listeners = {
            name: (urls.get("brokerServiceUrl"), urls.get("brokerServiceUrlTls"))
            for name, urls in (data.get("advertisedListeners") or {}).items()
        }
        return cls(
            data["nativeUrl"],
            data.get("nativeUrlTls"),
            data["httpUrl"],
            data.get("httpUrlTls"),
            bool(data.get("disabled", False)),
            listeners,
        )


class OwnershipCache:
    def __init__(self, store: MetadataStore, self_data: OwnerData) -> None:
        self._store = store
        self.self_data = self_data
        # Bundle -> the version of its ownership node, for the Check of every write for it.
        self._owned: dict[Bundle, int] = {}

    @property
    def owned(self) -> list[Bundle]:
        return sorted(self._owned)

    def owns(self, bundle: Bundle) -> bool:
        return bundle in self._owned

    def check(self, bundle: Bundle) -> Check:
        """The `Check` of this broker's ownership of `bundle`; BundleNotOwnedError when it does not own it."""
        version = self._owned.get(bundle)
        if version is None:
            raise BundleNotOwnedError(f"Namespace bundle {bundle} is not owned by this broker")
        return Check(ownership_path(bundle), version)

    def set_version(self, bundle: Bundle, version: int) -> None:
        """This broker rewrote the node of a bundle it owns (to mark it disabled while unloading)."""
        self._owned[bundle] = version

    async def owner(self, bundle: Bundle) -> OwnerData | None:
        """Who owns `bundle`, from its node; None when nobody does."""
        if bundle in self._owned:
            return self.self_data
        found = await self._store.get(ownership_path(bundle))
        if found is None:
            return None
        owner = OwnerData.from_json(found.value)
        if found.stat.created_by_self and not owner.disabled:
            # This session's node, given up while the session's lease lapsed and the session lived on.
            self._owned[bundle] = found.stat.version
            log.info("Took back ownership of bundle %s", bundle)
            return self.self_data
        return owner

    async def try_acquire(self, bundle: Bundle) -> OwnerData:
        """Own `bundle` unless somebody does: the owner either way (this broker's data when it won)."""
        if bundle in self._owned:
            return self.self_data
        path = ownership_path(bundle)
        try:
            stat = await self._store.put(path, self.self_data.to_json(), -1, ephemeral=True)
        except BadVersionError:
            found = await self._store.get(path)
            if found is None:
                # Its owner released it between our create and our read: try again.
                return await self.try_acquire(bundle)
            if found.stat.created_by_self:
                # Ours already (an earlier acquisition whose answer was lost).
                self._owned[bundle] = found.stat.version
                return self.self_data
            return OwnerData.from_json(found.value)
        self._owned[bundle] = stat.version
        log.info("Acquired ownership of bundle %s", bundle)
        return self.self_data

    async def release(self, bundle: Bundle) -> None:
        """Delete the ownership node of a bundle this broker owns (after its topics are closed)."""
        version = self._owned.pop(bundle, None)
        if version is None:
            return
        try:
            await self._store.delete(ownership_path(bundle), version)
        except (NotFoundError, BadVersionError):
            log.warning("Bundle %s: its ownership node was already gone", bundle)
        log.info("Released ownership of bundle %s", bundle)

    def forget_all(self) -> list[Bundle]:
        """The session is lost, and its ephemeral nodes with it: nothing is owned any more."""
        bundles = self.owned
        self._owned.clear()
        return bundles
