"""Settings, topic catalog, Kafka broker lifecycle, ClickHouse clients and DDL, the `flywheel` CLI."""
