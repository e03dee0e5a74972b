"""Who may use the console, and as what (docs/console.md).

A users file (TOML, outside the config, readable by root alone) lists users with scrypt-hashed
passwords and bearer tokens by their SHA-256, each with a role: a viewer reads, an operator may
also start and stop runs. Without a file the console answers only on a loopback address, where
whoever can connect already has the machine's shell. Every state change carries a CSRF token bound
to the user and this server's secret, and must come from the console's own origin.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import tomllib
from dataclasses import dataclass
from pathlib import Path

ROLES = ("viewer", "operator")
SCRYPT = {"n": 2 ** 14, "r": 8, "p": 1}
LOCAL_USER = "local"        # the user of a loopback console without a users file


class UsersError(ValueError):
    """The users file cannot be used: it says where and what."""


@dataclass(frozen=True)
class User:
    name: str
    role: str

    @property
    def operator(self) -> bool:
        return self.role == "operator"


@dataclass(frozen=True)
class _Entry:
    role: str
    password: str = ""       # scrypt$n$r$p$salt$hash
    token_sha256: str = ""


def hash_password(password: str, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, **SCRYPT)
    b64 = lambda b: base64.b64encode(b).decode()
    return f"scrypt${SCRYPT['n']}${SCRYPT['r']}${SCRYPT['p']}${b64(salt)}${b64(digest)}"


def _verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        got = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, base64.b64decode(digest))


class Users:
    """The users file, read once at start."""

    def __init__(self, entries: dict[str, _Entry]):
        self._entries = entries

    @classmethod
    def load(cls, path: Path) -> Users:
        path = Path(path)
        try:
            doc = tomllib.loads(path.read_text())
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise UsersError(f"{path}: {e}") from None
        entries = {}
        for name, spec in (doc.get("users") or {}).items():
            if not isinstance(spec, dict) or spec.get("role") not in ROLES:
                raise UsersError(f"{path}: users.{name}.role must be one of {', '.join(ROLES)}")
            password, token = spec.get("password", ""), spec.get("token_sha256", "")
            if not (isinstance(password, str) and password.startswith("scrypt$")) and not (
                    isinstance(token, str) and len(token) == 64):
                raise UsersError(f"{path}: users.{name} needs password (scrypt$..., from `longhaul serve "
                                 f"--hash-password`) or token_sha256 (64 hex digits)")
            entries[name] = _Entry(spec["role"], password if isinstance(password, str) else "",
                                   token.lower() if isinstance(token, str) else "")
        if not entries:
            raise UsersError(f"{path}: no [users.NAME] entries")
        return cls(entries)

    def by_password(self, name: str, password: str) -> User | None:
        entry = self._entries.get(name)
        if entry and entry.password and _verify_password(password, entry.password):
            return User(name, entry.role)
        return None

    def by_token(self, token: str) -> User | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        for name, entry in self._entries.items():
            if entry.token_sha256 and hmac.compare_digest(entry.token_sha256, digest):
                return User(name, entry.role)
        return None


def authenticate(users: Users | None, authorization: str) -> User | None:
    """The user of an Authorization header (Basic or Bearer); the local operator when there is no
    users file (the server then listens on loopback only); None when the header does not match."""
    if users is None:
        return User(LOCAL_USER, "operator")
    scheme, _, value = (authorization or "").partition(" ")
    if scheme.lower() == "bearer" and value:
        return users.by_token(value.strip())
    if scheme.lower() == "basic" and value:
        try:
            name, _, password = base64.b64decode(value.strip()).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        return users.by_password(name, password)
    return None


class Csrf:
    """Tokens bound to a user and to this server's start (a secret it never writes down)."""

    def __init__(self, secret: bytes | None = None):
        self._secret = secret or secrets.token_bytes(32)

    def token(self, user: User) -> str:
        return hmac.new(self._secret, user.name.encode(), hashlib.sha256).hexdigest()

    def valid(self, user: User, token: str) -> bool:
        return bool(token) and hmac.compare_digest(self.token(user), token)
