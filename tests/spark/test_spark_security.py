"""The Spark connector on a secured cluster: `kafka.security.protocol`, `kafka.sasl.*` and
`kafka.ssl.*` (Spark's Kafka connector options) reach yak's client, in Spark local mode."""

from __future__ import annotations

from pathlib import Path

import pytest
from security.conftest import JAAS_SCRAM, make_certs, plain_users, start_secured
from security.wire import consume, produce, rdkafka

from yak.spark.options import YakOptionError, parse_source_options


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory):
    certs = make_certs(tmp_path_factory.mktemp("spark-certs"))
    d = tmp_path_factory.mktemp("spark-secured") / "data"
    d.mkdir()
    b = start_secured(d, ["SASL_SSL", "PLAINTEXT"], certs, **{
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": plain_users(admin="admin-secret"),
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": JAAS_SCRAM,
    })
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(rdkafka(b.addr("PLAINTEXT")))
    up = UserScramCredentialUpsertion("spark", ScramCredentialInfo(
        ScramMechanism.SCRAM_SHA_512, 4096), b"spark-pw")
    for f in admin.alter_user_scram_credentials([up]).values():
        f.result(15)
    yield b, certs
    b.stop(10)


def _opts(b, certs: object) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": b.addr("SASL_SSL"),
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule "
                                  'required username="spark" password="spark-pw";',
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(certs.ca),
    }


def test_spark_reads_and_writes_over_sasl_ssl(spark, secured):
    b, certs = secured
    opts = _opts(b, certs)
    conf = rdkafka(b.addr("SASL_SSL"), "SASL_SSL", certs, "PLAIN", "admin", "admin-secret")
    assert produce(conf, "spark-in", [b"a", b"b", b"c"]) == [None] * 3
    df = spark.read.format("yak").options(**opts).option("subscribe", "spark-in").load()
    assert sorted(r.value for r in df.select("value").collect()) == [b"a", b"b", b"c"]
    (df.selectExpr("CAST(value AS STRING) AS value").write.format("yak").options(**opts)
     .option("topic", "spark-out").mode("append").save())
    assert sorted(consume(conf, "spark-out", 3)) == [b"a", b"b", b"c"]


def test_bad_security_options_fail_on_the_driver_naming_the_option(secured, tmp_path: Path):
    b, certs = secured
    base = {**_opts(b, certs), "subscribe": "x"}
    for change, fragment in [
        ({"kafka.security.protocol": "KERBEROS"}, "kafka.security.protocol"),
        ({"kafka.sasl.mechanism": "GSSAPI"}, "kafka.sasl.mechanism"),
        ({"kafka.ssl.truststore.location": str(tmp_path / "missing.pem")},
         "kafka.ssl.truststore.location"),
    ]:
        with pytest.raises(YakOptionError, match=fragment.replace(".", r"\.")):
            parse_source_options({**base, **change}, streaming=False)
