"""A throwaway PostgreSQL server for the test session.

``AAP_TEST_POSTGRES_URL`` wins when set. Otherwise the PostgreSQL server
binaries (Debian package ``postgresql``) are used to start a private cluster
in a temporary directory on a free loopback port, so the README's test command
needs no pre-configured database. As root, the cluster runs as the
``postgres`` system user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid


class PostgresUnavailable(RuntimeError):
    pass


def _bin_dir() -> str:
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), reverse=True)
    if candidates:
        return os.path.dirname(candidates[0])
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(os.path.realpath(initdb))
    raise PostgresUnavailable(
        "PostgreSQL server binaries not found: install them (Debian: apt-get install postgresql) "
        "or set AAP_TEST_POSTGRES_URL"
    )


#: A test session's cluster lives in memory when the machine has room: each test's database is
#: created and dropped there in milliseconds, where on a busy disk a database took ~0.2 s to
#: create and as long again to delete (a whole suite's, 6 GB of files at the end).
MEMORY_DIR = "/dev/shm"
MEMORY_NEEDED = 2 * 1024**3


def _memory_dir() -> str | None:
    try:
        usage = shutil.disk_usage(MEMORY_DIR)
    except OSError:
        return None
    return MEMORY_DIR if usage.free >= MEMORY_NEEDED and os.access(MEMORY_DIR, os.W_OK) else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresCluster:
    """Start with :meth:`start`, get databases with :meth:`create_database`, then :meth:`stop`."""

    def __init__(self) -> None:
        self.url_base: str | None = None
        self._dir: str | None = None
        self._bin: str | None = None
        self._user_prefix: list[str] = []
        self._admin_url: str | None = None

    def start(self, *, extra_conf: str = "", in_memory: bool = False) -> PostgresCluster:
        """Start the server; ``extra_conf`` holds more ``postgresql.conf`` lines (benchmarks tune
        memory); ``in_memory``: in :data:`MEMORY_DIR` when it has room (small databases only:
        the test session's, each dropped after its test)."""
        env_url = os.environ.get("AAP_TEST_POSTGRES_URL")
        if env_url:
            self._admin_url = env_url
            return self
        self._bin = _bin_dir()
        self._dir = tempfile.mkdtemp(prefix="aap-pg-", dir=_memory_dir() if in_memory else None)
        owner = None
        if os.geteuid() == 0:
            owner = "postgres"
            try:
                pw = pwd.getpwnam(owner)
            except KeyError as exc:
                raise PostgresUnavailable("running as root needs a 'postgres' system user") from exc
            os.chown(self._dir, pw.pw_uid, pw.pw_gid)
            self._user_prefix = ["runuser", "-u", owner, "--"]
        data = os.path.join(self._dir, "data")
        port = _free_port()
        self._run(
            [
                os.path.join(self._bin, "initdb"),
                "-D",
                data,
                "-U",
                "aap",
                "--auth=trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
            ]
        )
        with open(os.path.join(data, "postgresql.auto.conf"), "a") as conf:
            conf.write(
                f"port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{self._dir}'\n"
                "fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n" + extra_conf
            )
        self._pg_start()
        self._admin_url = f"postgresql://aap@127.0.0.1:{port}/postgres"
        return self

    def _pg_start(self) -> None:
        """``pg_ctl start`` on this cluster's data directory, logging beside it, waiting up to a
        minute for it to accept connections."""
        assert self._dir is not None and self._bin is not None
        data, log = os.path.join(self._dir, "data"), os.path.join(self._dir, "log")
        self._run([os.path.join(self._bin, "pg_ctl"), "-D", data, "-l", log, "-w", "-t", "60", "start"])

    def _run(self, argv: list[str]) -> None:
        result = subprocess.run(self._user_prefix + argv, capture_output=True, text=True)
        if result.returncode != 0:
            raise PostgresUnavailable(f"{argv[0]} failed: {result.stderr.strip()[:500]}")

    def create_database(self, *, role: str | None = None) -> str:
        """A fresh, empty database; returns its URL. ``role``: owned by, and reached as, that
        role (made once: a login without superuser or BYPASSRLS, so row-level security binds
        it as it binds an application's own role, docs/deployment.md)."""
        import psycopg

        assert self._admin_url is not None
        name = "aap_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self._admin_url, autocommit=True) as conn:
            owner = ""
            if role is not None:
                exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
                if exists is None:
                    conn.execute(f'CREATE ROLE "{role}" LOGIN NOSUPERUSER NOBYPASSRLS')
                owner = f' OWNER "{role}"'
            conn.execute(f"CREATE DATABASE \"{name}\"{owner} TEMPLATE template0 ENCODING 'UTF8'")
        base, _, _ = self._admin_url.rpartition("/")
        if role is not None:
            base = base.replace("://aap@", f"://{role}@", 1)
        return f"{base}/{name}"

    def admin_url_of(self, database_url: str) -> str:
        """The URL of the database ``database_url`` names, reached as the cluster's superuser."""
        assert self._admin_url is not None
        base, _, _ = self._admin_url.rpartition("/")
        return f"{base}/{database_url.rsplit('/', 1)[1]}"

    def psql(self, database_url: str, script: str) -> None:
        """Run a SQL script file (a ``pg_dump --format=plain`` one) into a database, as its URL's role."""
        assert self._bin is not None or shutil.which("psql") is not None
        psql = os.path.join(self._bin, "psql") if self._bin else "psql"
        done = subprocess.run(
            [psql, "-q", "-v", "ON_ERROR_STOP=1", "-f", script, database_url], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"psql failed: {done.stderr.strip()[:500]}")

    def drop_database(self, url: str) -> None:
        """Drop a database :meth:`create_database` made, unless something still uses it (a
        straggling connection is never cut: the database then waits for :meth:`stop`)."""
        import psycopg

        assert self._admin_url is not None
        name = url.rpartition("/")[2]
        try:
            with psycopg.connect(self._admin_url, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        except psycopg.errors.ObjectInUse:
            pass

    def start_replica(self) -> PostgresCluster:
        """A hot standby of this cluster on another loopback port, streaming from it
        (``pg_basebackup -R``: a base backup plus the recovery settings)."""
        if self._dir is None or self._bin is None or self._admin_url is None:
            raise PostgresUnavailable("a replica needs a cluster this process started")
        replica = PostgresCluster()
        replica._bin, replica._user_prefix = self._bin, self._user_prefix
        replica._dir = tempfile.mkdtemp(prefix="aap-pg-replica-")
        if self._user_prefix:
            pw = pwd.getpwnam("postgres")
            os.chown(replica._dir, pw.pw_uid, pw.pw_gid)
        primary_port = self._admin_url.rsplit(":", 1)[1].split("/")[0]
        data = os.path.join(replica._dir, "data")
        port = _free_port()
        replica._run(
            [
                os.path.join(self._bin, "pg_basebackup"),
                "-D",
                data,
                "-h",
                "127.0.0.1",
                "-p",
                primary_port,
                "-U",
                "aap",
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            ]
        )
        with open(os.path.join(data, "postgresql.auto.conf"), "a") as conf:  # later lines win
            conf.write(f"port = {port}\nunix_socket_directories = '{replica._dir}'\nhot_standby = on\n")
        replica._pg_start()
        replica._admin_url = f"postgresql://aap@127.0.0.1:{port}/postgres"
        return replica

    def url_of(self, database_url: str) -> str:
        """The URL of the database ``database_url`` names, on this cluster (a replica's copy)."""
        assert self._admin_url is not None
        base, _, _ = self._admin_url.rpartition("/")
        return f"{base}/{database_url.rsplit('/', 1)[1]}"

    def halt(self) -> None:
        """Stop the server at once (a crash), keeping its data for :meth:`resume`."""
        assert self._dir is not None and self._bin is not None
        self._run(
            [os.path.join(self._bin, "pg_ctl"), "-D", os.path.join(self._dir, "data"), "-m", "immediate", "-w", "stop"]
        )

    def resume(self) -> None:
        assert self._dir is not None and self._bin is not None
        self._pg_start()

    def stop(self) -> None:
        if self._dir and self._bin:
            data = os.path.join(self._dir, "data")
            subprocess.run(
                self._user_prefix + [os.path.join(self._bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"],
                capture_output=True,
            )
            time.sleep(0.1)
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
