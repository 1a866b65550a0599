"""How this broker reaches a cluster it replicates to: the URLs, TLS and credentials, decided from the
cluster's registration (ClusterData) and the broker's `brokerClient*` settings the way Pulsar's
BrokerService.getReplicationClient and getClusterPulsarAdmin decide them.

Owns: that decision. Credentials: the registration's `authenticationPlugin` and `authenticationParameters`
when both are there, else, on a broker with authenticationEnabled, `brokerClientAuthenticationPlugin` and
`brokerClientAuthenticationParameters`, else none. TLS: the registration's `brokerClientTlsEnabled` with its
`brokerClientTrustCertsFilePath` and `tlsAllowInsecureConnection`, else the broker's `brokerClientTlsEnabled`
with its `brokerClientTrustCertsFilePath`; with TLS the binary URL is `brokerServiceUrlTls` (Pulsar falls
back to `serviceUrlTls`, an https URL its client looks up over HTTP: magnetar's replicator speaks only the
binary protocol, so it needs `brokerServiceUrlTls`) and the admin URL `serviceUrlTls`; without, they are
`brokerServiceUrl` and `serviceUrl`.
`RemoteClusters` reads the registrations for the broker and its admin API.
Must not touch: connections (producer.py and remote_admin.py use what this returns) or the stored
registration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from magnetar.client.security import ClientSecurity
from magnetar.storage.metadata import MetadataStore

__all__ = ["RemoteClusters", "remote_security", "remote_urls"]


def _tls(data: Mapping[str, Any], settings: Any) -> tuple[bool, str | None, bool]:
    """(TLS?, trusted CAs, insecure?): the registration's when it enables TLS, else the broker's."""
    if data.get("brokerClientTlsEnabled"):
        return True, data.get("brokerClientTrustCertsFilePath") or None, bool(data.get("tlsAllowInsecureConnection"))
    if settings["brokerClientTlsEnabled"]:
        return True, settings["brokerClientTrustCertsFilePath"] or None, False
    return False, None, False


def remote_urls(data: Mapping[str, Any], settings: Any) -> tuple[str | None, str | None]:
    """(binary URL, admin URL) of the cluster registered as `data` (ClusterData's fields as stored), for a
    broker configured as `settings` (`settings[key]`); None where the registration lacks it."""
    if _tls(data, settings)[0]:
        return data.get("brokerServiceUrlTls") or None, data.get("serviceUrlTls") or None
    return data.get("brokerServiceUrl") or None, data.get("serviceUrl") or None


def remote_security(data: Mapping[str, Any], settings: Any) -> ClientSecurity:
    """TLS trust and credentials for the cluster registered as `data`. Raises ValueError for a plugin
    magnetar lacks or parameters it cannot read (a token file that is not there)."""
    if data.get("authenticationPlugin") is not None and data.get("authenticationParameters") is not None:
        plugin, params = data["authenticationPlugin"], data["authenticationParameters"]
    elif settings["authenticationEnabled"]:
        plugin = settings["brokerClientAuthenticationPlugin"]
        params = settings["brokerClientAuthenticationParameters"]
    else:
        plugin = params = None
    _, trust, insecure = _tls(data, settings)
    try:
        return ClientSecurity.from_options(plugin or None, params, trust, insecure)
    except OSError as error:
        raise ValueError(f"authentication parameters unreadable: {error}") from error


class RemoteClusters:
    """The other clusters as this broker reaches them: their registrations under `/admin/clusters/{c}`
    read at each call (an update applies to the next connection), with the broker's `settings`."""

    def __init__(self, metadata: MetadataStore, settings: Any) -> None:
        self._metadata = metadata
        self._settings = settings

    def _registration(self, cluster: str) -> Mapping[str, Any] | None:
        record = self._metadata.get(f"/admin/clusters/{cluster}")
        return None if record is None else record[0]

    def broker_service_url(self, cluster: str) -> str | None:
        """Where a replicator reaches `cluster`: its brokerServiceUrl (brokerServiceUrlTls with TLS)."""
        data = self._registration(cluster)
        return None if data is None else remote_urls(data, self._settings)[0]

    def admin_service_url(self, cluster: str) -> str | None:
        """The serviceUrl (admin API) registered for `cluster` (serviceUrlTls with TLS)."""
        data = self._registration(cluster)
        return None if data is None else remote_urls(data, self._settings)[1]

    def security(self, cluster: str) -> ClientSecurity:
        """TLS trust and credentials for reaching `cluster`: its registration's, else this broker's
        brokerClient* settings. Raises ValueError when they cannot be read."""
        return remote_security(self._registration(cluster) or {}, self._settings)
