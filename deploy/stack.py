"""A local production-like stack: PostgreSQL as Dagster's storage, a Spark standalone master
with two workers (executors in their own JVMs), dagster-webserver and dagster-daemon on that
instance (deploy/dagster.yaml). Everything listens on 127.0.0.1 only, on free ports; all state
lives under one directory (default .stack/).

    python -m deploy.stack up      start it, with a Spark Connect server in front of the cluster
                                   (the runs reach Spark through it: SPARK_REMOTE, no JVM of
                                   their own); prints the UI's address and the environment to use
    python -m deploy.stack up --no-spark-connect
                                   without that server: each run is a Spark driver of its own
                                   on the master
    python -m deploy.stack up --object-store
                                   also an S3-compatible object store (a moto server) with a
                                   bucket `lake`: the warehouse and source can be s3://lake/...
    python -m deploy.stack down    stop everything it started (also after a crash of `up`)
    python -m deploy.stack status  what runs, where

`make stack-up` / `make stack-down` call these. INCREMENTAL_* variables set when `up` runs are
passed to the webserver and the daemon (warehouse, source path, start date, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow.fs as pafs
import pyspark
import yaml

from resources.object_store import s3a_spark_conf
from resources.spark import LOCAL_DEFAULTS

REPO = Path(__file__).resolve().parents[1]
CONNECT_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
HOST = "127.0.0.1"
PG_USER = PG_DB = "dagster"
WORKERS = 2
WORKER_MEMORY = "1g"
BUCKET = "lake"
# The object store's credentials: moto accepts any; real stores take them from the environment.
OBJECT_STORE_KEYS = {"AWS_ACCESS_KEY_ID": "stack", "AWS_SECRET_ACCESS_KEY": "stack", "AWS_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def deployed_storage(postgres_url: str) -> dict:
    """The `storage` section of deploy/dagster.yaml with `postgres_url` in place of DAGSTER_PG_URL:
    an instance of production's storage class on another database."""
    storage = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())["storage"]
    storage["custom"]["config"]["postgres_url"] = postgres_url
    return {"storage": storage}


def spark_home() -> Path:
    return Path(pyspark.__file__).resolve().parent


def _as_postgres_user() -> list[str]:
    """PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user."""
    return ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []


@dataclass
class Stack:
    directory: Path
    pg_port: int = 0
    spark_port: int = 0
    spark_ui_port: int = 0
    webserver_port: int = 0
    connect_port: int = 0  # a Spark Connect server in front of the master; 0: none
    object_store_port: int = 0  # an S3-compatible object store (moto); 0: none
    pids: dict[str, int] = field(default_factory=dict)  # name -> process group
    env: dict[str, str] = field(default_factory=dict)  # what the Dagster processes and runs get

    # -- state on disk ------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.directory / "stack.json"

    def save(self) -> None:
        state = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(self).items()}
        self.state_file.write_text(json.dumps(state, indent=2))

    @classmethod
    def load(cls, directory: Path) -> "Stack | None":
        path = directory / "stack.json"
        if not path.exists():
            return None
        state = json.loads(path.read_text())
        state["directory"] = Path(state["directory"])
        return cls(**state)

    @property
    def pg_url(self) -> str:
        return self.database_url(PG_DB)

    def database_url(self, database: str) -> str:
        return f"postgresql+psycopg2://{PG_USER}@{HOST}:{self.pg_port}/{database}"

    @property
    def spark_master(self) -> str:
        return f"spark://{HOST}:{self.spark_port}"

    @property
    def spark_remote(self) -> str:
        return f"sc://{HOST}:{self.connect_port}"

    @property
    def webserver_url(self) -> str:
        return f"http://{HOST}:{self.webserver_port}"

    @property
    def dagster_home(self) -> Path:
        return self.directory / "dagster_home"

    # -- processes ----------------------------------------------------------------
    def _start(self, name: str, args: list[str], env: dict[str, str]) -> None:
        logs = self.directory / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        self.pids[name] = proc.pid
        self.save()

    def _wait_for_port(self, name: str, port: int, timeout: float = 120) -> None:
        pid = self.pids.get(name)
        if wait_for_port(port, timeout, alive=lambda: not pid or _alive(pid)):
            return
        raise RuntimeError(f"{name} did not listen on {HOST}:{port}; see {self.directory / 'logs' / (name + '.log')}")

    def start_postgres(self, *, fsync: bool = False) -> None:
        """PostgreSQL on a free port. Without `fsync` (the stack's default: its data is
        throwaway) commits skip the disk flush a production server makes."""
        data, sockets = self.directory / "postgres", self.directory / "postgres_sockets"
        for path in (data, sockets):
            path.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(path, "postgres", "postgres")
        run_as = _as_postgres_user()
        if run_as and subprocess.run([*run_as, "test", "-w", str(data)]).returncode != 0:
            raise RuntimeError(f"PostgreSQL runs as the user 'postgres' here (it refuses root), and that user cannot "
                               f"reach {data}: put the stack in a directory whose parents it can enter "
                               "(the project, or a directory under /tmp with mode 755)")
        if not (data / "PG_VERSION").exists():
            _run([*run_as, "initdb", "-D", str(data), "-U", PG_USER, "-A", "trust", "--no-sync", "-E", "UTF8"])
        self.pg_port = free_port()
        options = f"-c listen_addresses={HOST} -p {self.pg_port} -k {sockets}" + ("" if fsync else " -c fsync=off")
        log = self.directory / "postgres" / "server.log"
        _run([*run_as, "pg_ctl", "-D", str(data), "-l", str(log), "-o", options, "-w", "start"])
        self.save()
        if self.query(f"SELECT 1 FROM pg_database WHERE datname = '{PG_DB}'") != "1":
            _run(["createdb", "-h", HOST, "-p", str(self.pg_port), "-U", PG_USER, PG_DB])

    def query(self, sql: str) -> str:
        """The result of `sql` on the running server (database `postgres`), unaligned, stripped."""
        return _run(["psql", "-h", HOST, "-p", str(self.pg_port), "-U", PG_USER, "-d", "postgres", "-tAc", sql]).strip()

    def restart_postgres(self) -> None:
        """Stop the server (fast: open connections are cut) and start it again, same options."""
        data = self.directory / "postgres"
        _run([*_as_postgres_user(), "pg_ctl", "-D", str(data), "-l", str(data / "server.log"), "-m", "fast", "-w",
              "restart"])

    def fresh_database(self, database: str) -> str:
        """An empty database named `database` on the running server (dropped first if it
        exists); its URL."""
        server = ["-h", HOST, "-p", str(self.pg_port), "-U", PG_USER]
        _run(["dropdb", *server, "--if-exists", database])
        _run(["createdb", *server, database])
        return self.database_url(database)

    def start_object_store(self) -> None:
        """An S3-compatible object store (moto's server, from the Python package) with one
        bucket, BUCKET; its state lives in memory and ends with the stack."""
        self.object_store_port = free_port()
        self._start("object-store", [sys.executable, "-m", "moto.server", "-H", HOST,
                                     "-p", str(self.object_store_port)], {**os.environ})
        self._wait_for_port("object-store", self.object_store_port)
        store = pafs.S3FileSystem(endpoint_override=self.object_store_url, scheme="http", allow_bucket_creation=True,
                                  access_key=OBJECT_STORE_KEYS["AWS_ACCESS_KEY_ID"],
                                  secret_key=OBJECT_STORE_KEYS["AWS_SECRET_ACCESS_KEY"],
                                  region=OBJECT_STORE_KEYS["AWS_REGION"])
        store.create_dir(BUCKET)

    @property
    def object_store_url(self) -> str:
        return f"http://{HOST}:{self.object_store_port}"

    def object_store_env(self) -> dict[str, str]:
        """The AWS variables every process reaching the object store gets (delta-rs, pyarrow and
        Spark's S3A all read them): empty without one."""
        if not self.object_store_port:
            return {}
        return {**OBJECT_STORE_KEYS, "AWS_ENDPOINT_URL": self.object_store_url, "AWS_ALLOW_HTTP": "true"}

    def spark_env(self) -> dict[str, str]:
        home = spark_home()
        # The master's REST submission port is fixed (6066) by default: off, it is not used.
        return {**os.environ, "SPARK_HOME": str(home), "SPARK_LOCAL_IP": HOST, "SPARK_PUBLIC_DNS": HOST,
                "SPARK_LOG_DIR": str(self.directory / "logs"), "PYSPARK_PYTHON": sys.executable,
                "SPARK_NO_DAEMONIZE": "1", "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
                # Each run's application copies the jars it is given (S3A's are 690 MB) into the
                # worker's directory: remove finished applications' after two minutes.
                "SPARK_WORKER_OPTS": "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval=60 "
                                     "-Dspark.worker.cleanup.appDataTtl=120",
                **self.object_store_env()}

    def start_spark(self) -> None:
        self.spark_port, self.spark_ui_port = free_port(), free_port()
        spark_class = str(spark_home() / "bin" / "spark-class")
        env = self.spark_env()
        self._start("spark-master", [spark_class, "org.apache.spark.deploy.master.Master", "--host", HOST,
                                     "--port", str(self.spark_port), "--webui-port", str(self.spark_ui_port)], env)
        self._wait_for_port("spark-master", self.spark_port)
        for n in range(1, WORKERS + 1):
            # Each worker has a scratch directory of its own, as on separate hosts.
            work, scratch = self.directory / f"spark-worker-{n}", self.directory / f"spark-worker-{n}-scratch"
            for path in (work, scratch):
                path.mkdir(parents=True, exist_ok=True)
            self._start(f"spark-worker-{n}", [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", HOST,
                                              "--webui-port", str(free_port()), "--cores", "1",
                                              "--memory", WORKER_MEMORY, "--work-dir", str(work),
                                              self.spark_master], {**env, "SPARK_LOCAL_DIRS": str(scratch)})

    def driver_conf(self) -> dict[str, str]:
        """Settings of a Spark driver on this cluster (a run's own, or the Connect server's)."""
        return {"spark.driver.host": HOST, "spark.driver.bindAddress": HOST, "spark.ui.enabled": "false",
                "spark.driver.memory": "1g", "spark.executor.memory": WORKER_MEMORY, "spark.executor.cores": "1",
                "spark.cores.max": str(WORKERS), "spark.sql.shuffle.partitions": "4"}

    def connect_server_conf(self) -> dict[str, str]:
        """The Connect server's driver settings: a driver's on this cluster and, with the object
        store, S3A's (its executors read and write the store; a client cannot set them)."""
        return {**self.driver_conf(), **(s3a_spark_conf(self.object_store_env()) if self.object_store_port else {})}

    def start_connect(self) -> None:
        """A Spark Connect server whose driver runs on the cluster: each run is one of its
        sessions. It is started again, on the same port, whenever it dies (deploy/keep_running.py)."""
        self.connect_port = free_port()
        server = connect_server_command(self.spark_master, self.connect_port, self.connect_server_conf())
        self._start("spark-connect", [sys.executable, "-m", "deploy.keep_running", "--name", "spark-connect", "--",
                                      *server], self.spark_env())
        self._wait_for_port("spark-connect", self.connect_port, timeout=180)

    def spark_client_env(self) -> dict[str, str]:
        """How a run reaches Spark: through the Connect server when there is one, else as a
        driver of its own on the master."""
        if self.connect_port:
            return {"SPARK_REMOTE": self.spark_remote, "INCREMENTAL_SPARK_CONF": "spark.sql.shuffle.partitions=4"}
        # The workers run on this host: the local warehouse is the same disk for all of them.
        return {"INCREMENTAL_SPARK_MASTER": self.spark_master, "INCREMENTAL_WAREHOUSE_SHARED": "true",
                "INCREMENTAL_SPARK_CONF": ";".join(f"{k}={v}" for k, v in self.driver_conf().items()),
                "SPARK_LOCAL_IP": HOST}

    def dagster_env(self, extra: dict[str, str] | None = None) -> dict[str, str]:
        # The production instance: sensors and schedules run from the start (an INCREMENTAL_*
        # variable given to `up` wins).
        return {"INCREMENTAL_AUTOMATION_RUNNING": "true", **os.environ, **(extra or {}), **self.env,
                "DAGSTER_HOME": str(self.dagster_home),
                "DAGSTER_PG_URL": self.pg_url, **self.spark_client_env(), "PYSPARK_PYTHON": sys.executable,
                "NO_PROXY": HOST, "no_proxy": HOST, **self.object_store_env()}

    def start_dagster(self, instance_settings: dict[str, dict] | None = None) -> None:
        """The webserver and the daemon on deploy/dagster.yaml, each section of `instance_settings`
        (e.g. {"run_monitoring": {"max_runtime_seconds": 60}}) updating that section's keys."""
        self.dagster_home.mkdir(parents=True, exist_ok=True)
        instance = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
        for section, values in (instance_settings or {}).items():
            instance[section] = {**instance.get(section, {}), **values}
        (self.dagster_home / "dagster.yaml").write_text(yaml.safe_dump(instance, sort_keys=False))
        self.webserver_port = free_port()
        env = self.dagster_env()
        bin_dir = Path(sys.executable).parent
        workspace = str(REPO / "workspace.yaml")
        self._start("webserver", [str(bin_dir / "dagster-webserver"), "-h", HOST, "-p", str(self.webserver_port),
                                  "-w", workspace], env)
        self._start("daemon", [str(bin_dir / "dagster-daemon"), "run", "-w", workspace], env)
        self._wait_for_port("webserver", self.webserver_port, timeout=240)

    # -- the whole stack ----------------------------------------------------------
    @classmethod
    def up(cls, directory: Path, env: dict[str, str] | None = None, *, spark_connect: bool = True,
           object_store: bool = False, instance_settings: dict[str, dict] | None = None) -> "Stack":
        """Start every component; on any failure, stop what was started and raise. With
        `spark_connect` (production's way, the default) the runs reach Spark through a Connect
        server; without it each run is a driver of its own on the master. `instance_settings`
        changes sections of deploy/dagster.yaml (`start_dagster`)."""
        directory.mkdir(parents=True, exist_ok=True)
        if (previous := cls.load(directory)) is not None and previous.running():
            raise RuntimeError(f"a stack already runs from {directory}: `python -m deploy.stack down` first")
        stack = cls(directory=directory.resolve(), env={k: v for k, v in (env or os.environ).items()
                                                        if k.startswith("INCREMENTAL_")})
        stack.save()
        try:
            stack.start_postgres()
            if object_store:
                stack.start_object_store()
            stack.start_spark()
            if spark_connect:
                stack.start_connect()
            stack.start_dagster(instance_settings)
        except BaseException:
            stack.down()
            raise
        return stack

    def running(self) -> list[str]:
        return [name for name, pid in self.pids.items() if _alive(pid)]

    def down(self) -> None:
        """Stop every process of the stack (process groups: the run workers and their JVMs too)."""
        for pid in self.pids.values():
            _signal_group(pid, signal.SIGTERM)
        deadline = time.time() + 20
        while time.time() < deadline and any(_alive(pid) for pid in self.pids.values()):
            time.sleep(0.3)
        for pid in self.pids.values():
            _signal_group(pid, signal.SIGKILL)
        data = self.directory / "postgres"
        if (data / "postmaster.pid").exists():
            subprocess.run([*_as_postgres_user(), "pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop"],
                           capture_output=True)
        self.pids = {}
        self.save()

    def describe(self) -> str:
        return "\n".join([
            f"Dagster UI:    {self.webserver_url}",
            f"Spark master:  {self.spark_master} (UI http://{HOST}:{self.spark_ui_port})",
            *([f"Spark Connect: {self.spark_remote}"] if self.connect_port else []),
            *([f"Object store:  {self.object_store_url} (bucket s3://{BUCKET})"] if self.object_store_port else []),
            f"PostgreSQL:    {self.pg_url}",
            f"DAGSTER_HOME:  {self.dagster_home}",
            f"running:       {', '.join(self.running()) or 'nothing'}",
            "To run the CLI against this stack:",
            f"  export DAGSTER_HOME={self.dagster_home} DAGSTER_PG_URL={self.pg_url} "
            + " ".join(f"{k}='{v}'" for k, v in {**self.spark_client_env(), **self.object_store_env()}.items()),
        ])


def connect_server_command(master: str, port: int, conf: dict[str, str] | None = None) -> list[str]:
    """spark-submit of a Spark Connect server (from the installed pyspark) on `master`, listening
    on HOST:port. It gets the project's static defaults, which a Connect client cannot set, then
    `conf`."""
    server_conf = {**{k: v for k, v in LOCAL_DEFAULTS.items() if k != "spark.master"}, **(conf or {}),
                   "spark.app.name": "incremental-assets-connect",
                   "spark.connect.grpc.binding.address": HOST, "spark.connect.grpc.binding.port": str(port)}
    args = [str(spark_home() / "bin" / "spark-submit"), "--class", CONNECT_SERVER_CLASS, "--master", master]
    for key, value in server_conf.items():
        args += ["--conf", f"{key}={value}"]
    return args


def wait_for_port(port: int, timeout: float, alive=lambda: True) -> bool:
    """Whether something listens on HOST:port within `timeout` s (False as soon as alive() is not)."""
    deadline = time.time() + timeout
    while time.time() < deadline and alive():
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return True
        time.sleep(0.5)
    return False


def _run(args: list[str]) -> str:
    """Run a command; its output, or an error that shows what it printed."""
    done = subprocess.run(args, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of this process counts as gone
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["up", "down", "status"])
    parser.add_argument("--dir", type=Path, default=REPO / ".stack")
    parser.add_argument("--spark-connect", action=argparse.BooleanOptionalAction, default=True,
                        help="up: start a Spark Connect server that the runs reach Spark through (the "
                             "default); --no-spark-connect: each run is a Spark driver of its own on the master")
    parser.add_argument("--object-store", action="store_true",
                        help="up: also start an S3-compatible object store (moto) with a bucket 'lake'")
    args = parser.parse_args(argv)
    if args.command == "up":
        stack = Stack.up(args.dir, spark_connect=args.spark_connect, object_store=args.object_store)
        print(stack.describe())
        return 0
    stack = Stack.load(args.dir)
    if stack is None:
        print(f"no stack in {args.dir}")
        return 0
    if args.command == "down":
        stack.down()
        print(f"stopped the stack in {args.dir}")
    else:
        print(stack.describe())
    return 0


if __name__ == "__main__":
    sys.exit(main())
