"""The admin HTTP API: Pulsar's `/admin/v2` paths, stats, the blocking explainers and Prometheus metrics.

Owns: the FastAPI application and serving it with uvicorn on the broker's own event loop (`admin.app`:
`create_app`, `AdminServer`).
Must not touch: state except through broker services (topics, subscriptions, the metadata store), and
never an ordering decision: what it reports about the core it reads from the core's stats and queries.
"""
