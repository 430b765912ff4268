"""A throw-away certificate authority and a server certificate signed by it,
made with the ``openssl`` command line: for a test broker's TLS listener.

Files written to the folder given::

    ca.pem, ca.key        the CA (what clients trust: ``ssl.ca.location``)
    server.pem, server.key  the server's certificate, valid for the host
                            (IP and DNS name) and for ``localhost``
    broker.p12            the server key and chain as a PKCS#12 keystore
                          (for Java), protected by the password given
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from pathlib import Path

from pipelines.kafka.broker import BrokerError

DAYS = 30
KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def make_ca(folder: Path, name: str = "scinol test CA") -> Path:
    """A self-signed CA in ``folder`` (``ca.pem``, ``ca.key``); the certificate's path."""
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    openssl(["req", "-x509", *KEY, "-keyout", "ca.key", "-out", "ca.pem", "-days", str(DAYS),
             "-subj", f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"], folder)
    return folder / "ca.pem"


def make_ca_and_server_cert(folder: Path, host: str, keystore_password: str) -> None:
    """A CA, a server certificate for ``host`` signed by it, and the PKCS#12 keystore."""
    make_ca(folder)
    openssl(["req", *KEY, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost"], folder)
    (folder / "server.ext").write_text(
        f"subjectAltName={_subject_alt_names(host)}\n"
        "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n")
    openssl(["x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", str(DAYS), "-extfile", "server.ext"], folder)
    openssl(["pkcs12", "-export", "-in", "server.pem", "-inkey", "server.key", "-certfile", "ca.pem",
             "-name", "broker", "-out", "broker.p12", "-passout", "env:SCINOL_KEYSTORE_PASSWORD"], folder,
            env={"SCINOL_KEYSTORE_PASSWORD": keystore_password})


def _subject_alt_names(host: str) -> str:
    names = ["DNS:localhost", "IP:127.0.0.1"]
    try:
        ipaddress.ip_address(host)
        names.append(f"IP:{host}")
    except ValueError:
        names.append(f"DNS:{host}")
    return ",".join(dict.fromkeys(names))


def openssl(args: list[str], folder: Path, env: dict | None = None) -> None:
    try:
        proc = subprocess.run(["openssl", *args], cwd=folder, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})}, timeout=60)
    except FileNotFoundError:
        raise BrokerError("making the test broker's TLS certificates needs 'openssl', which is not installed") from None
    if proc.returncode != 0:
        raise BrokerError(f"openssl {args[0]} failed making TLS certificates: {proc.stderr.strip()[-300:]}")
