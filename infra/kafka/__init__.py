"""The local Apache Kafka: broker lifecycle (KRaft), its jars fetched with Maven, TLS and SCRAM material."""
