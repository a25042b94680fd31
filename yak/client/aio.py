"""Asyncio connections to a broker for the edges (gateway, schema registry): the security
layer's `yak.security.connect`, under the client package's name."""

from yak.security.connect import login, open_connection

__all__ = ["login", "open_connection"]
