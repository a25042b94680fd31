"""The chaos cluster's ports lie outside the kernel's ephemeral range, so a member
restarted after a kill can bind its ports again (run E's etcd restart could not)."""

import random

from yak.chaos.env import PORT_SPAN, _ephemeral_range, pick_base_port


def test_base_port_span_avoids_the_ephemeral_range() -> None:
    low, high = _ephemeral_range()
    rng = random.Random(7)
    for _ in range(50):
        base = pick_base_port(rng)
        span = range(base, base + PORT_SPAN)
        assert all(p < low or p > high for p in span), (base, low, high)
        assert span[-1] <= 65535
