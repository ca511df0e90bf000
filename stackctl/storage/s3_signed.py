"""The S3 requests of doctor's host check (host.s3-tier), signed with AWS Signature Version 4 by the standard library.

botocore takes about 0.4 s to import and 0.2 s to build an S3 client on a 2-core host, most of `doctor --scope host`
for a stack with an S3 tier. The check needs four requests on one connection (HEAD the bucket; PUT, GET and DELETE a
test object), signed here the way botocore's S3SigV4Auth signs them (botocore 1.44 botocore/auth.py:374-429: the
canonical request, the string to sign, the signing key; :493-499: the payload's SHA-256 in X-Amz-Content-SHA256),
which tests/unit/test_s3_signed.py holds equal to botocore's own signature. The bucket is addressed as a virtual
host (BUCKET.HOST), as LMCache addresses it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from dataclasses import dataclass
from urllib.parse import quote

ALGORITHM = "AWS4-HMAC-SHA256"
_CODE = re.compile(rb"<Code>([^<]+)</Code>")


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    code: str  # S3's error code from the XML body; the status itself for a body-less error (a HEAD's 404)


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(method: str, host: str, path: str, body: bytes, region: str, access_key: str, secret_key: str,
                   when: float | None = None) -> dict[str, str]:
    """The headers that sign `method host path` with `body` for S3 at `when` (seconds since the epoch; now by
    default): Host, X-Amz-Date, X-Amz-Content-SHA256 and Authorization."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if when is None else when))
    day = stamp[:8]
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": host, "x-amz-content-sha256": payload, "x-amz-date": stamp}
    names = ";".join(sorted(headers))
    canonical = "\n".join([method, quote(path, safe="/~"), "",
                           "".join(f"{name}:{headers[name]}\n" for name in sorted(headers)), names, payload])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join([ALGORITHM, stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), "s3"), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {"Host": host, "X-Amz-Date": stamp, "X-Amz-Content-SHA256": payload,
            "Authorization": f"{ALGORITHM} Credential={access_key}/{scope}, SignedHeaders={names}, "
                             f"Signature={signature}"}


class Bucket:
    """One connection to a bucket's virtual host, its requests signed with the given keys."""

    def __init__(self, endpoint, access_key: str, secret_key: str, timeout: float):
        import http.client

        self.endpoint, self.access_key, self.secret_key = endpoint, access_key, secret_key
        self.host = endpoint.virtual_host if endpoint.port == (443 if endpoint.tls else 80) else \
            f"{endpoint.virtual_host}:{endpoint.port}"
        if endpoint.tls:
            import ssl

            context = ssl.create_default_context(cafile=endpoint.ca_file) if endpoint.ca_file else \
                ssl.create_default_context()
            self.connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                endpoint.virtual_host, endpoint.port, timeout=timeout, context=context)
        else:
            self.connection = http.client.HTTPConnection(endpoint.virtual_host, endpoint.port, timeout=timeout)

    def ask(self, method: str, key: str = "", body: bytes = b"") -> Reply:
        path = f"/{key}"
        headers = signed_headers(method, self.host, path, body, self.endpoint.region, self.access_key,
                                 self.secret_key)
        self.connection.request(method, quote(path, safe="/~"), body=body or None,
                                headers={**headers, "Content-Length": str(len(body))})
        response = self.connection.getresponse()
        data = response.read()
        found = _CODE.search(data) if response.status >= 300 else None
        code = found[1].decode(errors="replace") if found else ("" if response.status < 300 else str(response.status))
        return Reply(response.status, data, code)

    def close(self) -> None:
        self.connection.close()
