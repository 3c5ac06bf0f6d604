"""The certificates dltrace makes for a fleet on one machine, and who else can reach it.

Why: any client that reaches a Dask scheduler runs code in every worker, and every
local user can reach a loopback port. Mutual TLS closes that, but asking a user to
run openssl for a fleet that never leaves the machine means few would. So dltrace
makes the certificates itself, once per user: a CA whose key is used to sign three
certificates (scheduler, worker, client) and then dropped, all in a folder of
``$DLTRACE_HOME`` only this user can read. ``dltrace scheduler`` serves with them,
and a ``tls://`` scheduler on loopback given no certificates is reached with them.
Another local user cannot read the keys, so cannot connect.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import pwd
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tracer import envs
from tracer.errors import DltraceError

if TYPE_CHECKING:
    from distributed.security import Security

#: The roles Dask's security names, each with a certificate and key of its own.
ROLES = ("scheduler", "worker", "client")
#: How long the certificates hold; a fleet of one machine, remade by deleting the folder.
DAYS = 3650


@dataclass(frozen=True)
class Credentials:
    """A folder of ``ca.pem`` and ``ROLE.pem``/``ROLE.key`` for each role."""

    folder: Path

    @property
    def ca(self) -> Path:
        return self.folder / "ca.pem"

    def cert(self, role: str) -> Path:
        return self.folder / f"{role}.pem"

    def key(self, role: str) -> Path:
        return self.folder / f"{role}.key"

    def security(self) -> Security:
        """Dask's mutual TLS with these files, for every role."""
        from distributed.security import Security

        files: dict[str, str] = {"tls_ca_file": str(self.ca)}
        for role in ROLES:
            files[f"tls_{role}_cert"] = str(self.cert(role))
            files[f"tls_{role}_key"] = str(self.key(role))
        return Security(require_encryption=True, **files)


def folder() -> Path:
    return envs.home() / "fleet-credentials"


def _checked(where: Path) -> Credentials:
    """The folder's credentials, if they are this user's alone (else one line: keys
    another user could read or replace would let them in)."""
    info = where.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise DltraceError(f"fleet credentials {where} are not a folder only you can use (mode "
                           f"{stat.filemode(info.st_mode)}): remove it, and dltrace makes new ones")
    creds = Credentials(where)
    for path in (creds.ca, *(p for r in ROLES for p in (creds.cert(r), creds.key(r)))):
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            raise DltraceError(f"fleet credentials {where} lack {path.name}: remove the folder, and dltrace "
                               "makes new ones") from None
        if not stat.S_ISREG(mode):
            raise DltraceError(f"fleet credentials {path} is not a regular file: remove {where}")
    for path in (creds.ca, *(creds.cert(r) for r in ROLES)):
        check_dates(path, f": remove {where}, and dltrace makes new ones")
    return creds


def check_dates(path: str | os.PathLike[str], remedy: str = "") -> None:
    """One line when a certificate in the PEM file ``path`` has expired or is not valid
    yet: the TLS handshake would otherwise fail as "TLS certificate does not match",
    which sends the user looking at the wrong thing. A file that is not PEM is left to
    the handshake to refuse."""
    from cryptography import x509

    try:
        certs = x509.load_pem_x509_certificates(Path(path).read_bytes())
    except (OSError, ValueError):
        return
    now = datetime.datetime.now(datetime.timezone.utc)
    for cert in certs:
        after, before = cert.not_valid_after_utc, cert.not_valid_before_utc
        if after < now:
            raise DltraceError(f"TLS certificate {path} expired on {after:%Y-%m-%d %H:%M} UTC{remedy}")
        if before > now:
            raise DltraceError(f"TLS certificate {path} is not valid before {before:%Y-%m-%d %H:%M} UTC "
                               f"(is this machine's clock right?){remedy}")


def existing() -> Credentials | None:
    """This user's fleet credentials, if dltrace made them (checked), else None."""
    where = folder()
    if not os.path.lexists(where):
        return None
    return _checked(where)


def ensure() -> Credentials:
    """This user's fleet credentials, made the first time (written to a private folder
    beside the final one and renamed into place, so two processes never mix halves)."""
    found = existing()
    if found is not None:
        return found
    where = folder()
    where.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".fleet-credentials-", dir=where.parent))  # mode 0700
    try:
        _write(work)
        try:
            os.rename(work, where)
        except OSError:  # another process made them first: theirs are the ones
            if not os.path.lexists(where):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return _checked(where)


def _write(into: Path) -> None:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    user = pwd.getpwuid(os.getuid()).pw_name

    def name(who: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"dltrace fleet {who} of {user}")])

    def pem(cert: x509.Certificate) -> bytes:
        return cert.public_bytes(serialization.Encoding.PEM)

    def private(path: Path, data: bytes) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(name("CA")).issuer_name(name("CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=DAYS))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    private(into / "ca.pem", pem(ca))
    here = x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                                        x509.IPAddress(ipaddress.ip_address("::1"))])
    for role in ROLES:
        key = ec.generate_private_key(ec.SECP256R1())
        cert = (x509.CertificateBuilder().subject_name(name(role)).issuer_name(ca.subject)
                .public_key(key.public_key()).serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(minutes=5))
                .not_valid_after(now + datetime.timedelta(days=DAYS))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
                .add_extension(here, critical=False)
                .sign(ca_key, hashes.SHA256()))
        private(into / f"{role}.pem", pem(cert))
        private(into / f"{role}.key", key.private_bytes(serialization.Encoding.PEM,
                                                        serialization.PrivateFormat.PKCS8,
                                                        serialization.NoEncryption()))
    # the CA's key is never written: no one, this user included, can sign another certificate


def _login_range() -> tuple[int, int]:
    """UID_MIN and UID_MAX of /etc/login.defs (Debian's 1000 and 60000 by default):
    the accounts of people, as distinct from system accounts."""
    low, high = 1000, 60000
    try:
        text = Path("/etc/login.defs").read_text(errors="replace")
    except OSError:
        return low, high
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            if parts[0] == "UID_MIN":
                low = int(parts[1])
            elif parts[0] == "UID_MAX":
                high = int(parts[1])
    return low, high


def other_users() -> list[str]:
    """Accounts of people on this machine other than this one (a login shell, a user
    id in login.defs' range): each could reach a loopback port. Root is not counted,
    since it can read this user's keys anyway."""
    low, high = _login_range()
    me = os.getuid()
    return sorted(p.pw_name for p in pwd.getpwall()
                  if low <= p.pw_uid <= high and p.pw_uid != me
                  and not p.pw_shell.endswith(("/nologin", "/false")) and p.pw_shell)
