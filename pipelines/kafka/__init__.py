"""Kafka without Beam: the one admin helper, producer and consumer helpers,
broker health reporting, and the brokers the project can start itself."""
