"""magnetar's own Pulsar client, for the parts of magnetar that talk to a broker as a client does.

Owns: `wire` (a small blocking client of the binary protocol: connections, readers with key hash ranges,
producers with chosen names and sequence ids, subscription cursors) and `batch` (batch entries encoded
from pre-encoded metadata fields). Used by the Spark data source (`magnetar.spark`) and the load
generator (`magnetar.perf`), which may not reach into each other.
Must not touch: broker internals, storage or the broker's files: it reaches a broker over the network
only, through `magnetar.protocol`'s wire format, so it works against Pulsar too.
"""
