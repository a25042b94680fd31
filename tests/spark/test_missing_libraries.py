"""Without the `spark` extra's libraries, the connector says so in one line naming the extra.

Each case runs a fresh interpreter in which one library cannot be imported (a meta path
finder answers as if it were not installed), so the rest of the environment is real.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.conftest import REPO

_HIDE = """
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == {lib!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
"""


def _run(lib: str, code: str) -> subprocess.CompletedProcess[str]:
    script = _HIDE.format(lib=lib) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("lib", ["pyspark", "pyarrow", "numpy"])
def test_importing_the_data_source_names_the_extra(lib):
    r = _run(lib, "from yak.spark import YakDataSource")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        f"ImportError: Yak's Spark data source needs {lib}, which is not installed: "
        "pip install 'yak[spark]'"), r.stderr


def test_avro_values_without_polars_name_the_extra():
    r = _run("polars", """
        import io, json, struct
        import fastavro, numpy as np, pyarrow as pa
        from yak.registry.compat import parse
        from yak.spark.registry_codec import ValueDecoder, arrow_type

        schema = {"type": "record", "name": "T", "fields": [{"name": "id", "type": "long"}]}
        v1 = parse("AVRO", json.dumps(schema), [])
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, v1.parsed, {"id": 7})
        dec = ValueDecoder("http://unused", "avro", arrow_type(v1))
        dec.registry._by_id[1] = v1
        dec.decode(pa.array([struct.pack(">bI", 0, 1) + buf.getvalue()]), np.array([0]), "t", 0)
    """)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == (
        "ImportError: valueFormat=avro needs polars, which is not installed: "
        "pip install 'yak[spark]'"), r.stderr


def test_other_import_errors_are_not_disguised():
    """A missing module outside the extra (kio, a dependency of yak itself, imported by the
    connector's wire client) is not reported as a missing extra."""
    r = _run("kio", "import yak.spark")
    assert r.returncode == 1
    assert "yak[spark]" not in r.stderr
    assert r.stderr.strip().splitlines()[-1] == "ModuleNotFoundError: No module named 'kio'"
    assert "yak/spark/__init__.py" in r.stderr  # it did go through the connector's import
