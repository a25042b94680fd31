"""Every advertised API and version, fed a well-formed request with every field set (and
one with every nullable field null): the broker answers with a decodable response of the
same version, or closes that connection, and keeps serving. Handlers' exceptions must never
take the connection loop or the process down."""

from __future__ import annotations

from kio.serial.errors import OutOfBoundValue
from protocol.samples import sample_request

from yak.protocol import kio_compat

from .rawclient import RawClient
from .test_hostile import assert_still_serves

DESCRIBE_TRANSACTIONS = 65


def test_every_api_version_answers_or_closes(broker_factory) -> None:
    broker = broker_factory(**{"group.initial.rebalance.delay.ms": "0"})
    with RawClient(broker.bootstrap) as c:
        ranges = [(k.api_key, k.min_version, k.max_version) for k in c.api_versions().api_keys]
    answered = closed = 0
    for api_key, lo, hi in ranges:
        for version in range(lo, hi + 1):
            cls = kio_compat.request_class(api_key, version)
            for nulls in (False, True):
                try:
                    req = sample_request(cls, nulls)
                    kio_compat.encode(req)
                except Exception:
                    continue  # a schema whose nullable fields cannot be null
                with RawClient(broker.bootstrap, timeout=15) as c:
                    try:
                        c.request(req)
                        answered += 1
                    except (TimeoutError, ConnectionError, OSError):
                        closed += 1
                    except OutOfBoundValue as e:
                        # Kafka answers an unknown transactional id with start time -1,
                        # which kio's timestamp type cannot hold: an answer all the same.
                        assert api_key == DESCRIBE_TRANSACTIONS and "negative" in str(e), e
                        answered += 1
                assert broker.is_alive(), (api_key, version, nulls)
    # Closing is allowed (an API with no top-level error field whose handler failed), but
    # well-formed requests should nearly always get an answer.
    assert answered > 300 and closed <= answered // 20, (answered, closed)
    assert_still_serves(broker.bootstrap)
