"""AWS Signature Version 4, and the AWS credentials memq can find without an AWS SDK.

:func:`sign` adds ``X-Amz-Date``, ``X-Amz-Security-Token`` (temporary credentials) and the
``Authorization`` header to a request, as the AWS SDKs do for every service but S3: the
canonical URI is the request path URI-encoded once more (``/model/a%3A0/invoke`` is signed as
``/model/a%253A0/invoke``), the payload hash is the body's sha256, and every header given
is signed. :func:`canonical_request` and :func:`signature` are exposed so a server (the
tests' Bedrock double) can recompute a signature from the request it received.

:func:`find_credentials` follows the AWS SDK default chain as far as memq can without one:
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN`` (skipped when
``AWS_PROFILE`` names a profile, as the SDK skips them), then the profile (``AWS_PROFILE``,
else ``default``) of the shared credentials file (``AWS_SHARED_CREDENTIALS_FILE``, else
``~/.aws/credentials``) and of the config file (``AWS_CONFIG_FILE``, else ``~/.aws/config``).
SSO, ``credential_process``, web identity and instance roles are not read.

A :class:`AwsCredentials` never shows its secret key or session token in a repr.
"""

from __future__ import annotations

import configparser
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlsplit

__all__ = ["ALGORITHM", "AwsCredentials", "canonical_request", "find_credentials", "sign",
           "signature", "signed_headers"]

ALGORITHM = "AWS4-HMAC-SHA256"
#: Headers the AWS SDKs never sign (proxies and clients may change them).
_UNSIGNED = frozenset({"authorization", "connection", "expect", "user-agent", "x-amzn-trace-id",
                       "transfer-encoding", "content-length"})


@dataclass(frozen=True, repr=False)
class AwsCredentials:
    """An access key id, its secret and, for temporary credentials, the session token.
    ``source`` says where they came from (for messages: never a secret)."""

    access_key_id: str
    secret_access_key: str
    session_token: str | None = None
    source: str = "environment"

    @property
    def secrets(self) -> tuple[str, ...]:
        """The values no message may show."""
        return tuple(s for s in (self.secret_access_key, self.session_token) if s)

    def __repr__(self) -> str:
        return f"AwsCredentials({self.access_key_id!r}, source={self.source!r})"


def _uri_encode(text: str) -> str:
    """RFC 3986 encoding, only A-Z a-z 0-9 - _ . ~ left as they are (SigV4's rule)."""
    return quote(text, safe="-_.~")


def _canonical_query(query: str) -> str:
    pairs = []
    for part in query.split("&") if query else ():
        name, _, value = part.partition("=")
        pairs.append((_uri_encode(name), _uri_encode(value)))
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def signed_headers(headers: Mapping[str, str]) -> list[str]:
    """The lower-case names of ``headers`` a request signs, sorted."""
    return sorted({k.lower() for k in headers} - _UNSIGNED)


def canonical_request(method: str, path: str, query: str, headers: Mapping[str, str],
                      names: list[str], payload_hash: str) -> str:
    """SigV4's canonical request: ``path`` as sent (each segment encoded once more), the
    query sorted, the ``names`` headers (lower-case) with their values trimmed."""
    lower = {k.lower(): v for k, v in headers.items()}
    uri = "/".join(_uri_encode(segment) for segment in (path or "/").split("/"))
    lines = "".join(f"{name}:{' '.join(str(lower[name]).split())}\n" for name in names)
    return "\n".join([method.upper(), uri, _canonical_query(query), lines, ";".join(names),
                      payload_hash])


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signature(secret_access_key: str, amz_date: str, region: str, service: str,
              canonical: str) -> str:
    """The hex signature of ``canonical`` for ``amz_date`` (``YYYYMMDDTHHMMSSZ``)."""
    day = amz_date[:8]
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(("AWS4" + secret_access_key).encode(), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def sign(method: str, url: str, headers: Mapping[str, str], body: bytes, *,
         credentials: AwsCredentials, region: str, service: str,
         now: datetime | None = None) -> dict[str, str]:
    """``headers`` plus ``Host``, ``X-Amz-Date``, ``X-Amz-Security-Token`` (when the
    credentials have one) and the SigV4 ``Authorization`` for this request."""
    parts = urlsplit(url)
    amz_date = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    out = {**headers, "Host": parts.netloc, "X-Amz-Date": amz_date}
    if credentials.session_token:
        out["X-Amz-Security-Token"] = credentials.session_token
    names = signed_headers(out)
    canonical = canonical_request(method, parts.path, parts.query, out, names,
                                  hashlib.sha256(body).hexdigest())
    sig = signature(credentials.secret_access_key, amz_date, region, service, canonical)
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    out["Authorization"] = (f"{ALGORITHM} Credential={credentials.access_key_id}/{scope}, "
                            f"SignedHeaders={';'.join(names)}, Signature={sig}")
    return out


def _profile_keys(path: Path, section: str) -> dict[str, str]:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path, encoding="utf-8")
    except (OSError, configparser.Error):
        return {}
    return dict(parser[section]) if parser.has_section(section) else {}


def find_credentials(env: Mapping[str, str]) -> AwsCredentials | None:
    """The first credentials of the chain in the module docstring, or None."""
    profile = (env.get("AWS_PROFILE") or "").strip()
    key_id = (env.get("AWS_ACCESS_KEY_ID") or "").strip()
    secret = (env.get("AWS_SECRET_ACCESS_KEY") or "").strip()
    if key_id and secret and not profile:
        return AwsCredentials(key_id, secret, (env.get("AWS_SESSION_TOKEN") or "").strip() or None)
    home = Path(env.get("HOME") or Path.home())
    name = profile or "default"
    files = (
        (Path(env.get("AWS_SHARED_CREDENTIALS_FILE") or home / ".aws" / "credentials"), name),
        (Path(env.get("AWS_CONFIG_FILE") or home / ".aws" / "config"),
         name if name == "default" else f"profile {name}"),
    )
    for path, section in files:
        keys = _profile_keys(path.expanduser(), section)
        key_id = keys.get("aws_access_key_id", "").strip()
        secret = keys.get("aws_secret_access_key", "").strip()
        if key_id and secret:
            return AwsCredentials(key_id, secret, keys.get("aws_session_token", "").strip() or None,
                                  source=f"profile {name} of {path}")
    return None
