"""The pre-decode bounds check: accepts every well-formed request kio can encode, and
refuses the inflated counts that make kio's native reader abort the process."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.static.primitive import Records

from yak.protocol import guard, kio_compat

from .samples import sample_request

st.register_type_strategy(Records, st.binary(max_size=64).map(Records))

ALL_REQUESTS = [(k, v) for k in range(100) for v in kio_compat.known_versions(k)]

# Bodies found by fuzzing that made kio 0.6.5 try to allocate 55-240 GB and abort.
KIO_ABORTS = [
    (2, 7, "077a95b821c6c48ff8647dcdd7c53b820760cd0f6999153fac0ae674154b9c0a58c40a1112d30b9"
           "54e5a4e1789789e5b"),
    (1, 16, "ef80c239343ed61308061c631c6a90ef976ca083f206c0e1be062c1fe9dfeb33d43914e5b64784"
            "eb89e8441dc5fbce2ec5984d32bc9b162d"),
    (19, 7, "cbb1cff22427b4afa0a9f090003d2c81f9745fbcb46a97ce65be70838f4dfc678861caf54d"),
    (10, 4, "a195ea8fe537"),
    (42, 2, "cc80aee019ca924faa6132195f8785a445a5154d494a69b1c520fc3bd86de4e1fbad83449eef0719"
            "b832d66758ae9c7f18"),
]


@pytest.mark.parametrize("nulls", [False, True])
def test_accepts_every_well_formed_request(nulls: bool) -> None:
    checked = 0
    for api_key, version in ALL_REQUESTS:
        cls = kio_compat.request_class(api_key, version)
        body = kio_compat.encode(sample_request(cls, nulls))
        assert guard.check(cls, body) == len(body), (api_key, version)
        checked += 1
    assert checked > 250


# The requests clients send most, with random contents.
@pytest.mark.parametrize(("api_key", "version"), [(1, 11), (1, 12), (1, 16), (3, 12),
                                                  (8, 9), (9, 9), (11, 7), (14, 5)])
def test_accepts_random_well_formed_requests(api_key: int, version: int) -> None:
    cls = kio_compat.request_class(api_key, version)

    @given(st.from_type(cls))
    @settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck),
              database=None)
    def check(obj: object) -> None:
        body = kio_compat.encode(obj)
        assert guard.check(cls, body) == len(body)

    check()


@pytest.mark.parametrize(("api_key", "version", "body"), KIO_ABORTS)
def test_refuses_bodies_that_abort_kio(api_key: int, version: int, body: str) -> None:
    with pytest.raises(guard.GuardError):
        guard.check(kio_compat.request_class(api_key, version), bytes.fromhex(body))


def test_guarded_kio_survives_random_bodies() -> None:
    """In a child process (an abort would kill pytest): random bodies for every request
    schema; whatever the guard lets through, kio must decode or reject with an exception."""
    script = textwrap.dedent("""
        import random
        from yak.protocol import guard, kio_compat
        reqs = [(k, v) for k in range(100) for v in kio_compat.known_versions(k)]
        rng = random.Random(7)
        passed = 0
        for i in range(12000):
            k, v = rng.choice(reqs)
            body = rng.randbytes(rng.randint(0, 48))
            cls = kio_compat.request_class(k, v)
            try:
                guard.check(cls, body)
            except guard.GuardError:
                continue
            passed += 1
            try:
                kio_compat.decode(cls, body)
            except Exception:
                pass
        print(passed)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=240)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert int(out.stdout) > 100  # the guard does let plausible bodies through
