"""tests/replication/test_replication_mesh.py with every cluster's broker storing on BookKeeper (conftest.py,
broker_suite_rerun.py)."""

from broker_suite_rerun import rerun

globals().update(rerun("replication", "test_replication_mesh"))
