"""The two InfluxDB wire APIs behind one small contract, chosen by `[store] influx` (TARGETS).

- v1: InfluxDB 1.x, `/write?db=` and InfluxQL, through the `influxdb` client (influxdb-python):
  Debian 12's server is 1.6.7, which has no /api/v2 endpoints, so the 2.x client cannot talk to it.
- v2: InfluxDB 2.x and 3.x (and 1.8+'s compatibility endpoints), `/api/v2/write` with a token and
  Flux, through InfluxData's `influxdb-client`.

The clients do the HTTP, authentication and error decoding; their own retries are off because
the spool is the retry buffer (it must know which batch the server acknowledged, which an
in-memory retry queue hides). What a server answers is mapped to three outcomes the shipper acts
on: TargetDown (try the same batch again later), Rejected (the points are bad: set them aside),
and, at preflight only, Refused (credential, database or bucket wrong: exit 2).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Protocol
from urllib.parse import urlsplit

import requests
import urllib3
from influxdb import InfluxDBClient as V1Client
from influxdb.exceptions import InfluxDBClientError, InfluxDBServerError
from influxdb.resultset import ResultSet
from influxdb_client import InfluxDBClient as V2Client
from influxdb_client import WritePrecision
from influxdb_client.client.write_api import SYNCHRONOUS
from influxdb_client.rest import ApiException

from longhaul.collectors.store.influx.settings import Credential, InfluxSettings


class TargetDown(Exception):
    """No answer, a refused connection, a 5xx or 429: the same points can be sent again later."""


class Rejected(Exception):
    """The server refused these points (400: a bad line, a field type conflict, a 413)."""


class Refused(Exception):
    """At preflight: the credential, database or bucket is wrong; the run must not start."""


RETRYABLE = {408, 429, 500, 502, 503, 504}
AUTH = {401, 403}
NAME_OK = re.compile(r"^[A-Za-z0-9_.:-]+$")


class Target(Protocol):
    destination: str

    def check(self) -> None: ...                                    # Refused / TargetDown
    def write(self, lines: list[str]) -> None: ...                  # Rejected / TargetDown
    def rows(self, measurement: str, where: dict[str, str]) -> Iterator[dict]: ...
    def close(self) -> None: ...


def _reason(body) -> str:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    return " ".join(text.split())[:400]


def _literal(value: str) -> str:
    """A tag value for the queries below. Only longhaul's own names are asked for (run ids, cell
    ids): anything else is refused rather than escaped."""
    if not NAME_OK.match(value):
        raise ValueError(f"not a longhaul name: {value!r}")
    return value


class V1Target:
    """InfluxDB 1.x: database (+ retention policy), credential `user:password`."""

    def __init__(self, settings: InfluxSettings, credential: Credential):
        parts = urlsplit(settings.url)
        user = password = None
        if credential.secret:
            user, _, password = credential.secret.partition(":")
        self.settings, self.credential = settings, credential
        self.destination = settings.destination
        self.client = V1Client(host=parts.hostname, port=parts.port or (443 if parts.scheme == "https" else 8086),
                               username=user, password=password, database=settings.database,
                               ssl=parts.scheme == "https", verify_ssl=True, timeout=settings.timeout_s, retries=1,
                               path=parts.path.strip("/"))
        if user is None:            # the client defaults to root:root; send no credential at all
            self.client._username = self.client._password = None

    def check(self) -> None:
        try:
            self.client.ping()
            found = [d["name"] for d in self.client.get_list_database()]
        except InfluxDBClientError as exc:
            if exc.code in AUTH:
                raise Refused(self._auth_problem(exc)) from None
            raise Refused(f"InfluxDB at {self.settings.url} answered {exc.code}: {_reason(exc.content)}") from None
        except (InfluxDBServerError, requests.RequestException) as exc:
            raise TargetDown(f"InfluxDB at {self.settings.url} cannot be reached: {_short(exc)}") from None
        if self.settings.database not in found:
            raise Refused(f"InfluxDB at {self.settings.url} has no database {self.settings.database!r} "
                          f"(it has: {', '.join(found) or 'none'}); create it with "
                          f"influx -execute 'CREATE DATABASE \"{self.settings.database}\"'")

    def _auth_problem(self, exc) -> str:
        if not self.credential.secret:
            return (f"InfluxDB at {self.settings.url} needs a credential and none was given: put user:password "
                    f"in {self.credential.source} (or name a file with credentials_file)")
        return (f"InfluxDB at {self.settings.url} refused the credential from {self.credential.source} "
                f"({exc.code}: {_reason(exc.content)})")

    def write(self, lines: list[str]) -> None:
        try:
            self.client.write_points(lines, protocol="line", time_precision="n",
                                     retention_policy=self.settings.retention_policy)
        except InfluxDBClientError as exc:
            if exc.code in RETRYABLE or exc.code in AUTH:
                raise TargetDown(f"{exc.code}: {_reason(exc.content)}") from None
            raise Rejected(f"{exc.code}: {_reason(exc.content)}") from None
        except InfluxDBServerError as exc:
            raise TargetDown(f"server error: {_reason(exc.args[0] if exc.args else exc)}") from None
        except requests.Timeout:
            raise TargetDown(f"no answer within {self.settings.timeout_s:g} s") from None
        except requests.RequestException as exc:
            raise TargetDown(_short(exc)) from None

    def rows(self, measurement: str, where: dict[str, str]) -> Iterator[dict]:
        """Every point of `measurement` whose tags equal `where`, tags and fields as keys, `time`
        in integer nanoseconds."""
        cond = " AND ".join(f'"{k}" = \'{_literal(v)}\'' for k, v in where.items())
        query = f'SELECT * FROM "{measurement}" WHERE {cond}'
        try:
            results = self.client.query(query, epoch="ns", chunked=True, chunk_size=10000)
            # a ResultSet, a list of them, or (chunked JSON) a generator of them, by the server's encoding
            for result in [results] if isinstance(results, ResultSet) else results:
                yield from result.get_points()
        except (InfluxDBServerError, requests.RequestException) as exc:
            raise TargetDown(_short(exc)) from None

    def close(self) -> None:
        self.client.close()


class V2Target:
    """InfluxDB 2.x/3.x: bucket and org, credential a token."""

    def __init__(self, settings: InfluxSettings, credential: Credential):
        self.settings, self.credential = settings, credential
        self.destination = settings.destination
        self.client = V2Client(url=settings.url, token=credential.secret or "", org=settings.org or "-",
                               timeout=int(settings.timeout_s * 1000), retries=False)
        self.writer = self.client.write_api(write_options=SYNCHRONOUS)

    def check(self) -> None:
        try:
            if not self.client.ping():
                raise TargetDown(f"InfluxDB at {self.settings.url} does not answer /ping")
            bucket = self.client.buckets_api().find_bucket_by_name(self.settings.bucket)
        except ApiException as exc:
            if exc.status in AUTH:
                missing = "no token was given" if not self.credential.secret else "the token was refused"
                raise Refused(f"InfluxDB at {self.settings.url}: {missing} ({exc.status}); the token comes from "
                              f"{self.credential.source}") from None
            if exc.status == 404:          # a 1.8 or 3.x server without the buckets API: the write decides
                return
            raise Refused(f"InfluxDB at {self.settings.url} answered {exc.status}: {_reason(exc.body)}") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TargetDown(f"InfluxDB at {self.settings.url} cannot be reached: {_short(exc)}") from None
        if bucket is None:
            raise Refused(f"InfluxDB at {self.settings.url} has no bucket {self.settings.bucket!r} in org "
                          f"{self.settings.org!r}; create it with influx bucket create -n {self.settings.bucket}")

    def write(self, lines: list[str]) -> None:
        try:
            self.writer.write(bucket=self.settings.bucket, org=self.settings.org or "-", record=lines,
                              write_precision=WritePrecision.NS)
        except ApiException as exc:
            if exc.status in RETRYABLE or exc.status in AUTH:
                raise TargetDown(f"{exc.status}: {_reason(exc.body)}") from None
            raise Rejected(f"{exc.status}: {_reason(exc.body)}") from None
        except urllib3.exceptions.ReadTimeoutError:
            raise TargetDown(f"no answer within {self.settings.timeout_s:g} s") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise TargetDown(_short(exc)) from None

    def rows(self, measurement: str, where: dict[str, str]) -> Iterator[dict]:
        cond = " and ".join(f'r["{k}"] == "{_literal(v)}"' for k, v in where.items())
        flux = (f'from(bucket: "{self.settings.bucket}") |> range(start: 0) '
                f'|> filter(fn: (r) => r._measurement == "{measurement}" and {cond}) '
                f'|> pivot(rowKey: ["_time"], columnKey: ["_field"], valueColumn: "_value")')
        try:
            for record in self.client.query_api().query_stream(flux, org=self.settings.org or "-"):
                values = dict(record.values)
                when = values.pop("_time")
                for key in ("result", "table", "_start", "_stop", "_measurement"):
                    values.pop(key, None)
                values["time"] = int(when.timestamp()) * 1_000_000_000 + when.microsecond * 1000 + \
                    getattr(when, "nanosecond", 0)
                yield values
        except ApiException as exc:
            raise TargetDown(f"{exc.status}: {_reason(exc.body)}") from None

    def close(self) -> None:
        self.client.close()


def _short(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "timed out", "No route to host"):
        if marker in text:
            return marker.lower()
    return " ".join(text.split())[:300]


TARGETS: dict[str, type] = {"v1": V1Target, "v2": V2Target}


def target_for(settings: InfluxSettings, credential: Credential) -> Target:
    return TARGETS[settings.api](settings, credential)
