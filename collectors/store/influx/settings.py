"""`[store] influx = { url = ..., database = ... }`: where a run's points go besides the files.

Credentials never live in config.toml (it is copied into every run directory and the manifest):
they come from the environment variable named by `credentials_env`, or from the file named by
`credentials_file`. For InfluxDB 1.x the credential is `user:password`; for 2.x/3.x it is a token.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from longhaul.core.errors import SettingError
from longhaul.core.model import Strict

DEFAULT_CREDENTIALS_ENV = "LONGHAUL_INFLUX_TOKEN"
SECRET_KEYS = ("token", "password", "username", "user", "auth")


class InfluxSettings(Strict):
    url: str
    database: str | None = None            # InfluxDB 1.x: /write?db=
    retention_policy: str | None = None    # 1.x only; the database's default when not given
    bucket: str | None = None              # InfluxDB 2.x/3.x: /api/v2/write?bucket=
    org: str | None = None                 # 2.x
    credentials_env: str = DEFAULT_CREDENTIALS_ENV
    credentials_file: str | None = None    # relative to config.toml; its first line is the credential
    batch_lines: int = Field(5000, ge=1, le=100_000)
    timeout_s: float = Field(10.0, gt=0, le=300)
    drain_s: float = Field(30.0, ge=0, le=3600)      # at the run's end: how long to go on shipping
    telegraf: bool = True                  # Telegraf on every lab host, its points shipped with the run's
    telegraf_interval_s: float = Field(1.0, ge=0.1, le=60)

    @model_validator(mode="before")
    @classmethod
    def _no_secrets(cls, data):
        if isinstance(data, dict):
            for key in SECRET_KEYS:
                if key in data:
                    raise ValueError(
                        f"credentials never go in config.toml (it is copied into every run): remove `{key}` "
                        f"and put the credential in ${DEFAULT_CREDENTIALS_ENV} (or the variable named by "
                        f"credentials_env), or in a file named by credentials_file")
        return data

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("an http:// or https:// URL of the InfluxDB server, e.g. http://influx.lab:8086")
        try:
            _ = parts.port          # raises ValueError for a port that is not 1-65535
        except ValueError:
            raise ValueError("the URL's port is not a number in 1-65535") from None
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_api(self):
        if (self.database is None) == (self.bucket is None):
            raise ValueError("give exactly one of database (InfluxDB 1.x) or bucket (InfluxDB 2.x/3.x, with org)")
        if self.database is not None and self.org is not None:
            raise ValueError("org belongs to InfluxDB 2.x (bucket), not to a 1.x database")
        if self.bucket is not None and self.retention_policy is not None:
            raise ValueError("retention_policy belongs to InfluxDB 1.x (database); a 2.x bucket has its own")
        return self

    @property
    def api(self) -> str:
        """Which wire API (targets.TARGETS): v1 for a database, v2 for a bucket."""
        return "v1" if self.database is not None else "v2"

    @property
    def destination(self) -> str:
        return f"{self.url} {'database' if self.api == 'v1' else 'bucket'} {self.database or self.bucket}"


@dataclass(frozen=True)
class Credential:
    secret: str | None          # None: none given (a server without authentication)
    source: str                 # where it came from, for messages ("$LONGHAUL_INFLUX_TOKEN", a path)


NO_CREDENTIAL = Credential(None, "nowhere")     # a config without [store] influx


def resolve_credential(settings: InfluxSettings, config_dir: Path, environ=os.environ) -> Credential:
    """The credential from the file (if named) or the environment; SettingError for a named file
    that cannot be read or is empty. An unset variable is no credential: the server decides at
    preflight whether it needs one."""
    if settings.credentials_file is not None:
        path = (Path(config_dir) / settings.credentials_file).expanduser()
        try:
            text = path.read_text()
        except OSError as exc:
            raise SettingError(("store", "influx", "credentials_file"), settings.credentials_file,
                               f"cannot read the credential file {path}: {exc.strerror}") from None
        secret = text.strip().splitlines()[0].strip() if text.strip() else ""
        if not secret:
            raise SettingError(("store", "influx", "credentials_file"), settings.credentials_file,
                               f"{path} is empty; its first line must be the token (2.x) or user:password (1.x)")
        return Credential(secret, str(path))
    secret = environ.get(settings.credentials_env)
    return Credential(secret or None, f"${settings.credentials_env}")
