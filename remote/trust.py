"""Trust for the SSH transport: host keys pinned in one known_hosts file (unknown or changed keys
are refused with the fingerprint and how to trust it, never added), and the client's keys (the
identity file, then the SSH agent)."""

from __future__ import annotations

import base64
import hashlib
import os

import paramiko

from .endpoint import Endpoint
from .errors import AuthFailed, HostKeyMismatch, Unreachable


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint, as ``ssh-keygen -l`` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def pinned(known_hosts: str, hop: str, ep: Endpoint) -> dict[str, paramiko.PKey]:
    """The keys known_hosts pins for ep, by key type (none when the file is missing)."""
    hk = paramiko.HostKeys()
    try:
        hk.load(known_hosts)
    except FileNotFoundError:
        return {}
    except (OSError, paramiko.SSHException) as e:
        raise HostKeyMismatch(hop, ep.known_hosts_name, "-", f"cannot read {known_hosts}: {e}") from None
    entry = hk.lookup(ep.known_hosts_name)
    return dict(entry.items()) if entry else {}


def check_host_key(
    known_hosts: str, hop: str, ep: Endpoint, key: paramiko.PKey, pinned: dict[str, paramiko.PKey]
) -> None:
    """Refuse an unknown or changed key with its fingerprint and how to trust it; never add it."""
    name, kh = ep.known_hosts_name, known_hosts
    line = f"{name} {key.get_name()} {key.get_base64()}"
    old = pinned.get(key.get_name())
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


def authenticate(hop: str, ep: Endpoint, t: paramiko.Transport, keys: list[paramiko.PKey]) -> None:
    for key in keys:
        try:
            t.auth_publickey(ep.user, key)
        except paramiko.BadAuthenticationType as e:
            raise AuthFailed(hop, f"{ep.user}@{ep.host}: server allows only {e.allowed_types}") from None
        except paramiko.AuthenticationException:
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
