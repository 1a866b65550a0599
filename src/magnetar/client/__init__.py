"""magnetar's own Pulsar client, for the parts of magnetar that talk to a broker as a client does.

Owns: `wire` (a small blocking client of the binary protocol: connections, readers with key hash ranges,
producers with chosen names and sequence ids, subscription cursors), `batch` (batch entries encoded
from pre-encoded metadata fields) and `perf` (the `magnetar perf` load generator, on the official
`pulsar-client` or on `wire`). `wire` and `batch` are used by the Spark data source (`magnetar.spark`)
and by `perf`, which may not reach into each other.
Must not touch: broker internals, storage or the broker's files: it reaches a broker over the network
only, through `magnetar.protocol`'s wire format, so it works against Pulsar too.
"""
