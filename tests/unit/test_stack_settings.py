"""The local stack's settings, without starting it: `make stack-up` puts a Spark Connect server in
front of the cluster unless told not to, and that server reaches the object store when there is one."""

from pathlib import Path

import pytest

from deploy import stack as stack_module
from deploy.stack import HOST, Stack, connect_server_command


def test_the_connect_server_gets_s3a_settings_only_with_the_object_store(tmp_path):
    plain = Stack(directory=tmp_path).connect_server_conf()
    assert not any("s3a" in key for key in plain)
    assert plain["spark.driver.host"] == HOST

    with_store = Stack(directory=tmp_path, object_store_port=9123).connect_server_conf()
    assert with_store["spark.hadoop.fs.s3a.endpoint"] == f"http://{HOST}:9123"
    assert with_store["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert with_store["spark.hadoop.fs.s3.impl"] == "org.apache.hadoop.fs.s3a.S3AFileSystem"
    assert any(Path(jar).name.startswith("hadoop-aws") for jar in with_store["spark.jars"].split(","))
    assert {k: v for k, v in with_store.items() if k in plain} == plain

    command = connect_server_command(f"spark://{HOST}:7077", 15002, with_store)
    assert f"spark.hadoop.fs.s3a.endpoint=http://{HOST}:9123" in command
    assert command[command.index("--master") + 1] == f"spark://{HOST}:7077"


@pytest.mark.parametrize(("arguments", "connect"), [([], True), (["--no-spark-connect"], False),
                                                     (["--spark-connect"], True)])
def test_stack_up_starts_a_connect_server_unless_told_not_to(arguments, connect, tmp_path, monkeypatch, capsys):
    started = []

    def up(directory, *, spark_connect, object_store):
        started.append((directory, spark_connect, object_store))
        return Stack(directory=directory)

    monkeypatch.setattr(Stack, "up", up)
    monkeypatch.setattr(Stack, "describe", lambda self: "described")
    assert stack_module.main(["up", "--dir", str(tmp_path), *arguments]) == 0
    assert started == [(tmp_path, connect, False)]
    assert "described" in capsys.readouterr().out
