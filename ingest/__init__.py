"""Ingest: the line-protocol codec, columnar frames, validation and dead letters, the ingest core,
Kafka consumer/producer and the InfluxDB writer."""
