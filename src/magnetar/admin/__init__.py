"""The admin HTTP API: Pulsar's `/admin/v2` paths, stats, the blocking explainers and Prometheus metrics.

Owns: the FastAPI application and serving it with uvicorn on the broker's own event loop.
Must not touch: state except through broker services (topics, subscriptions, the metadata store), and
never an ordering decision: what it reports about the core it reads from the core's stats and queries.
"""

from magnetar.admin.app import AdminServer, create_app

__all__ = ["AdminServer", "create_app"]
