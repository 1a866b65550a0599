"""Authorization as Pulsar's PulsarAuthorizationProvider: what a role may do on a topic or tenant.

Owns: the rules (super users may do everything; a tenant's `adminRoles` everything in the tenant; others
what the namespace's `auth_policies` grant them: `namespace_auth` for the namespace, `destination_auth`
per topic, `subscription_auth_roles` per subscription) and the permission changes (grant, revoke),
stored in the namespace's policies where Pulsar keeps them.
Must not touch: who a client is (auth.py) or connections; callers act on the answers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from magnetar.broker.config import BrokerConfig

if TYPE_CHECKING:
    from magnetar.broker.topic_name import TopicName
    from magnetar.storage.metadata import MetadataStore

__all__ = ["ACTIONS", "AuthorizationError", "AuthorizationService", "granted"]

# Pulsar's AuthAction values; `functions`, `sources`, `sinks` and `packages` are stored, never used.
ACTIONS = ("produce", "consume", "functions", "sources", "sinks", "packages")


class AuthorizationError(Exception):
    """A role without the permission; answered as Pulsar's AuthorizationError / HTTP 403."""

    server_error = "AuthorizationError"


class AuthorizationService:
    def __init__(self, config: BrokerConfig, metadata: MetadataStore) -> None:
        self.enabled = bool(config["authorizationEnabled"])
        self.super_users = {r.strip() for r in str(config["superUserRoles"]).split(",") if r.strip()}
        self._metadata = metadata

    # ------------------------------------------------------------------------------ roles

    def is_super_user(self, role: str | None) -> bool:
        return role is not None and role in self.super_users

    def is_tenant_admin(self, tenant: str, role: str | None) -> bool:
        if role is None:
            return False
        if self.is_super_user(role):
            return True
        record = self._metadata.get(f"/admin/policies/{tenant}")
        return record is not None and role in (record[0].get("adminRoles") or [])

    def auth_policies(self, namespace: str) -> dict[str, Any]:
        record = self._metadata.get(f"/admin/policies/{namespace}")
        policies = {} if record is None else record[0].get("auth_policies") or {}
        return {
            "namespace_auth": dict(policies.get("namespace_auth", {})),
            "destination_auth": dict(policies.get("destination_auth", {})),
            "subscription_auth_roles": dict(policies.get("subscription_auth_roles", {})),
        }

    def actions(self, name: TopicName, role: str | None) -> set[str]:
        """What the namespace grants the role, plus what the topic (or its partitioned topic) grants."""
        if role is None:
            return set()
        policies = self.auth_policies(name.namespace_name)
        granted = set(policies["namespace_auth"].get(role, []))
        for topic in {str(name), str(name.partitioned_base)}:
            granted.update(policies["destination_auth"].get(topic, {}).get(role, []))
        return granted

    # ------------------------------------------------------------------------------ checks

    def can_produce(self, name: TopicName, role: str | None) -> bool:
        return self.is_tenant_admin(name.tenant, role) or "produce" in self.actions(name, role)

    def can_consume(self, name: TopicName, role: str | None, subscription: str | None = None) -> bool:
        if self.is_tenant_admin(name.tenant, role):
            return True
        if "consume" not in self.actions(name, role):
            return False
        if subscription is None:
            return True
        # subscription_auth_roles: a subscription that lists roles is theirs alone.
        roles = self.auth_policies(name.namespace_name)["subscription_auth_roles"].get(subscription)
        return not roles or role in roles

    def can_lookup(self, name: TopicName, role: str | None) -> bool:
        return self.can_produce(name, role) or self.can_consume(name, role)

    def can_list_topics(self, namespace: str, role: str | None) -> bool:
        """GET_TOPICS_OF_NAMESPACE: tenant admins, and roles the namespace grants produce or consume."""
        if self.is_tenant_admin(namespace.split("/", 1)[0], role):
            return True
        granted = self.auth_policies(namespace)["namespace_auth"].get(role or "", [])
        return "produce" in granted or "consume" in granted

    def check_produce(self, name: TopicName, role: str | None) -> None:
        if self.enabled and not self.can_produce(name, role):
            raise AuthorizationError("Client is not authorized to Produce")

    def check_consume(self, name: TopicName, role: str | None, subscription: str) -> None:
        if self.enabled and not self.can_consume(name, role, subscription):
            raise AuthorizationError("Client is not authorized to subscribe")

    def check_lookup(self, name: TopicName, role: str | None) -> None:
        if self.enabled and not self.can_lookup(name, role):
            raise AuthorizationError("Client is not authorized to Lookup")


def granted(policies: dict[str, Any], topic: str | None, role: str, actions: list[str] | None) -> dict[str, Any]:
    """auth_policies with `role` given `actions` (None: revoked) on the namespace or on one topic."""
    updated = {key: dict(value) for key, value in policies.items()}
    if topic is None:
        table = updated["namespace_auth"]
    else:
        table = updated["destination_auth"][topic] = dict(updated["destination_auth"].get(topic, {}))
    if actions is None:
        table.pop(role, None)
    else:
        table[role] = sorted(set(actions))
    if topic is not None and not table:
        del updated["destination_auth"][topic]
    return updated
