"""Yak's gateway: REST Proxy v2, WebSocket streaming, web console and Prometheus metrics.

It speaks to the cluster only over the Kafka protocol, whether embedded in `yak serve`
(`--http`) or run on its own (`yak gateway --bootstrap ... --http ...`).
"""
