"""magnetar: a message broker that speaks the Apache Pulsar binary protocol."""

__version__ = "0.1.0"
