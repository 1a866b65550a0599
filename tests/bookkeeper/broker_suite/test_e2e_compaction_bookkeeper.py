"""tests/e2e/test_e2e_compaction.py with its brokers storing on BookKeeper (conftest.py, broker_suite_rerun.py)."""

from broker_suite_rerun import rerun

globals().update(rerun("e2e", "test_e2e_compaction"))
