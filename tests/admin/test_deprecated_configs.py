"""Topic configs Kafka 3.x deprecated (`message.format.version`, ...): accepted with a
warning in the broker log and no effect, as Kafka 3.x does; bad values still refused."""

from __future__ import annotations

from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic


def test_message_format_version_is_accepted_with_a_warning(broker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("old-fmt", 1, config={"message.format.version": "2.8-IV1",
                                                        "message.downconversion.enable": "true"})]
                        )["old-fmt"].result(10)
    assert "message.format.version is deprecated and has no effect" in broker.log()
    res = ConfigResource(ConfigResource.Type.TOPIC, "old-fmt")
    configs = admin.describe_configs([res])[res].result(10)
    assert configs["message.format.version"].value == "2.8-IV1"  # stored and reported
    # A value of the wrong type is still INVALID_CONFIG.
    f = admin.create_topics([NewTopic("bad-fmt", 1,
                                      config={"message.downconversion.enable": "perhaps"})])
    try:
        f["bad-fmt"].result(10)
        raise AssertionError("a non-boolean message.downconversion.enable was accepted")
    except Exception as e:  # KafkaException(INVALID_CONFIG)
        assert "INVALID_CONFIG" in str(e) or "message.downconversion.enable" in str(e)
