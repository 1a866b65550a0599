"""The admin API with authentication and authorization on: 401 without (valid) credentials, 403 for a
role that may not administer the tenant, 401 "requires super-user access" for super-user calls, the
permission endpoints, and `auth_policies` in namespace bodies kept."""

from __future__ import annotations

import base64
import uuid

import httpx
import pytest
from passlib.hash import apr_md5_crypt

from security_helpers import token

SECRET = b"magnetar-admin-secret-key-32byte"
PREFIX = "org.apache.pulsar.broker.authentication."
ADMIN = token(SECRET, "admin")


@pytest.fixture(scope="module")
def broker(module_broker_factory, tmp_path_factory: pytest.TempPathFactory):
    htpasswd = tmp_path_factory.mktemp("basic") / "htpasswd"
    htpasswd.write_text(f"ops:{apr_md5_crypt.hash('ops-pw')}\n")
    return module_broker_factory(
        authenticationEnabled="true",
        authenticationProviders=f"{PREFIX}AuthenticationProviderToken,{PREFIX}AuthenticationProviderBasic",
        tokenSecretKey="data:;base64," + base64.b64encode(SECRET).decode(),
        basicAuthConf=str(htpasswd),
        authorizationEnabled="true",
        superUserRoles="admin",
    )


def _call(broker, method: str, path: str, credentials: str | None = ADMIN, body: object = None) -> httpx.Response:
    headers = (
        {} if credentials is None else {"Authorization": credentials if " " in credentials else f"Bearer {credentials}"}
    )
    return httpx.request(method, f"{broker.http_url}{path}", json=body, headers=headers, timeout=10)


@pytest.fixture
def tenant(broker) -> str:
    """A tenant administered by `tenant-admin`, with one namespace."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    body = {"adminRoles": ["tenant-admin"], "allowedClusters": ["standalone"]}
    assert _call(broker, "PUT", f"/admin/v2/tenants/{name}", body=body).status_code == 204
    assert _call(broker, "PUT", f"/admin/v2/namespaces/{name}/ns").status_code == 204
    return name


@pytest.mark.parametrize(
    "credentials",
    [
        pytest.param(None, id="none"),
        pytest.param(token(SECRET, "admin", expires_in_s=-5), id="expired"),
        pytest.param(ADMIN[:-2] + "xx", id="tampered"),
        pytest.param("Basic " + base64.b64encode(b"ops:wrong").decode(), id="basic-wrong"),
    ],
)
def test_unauthenticated_calls_get_401(broker, credentials) -> None:
    response = _call(broker, "GET", "/admin/v2/tenants", credentials)
    assert response.status_code == 401
    assert "Authentication required" in response.text


def test_metrics_stay_open(broker) -> None:
    assert _call(broker, "GET", "/metrics", None).status_code == 200


def test_roles_and_their_calls(broker, tenant) -> None:
    tenant_admin, stranger = token(SECRET, "tenant-admin"), token(SECRET, "stranger")
    assert _call(broker, "GET", "/admin/v2/tenants").status_code == 200
    assert _call(broker, "GET", f"/admin/v2/namespaces/{tenant}", tenant_admin).json() == [f"{tenant}/ns"]
    assert _call(broker, "PUT", f"/admin/v2/namespaces/{tenant}/ns2", tenant_admin).status_code == 204

    refused = _call(broker, "GET", f"/admin/v2/namespaces/{tenant}", stranger)
    assert refused.status_code == 403
    assert refused.json() == {"reason": "Don't have permission to administrate resources on this tenant"}
    assert _call(broker, "PUT", f"/admin/v2/persistent/{tenant}/ns/t", stranger).status_code == 403
    # Super-user calls: Pulsar answers 401 to an authenticated role that is not a super user.
    super_only = _call(broker, "GET", "/admin/v2/clusters", tenant_admin)
    assert super_only.status_code == 401
    assert super_only.json() == {"reason": "This operation requires super-user access"}
    assert (
        _call(broker, "PUT", f"/admin/v2/tenants/x-{tenant}", tenant_admin, {"allowedClusters": []}).status_code == 401
    )
    basic = "Basic " + base64.b64encode(b"ops:ops-pw").decode()
    assert _call(broker, "GET", f"/admin/v2/namespaces/{tenant}", basic).status_code == 403


def test_permissions_endpoints(broker, tenant) -> None:
    namespace = f"{tenant}/ns"
    tenant_admin = token(SECRET, "tenant-admin")
    base = f"/admin/v2/namespaces/{namespace}/permissions"
    assert _call(broker, "POST", f"{base}/alice", tenant_admin, ["produce", "functions"]).status_code == 204
    assert _call(broker, "POST", f"{base}/bob", body=["consume"]).status_code == 204
    assert _call(broker, "GET", base).json() == {"alice": ["functions", "produce"], "bob": ["consume"]}
    assert _call(broker, "POST", f"{base}/carol", body=["fly"]).status_code == 400
    assert _call(broker, "POST", f"{base}/alice", token(SECRET, "alice"), ["consume"]).status_code == 403

    topic = f"/admin/v2/persistent/{namespace}/orders/permissions"
    assert _call(broker, "POST", f"{topic}/dave", body=["consume"]).status_code == 204
    assert _call(broker, "GET", topic).json() == {
        "alice": ["functions", "produce"],
        "bob": ["consume"],
        "dave": ["consume"],
    }
    assert _call(broker, "POST", f"{base}/subscription/audit", body=["dave"]).status_code == 204
    assert _call(broker, "GET", f"{base}/subscription").json() == {"audit": ["dave"]}
    policies = _call(broker, "GET", f"/admin/v2/namespaces/{namespace}").json()["auth_policies"]
    assert policies == {
        "namespace_auth": {"alice": ["functions", "produce"], "bob": ["consume"]},
        "destination_auth": {f"persistent://{namespace}/orders": {"dave": ["consume"]}},
        "subscription_auth_roles": {"audit": ["dave"]},
    }

    assert _call(broker, "DELETE", f"{base}/audit/dave").status_code == 204
    assert _call(broker, "DELETE", f"{topic}/dave").status_code == 204
    assert _call(broker, "DELETE", f"{base}/alice").status_code == 204
    assert _call(broker, "GET", base).json() == {"bob": ["consume"]}
    assert _call(broker, "GET", f"{base}/subscription").json() == {}


def test_auth_policies_in_a_namespace_body_are_kept(broker, tenant) -> None:
    auth = {
        "namespace_auth": {"erin": ["produce"]},
        "destination_auth": {},
        "subscription_auth_roles": {"s": ["erin"]},
    }
    body = {"auth_policies": auth}
    assert _call(broker, "PUT", f"/admin/v2/namespaces/{tenant}/with-auth", body=body).status_code == 204
    assert _call(broker, "GET", f"/admin/v2/namespaces/{tenant}/with-auth").json()["auth_policies"] == auth
    assert _call(broker, "GET", f"/admin/v2/namespaces/{tenant}/with-auth/permissions").json() == {"erin": ["produce"]}


def test_http_lookup_needs_a_permission(broker, tenant) -> None:
    path = f"/lookup/v2/topic/persistent/{tenant}/ns/t"
    assert _call(broker, "GET", path, token(SECRET, "frank")).status_code == 403
    assert (
        _call(broker, "POST", f"/admin/v2/namespaces/{tenant}/ns/permissions/frank", body=["consume"]).status_code
        == 204
    )
    assert _call(broker, "GET", path, token(SECRET, "frank")).status_code == 200
