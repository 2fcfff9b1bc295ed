"""Trust for the SSH transport: host keys pinned in one known_hosts file (unknown or changed keys
are refused with the fingerprint and how to trust it, never added), and the client's keys (the
identity file, then the SSH agent)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from dataclasses import dataclass, field

import paramiko

from .endpoint import Endpoint
from .errors import AuthFailed, HostKeyMismatch, Unreachable


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as ``ssh-keygen -l`` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@dataclass
class Pins:
    """What known_hosts says of one host: its pinned keys by type, and every revoked key."""

    keys: dict[str, paramiko.PKey] = field(default_factory=dict)
    revoked: dict[bytes, int] = field(default_factory=dict)  # a revoked key's bytes -> its line


def pinned(known_hosts: str, hop: str, ep: Endpoint) -> Pins:
    """Read known_hosts as OpenSSH writes it (none when the file is missing). Plain lines pin a
    key for the hosts they name (exactly, or hashed); a ``@revoked`` key is refused for any host;
    ``@cert-authority`` lines are skipped (hsx pins host keys, not certificates). A line that
    does not parse is refused with the file and line, never skipped: a pin might be lost."""
    try:
        with open(known_hosts, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return Pins()
    except OSError as e:
        raise HostKeyMismatch(hop, ep.known_hosts_name, "-", f"cannot read {known_hosts}: {e}") from None
    pins = Pins()
    for n, raw in enumerate(lines, 1):
        try:
            _pin_line(raw, ep.known_hosts_name, n, pins)
        except ValueError as e:
            raise HostKeyMismatch(hop, ep.known_hosts_name, "-", f"{known_hosts} line {n}: {e}") from None
    return pins


MARKERS = ("@revoked", "@cert-authority")


def _pin_line(raw: str, name: str, n: int, pins: Pins) -> None:
    fields = raw.split()
    if not fields or fields[0].startswith("#"):
        return
    marker = fields.pop(0) if fields[0].startswith("@") else ""
    if marker and marker not in MARKERS:
        raise ValueError(f"unknown marker {marker[:40]!r} (OpenSSH knows {', '.join(MARKERS)})")
    if len(fields) < 3:
        raise ValueError("expected HOSTS KEYTYPE KEY [COMMENT]")
    hosts, kind, blob = fields[:3]
    if marker == "@cert-authority":
        return
    named = _names(hosts, name)
    try:
        data = base64.b64decode(blob, validate=True)
    except binascii.Error:
        raise ValueError(f"the {kind[:40]} key is not base64") from None
    try:
        key = paramiko.PKey.from_type_string(kind, data)
    except paramiko.UnknownKeyType:
        return  # a type this client cannot use: it pins nothing here, as in OpenSSH
    except Exception as e:  # noqa: BLE001 - each key class fails its own way on bad bytes
        raise ValueError(f"the {kind[:40]} key does not load ({type(e).__name__})") from None
    if marker == "@revoked":
        pins.revoked.setdefault(key.asbytes(), n)
    elif named:
        pins.keys[key.get_name()] = key


def _names(hosts: str, name: str) -> bool:
    """Whether a line's host field names ``name``: one of its comma-separated names, or its
    hashed form (``|1|salt|hash``, ``ssh-keygen -H``). Patterns are not widened to wildcards."""
    if not hosts.startswith("|1|"):
        return name in hosts.split(",")
    parts = hosts.split("|")
    try:
        if len(parts) != 4:
            raise binascii.Error
        salt, want = (base64.b64decode(x, validate=True) for x in parts[2:])
    except binascii.Error:
        raise ValueError("the hashed host name is not base64 (|1|SALT|HASH)") from None
    return hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), want)


def check_host_key(known_hosts: str, hop: str, ep: Endpoint, key: paramiko.PKey, pins: Pins) -> None:
    """Refuse a revoked, unknown or changed key with its fingerprint and how to trust it; never
    add it."""
    name, kh = ep.known_hosts_name, known_hosts
    line = f"{name} {key.get_name()} {key.get_base64()}"
    if key.asbytes() in pins.revoked:
        where = f"{kh} line {pins.revoked[key.asbytes()]}"
        raise HostKeyMismatch(
            hop, name, fingerprint(key),
            f"{key.get_name()} key is REVOKED ({where} marks it @revoked); it is never accepted. "
            f"If the host has a new key, confirm its fingerprint with whoever runs it and pin that",
        )  # fmt: skip
    old = pins.keys.get(key.get_name())
    if old is not None and old.asbytes() == key.asbytes():
        return
    if old is None:
        detail = (
            f"{key.get_name()} key not in {kh}; if this is the right host (confirm the fingerprint "
            f"with whoever runs it), trust it by adding this line to {kh}: {line}"
        )
    else:
        detail = (
            f"{key.get_name()} key CHANGED (pinned: {fingerprint(old)}); this may be an attack. "
            f"If the host was really re-keyed, confirm the new fingerprint with whoever runs it, then "
            f"run `ssh-keygen -R '{name}' -f {kh}` and add this line to {kh}: {line}"
        )
    raise HostKeyMismatch(hop, name, fingerprint(key), detail)


def load_keys(identity_file: str) -> list[paramiko.PKey]:
    """The identity file's key, then the SSH agent's."""
    keys: list[paramiko.PKey] = []
    if identity_file:
        try:
            keys.append(paramiko.PKey.from_path(identity_file))
        except FileNotFoundError:
            raise AuthFailed("client", f"identity file {identity_file} not found") from None
        except paramiko.PasswordRequiredException:
            raise AuthFailed(
                "client",
                f"identity file {identity_file} is passphrase-protected; load it into ssh-agent",
            ) from None
        except (paramiko.SSHException, OSError, ValueError) as e:
            raise AuthFailed("client", f"cannot load identity file {identity_file}: {e}") from None
    if os.environ.get("SSH_AUTH_SOCK"):
        try:
            keys += list(paramiko.Agent().get_keys())
        except (paramiko.SSHException, OSError):
            pass  # no agent after all: the identity file may still do
    if not keys:
        raise AuthFailed("client", "no identity_file configured and no keys in an SSH agent")
    return keys


AUTH_TIMEOUT = "Authentication timeout."  # paramiko's words (auth_handler.wait_for_response)


def authenticate(hop: str, ep: Endpoint, t: paramiko.Transport, keys: list[paramiko.PKey]) -> None:
    for key in keys:
        try:
            t.auth_publickey(ep.user, key)
        except paramiko.BadAuthenticationType as e:
            raise AuthFailed(hop, f"{ep.user}@{ep.host}: server allows only {e.allowed_types}") from None
        except paramiko.AuthenticationException as e:
            # paramiko says "no answer within auth_timeout" and "the connection ended" with the
            # same exception as a refused key: a busy box is unreachable for now, not a bad key
            if not t.is_active() or str(e) == AUTH_TIMEOUT:
                raise Unreachable(
                    hop, f"{ep.host}:{ep.port}: no answer to the key within {t.auth_timeout:g}s ({e})"
                ) from None
            continue
        except (paramiko.SSHException, EOFError, OSError) as e:
            raise Unreachable(
                hop, f"{ep.host}:{ep.port}: lost during auth: {e or type(e).__name__}"
            ) from None
        if t.is_authenticated():
            return
    tried = ", ".join(f"{k.get_name()} {fingerprint(k)}" for k in keys)
    raise AuthFailed(hop, f"{ep.user}@{ep.host}:{ep.port} refused every key ({tried})")


def base_type(key_type: str) -> str:
    """Negotiated host-key algorithm -> the key type known_hosts stores."""
    return "ssh-rsa" if key_type.startswith("rsa-sha2-") else key_type.replace("-cert-v01@openssh.com", "")
