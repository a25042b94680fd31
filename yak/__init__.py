"""Yak: a Kafka-compatible event-streaming platform in Python."""

__version__ = "0.1.0"
