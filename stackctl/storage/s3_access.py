"""Host-side check of an S3 tier, without the image: the endpoint resolves (as LMCache addresses it: the bucket
as a virtual host), TCP connects, speaks TLS or plain HTTP as the recipe says, the bucket exists, and the credentials
can put, get and delete a test object. Each failure names its cause in words.

botocore is imported lazily (only when a recipe has an S3 tier), so the CLI stays light.
"""

from __future__ import annotations

import os
import socket
import ssl
import uuid
from dataclasses import dataclass, field

# Causes, as the doctor reports them.
UNREACHABLE = "endpoint unreachable"
TLS_MISMATCH = "TLS mismatch"
BUCKET_MISSING = "bucket missing"
ACCESS_DENIED = "access denied"
NO_CREDENTIALS = "credentials missing"
CONTENT_MISMATCH = "content mismatch"
# The gateway took the connection but a request got no answer: a Ceph RADOS Gateway whose cluster is full (or whose
# storage daemons are down) holds writes without answering. Told apart from an endpoint that cannot be reached.
STORE_SILENT = "store not answering"

TIMEOUT_S = 3.0


@dataclass
class S3Endpoint:
    bucket: str
    host: str
    port: int
    tls: bool
    region: str
    ca_file: str | None = None

    @property
    def virtual_host(self) -> str:
        return f"{self.bucket}.{self.host}"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"


@dataclass
class Verdict:
    ok: bool
    message: str
    cause: str = ""
    facts: dict = field(default_factory=dict)


def endpoint_of(tier) -> S3Endpoint:
    """LMCache's URL form: s3://BUCKET.HOST[:PORT]; the port defaults to 443 with TLS, 80 without."""
    address = tier.url.removeprefix("s3://")
    hostport, _, _ = address.partition("/")
    name, _, port = hostport.partition(":")
    bucket, _, host = name.partition(".")
    tls = not tier.disable_tls
    return S3Endpoint(bucket=bucket, host=host, port=int(port) if port else (443 if tls else 80), tls=tls,
                      region=tier.region or "us-east-1", ca_file=getattr(tier, "ca_file", None))


def credentials_of(tier, environ=os.environ) -> tuple[dict, str]:
    """boto3 client keyword arguments for the tier's credentials, and a problem (empty when none)."""
    if tier.access_key_env or tier.secret_key_env:
        missing = [name for name in (tier.access_key_env, tier.secret_key_env) if name and not environ.get(name)]
        if missing:
            return {}, f"{NO_CREDENTIALS}: host variable(s) {', '.join(missing)} not set"
        return {"aws_access_key_id": environ[tier.access_key_env],
                "aws_secret_access_key": environ[tier.secret_key_env]}, ""
    if tier.credentials_file:
        if not os.path.isfile(tier.credentials_file):
            return {}, f"{NO_CREDENTIALS}: {tier.credentials_file} does not exist"
        os.environ.setdefault("AWS_SHARED_CREDENTIALS_FILE", tier.credentials_file)
    return {}, ""  # botocore's default chain


def check_transport(endpoint: S3Endpoint) -> Verdict:
    """Resolve BUCKET.HOST, connect, and find out whether the server speaks what the recipe says."""
    try:
        address = socket.getaddrinfo(endpoint.virtual_host, endpoint.port, type=socket.SOCK_STREAM)[0][4]
    except socket.gaierror as exc:
        return Verdict(False, f"{UNREACHABLE}: {endpoint.virtual_host} does not resolve ({exc.strerror}; LMCache "
                       "addresses the bucket as a virtual host, BUCKET.HOST)", UNREACHABLE)
    try:
        socket.create_connection((str(address[0]), endpoint.port), timeout=TIMEOUT_S).close()
    except OSError as exc:
        return Verdict(False, f"{UNREACHABLE}: {endpoint.virtual_host}:{endpoint.port} ({address[0]}): "
                       f"{exc.strerror or exc}", UNREACHABLE)
    speaks = _speaks(address[:2], endpoint)
    wanted = "TLS" if endpoint.tls else "plain HTTP"
    if speaks == "untrusted":
        return Verdict(False, f"{TLS_MISMATCH}: {endpoint.host}:{endpoint.port} speaks TLS with a certificate this "
                       "host does not trust (set the tier's ca_file)", TLS_MISMATCH)
    if speaks != wanted:
        fix = "set disable_tls = true or use the TLS port" if endpoint.tls else "remove disable_tls or use the HTTP port"
        return Verdict(False, f"{TLS_MISMATCH}: the recipe says {wanted} but {endpoint.host}:{endpoint.port} "
                       f"speaks {speaks} ({fix})", TLS_MISMATCH)
    return Verdict(True, f"{endpoint.virtual_host}:{endpoint.port} answers {wanted}", facts={"address": address[0]})


def _speaks(address, endpoint: S3Endpoint) -> str:
    """'TLS', 'plain HTTP', 'untrusted' (TLS, certificate not trusted) or 'neither TLS nor HTTP'."""
    context = ssl.create_default_context(cafile=endpoint.ca_file) if endpoint.ca_file else ssl.create_default_context()
    try:
        with socket.create_connection(address, timeout=TIMEOUT_S) as raw:
            with context.wrap_socket(raw, server_hostname=endpoint.virtual_host):
                return "TLS"
    except ssl.SSLCertVerificationError:
        return "untrusted"
    except (ssl.SSLError, OSError):
        pass
    try:
        with socket.create_connection(address, timeout=TIMEOUT_S) as raw:
            raw.sendall(f"HEAD / HTTP/1.1\r\nHost: {endpoint.host}\r\nConnection: close\r\n\r\n".encode())
            if raw.recv(16).startswith(b"HTTP/"):
                return "plain HTTP"
    except OSError:
        pass
    return "neither TLS nor HTTP"


def _client(endpoint: S3Endpoint, credentials: dict):
    import boto3
    from botocore.config import Config

    options = {"connect_timeout": TIMEOUT_S, "read_timeout": 10, "retries": {"max_attempts": 1},
               "s3": {"addressing_style": "virtual"},
               # botocore >= 1.36 sends streaming checksums by default, which S3-compatible servers such as Ceph
               # RGW 16 refuse (MissingContentLength): only when an operation requires them.
               "request_checksum_calculation": "when_required", "response_checksum_validation": "when_required"}
    try:
        config = Config(**options)
    except TypeError:  # older botocore: no checksum options, and no such default either
        options.pop("request_checksum_calculation")
        options.pop("response_checksum_validation")
        config = Config(**options)
    return boto3.client("s3", endpoint_url=endpoint.url, region_name=endpoint.region, config=config,
                        verify=(endpoint.ca_file or True) if endpoint.tls else False, **credentials)


def _cause_of(error) -> str:
    code = str(error.response.get("Error", {}).get("Code", ""))
    return _cause(code, error.response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


def _cause(code: str, status: int | None) -> str:
    if code in ("NoSuchBucket",) or (status == 404 and code in ("404", "NotFound")):
        return BUCKET_MISSING
    if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403") or status == 403:
        return ACCESS_DENIED
    return ""


def client_of(tier, environ=os.environ):
    """(boto3 client, endpoint, problem) for a tier: a client with the tier's credentials and TLS settings, and
    what is wrong with the credentials ("" when nothing; else the client falls back to botocore's default chain)."""
    credentials, problem = credentials_of(tier, environ)
    endpoint = endpoint_of(tier)
    return _client(endpoint, credentials), endpoint, problem


def where_of(endpoint: S3Endpoint) -> str:
    return f"bucket {endpoint.bucket} at {endpoint.host}:{endpoint.port}"


def error_verdict(exc, endpoint: S3Endpoint) -> Verdict:
    """A botocore error in words, with its cause (bucket missing, access denied, endpoint unreachable, S3 error)."""
    from botocore.exceptions import ClientError

    from botocore.exceptions import ReadTimeoutError

    where = where_of(endpoint)
    if isinstance(exc, ReadTimeoutError):
        return _silent(where, "requests")
    if not isinstance(exc, ClientError):
        return Verdict(False, f"{UNREACHABLE}: {where}: {exc}", UNREACHABLE)
    return _refusal(_cause_of(exc), exc.response.get("Error", {}).get("Code", "") or str(exc), where)


def _silent(where: str, step: str) -> Verdict:
    return Verdict(False, f"{STORE_SILENT}: {where} took the connection but gave no answer to the test's {step} in "
                   f"{TIMEOUT_S:g} s: the storage behind the gateway is full or down (Ceph: `ceph -s`)", STORE_SILENT)


def _refusal(cause: str, code: str, where: str) -> Verdict:
    """The verdict on a request S3 answered with an error (its cause from the code and status)."""
    if cause == BUCKET_MISSING:
        return Verdict(False, f"{BUCKET_MISSING}: {where} does not exist", cause)
    if cause == ACCESS_DENIED:
        return Verdict(False, f"{ACCESS_DENIED}: {where} refused the credentials ({code})", cause)
    return Verdict(False, f"S3 error on {where}: {code}", "S3 error")


def check_bucket(tier, environ=os.environ) -> Verdict:
    """The whole check: transport, then bucket and a test object's put/get/delete with the tier's credentials."""
    endpoint = endpoint_of(tier)
    transport = check_transport(endpoint)
    if not transport.ok:
        return transport
    credentials, problem = credentials_of(tier, environ)
    if problem:
        return Verdict(False, problem, NO_CREDENTIALS)
    if credentials:  # keys named by the recipe: four signed requests, without botocore's import
        return _signed_round_trip(endpoint, credentials, transport)
    client, endpoint, problem = client_of(tier, environ)
    from botocore.exceptions import BotoCoreError, ClientError

    key, body = _test_object()
    where = where_of(endpoint)
    try:
        client.head_bucket(Bucket=endpoint.bucket)
        client.put_object(Bucket=endpoint.bucket, Key=key, Body=body)
        try:
            if client.get_object(Bucket=endpoint.bucket, Key=key)["Body"].read() != body:
                return Verdict(False, f"{CONTENT_MISMATCH}: test object read back differs in {where}",
                               CONTENT_MISMATCH)
        finally:
            client.delete_object(Bucket=endpoint.bucket, Key=key)
    except (ClientError, BotoCoreError) as exc:
        return error_verdict(exc, endpoint)
    return Verdict(True, f"{where}: test object put, read back and deleted ({transport.message})")


def _test_object() -> tuple[str, bytes]:
    return f"stackctl-probe/{socket.gethostname()}-{uuid.uuid4().hex[:12]}", uuid.uuid4().bytes * 64


def _signed_round_trip(endpoint: S3Endpoint, credentials: dict, transport: Verdict) -> Verdict:
    """HEAD the bucket, put a test object, read it back and delete it, over one connection (s3_signed.py)."""
    from stackctl.storage.s3_signed import Bucket

    key, body = _test_object()
    where = where_of(endpoint)
    bucket = Bucket(endpoint, credentials["aws_access_key_id"], credentials["aws_secret_access_key"], TIMEOUT_S)
    step = "HEAD"
    try:
        for step, path, data in (("HEAD", "", b""), ("PUT", key, body)):
            reply = bucket.ask(step, path, data)
            if reply.status >= 300:
                return _refusal(_cause(reply.code, reply.status), reply.code, where)
        step = "GET"
        read = bucket.ask("GET", key)
        step = "DELETE"
        deleted = bucket.ask("DELETE", key)
        for reply in (read, deleted):
            if reply.status >= 300:
                return _refusal(_cause(reply.code, reply.status), reply.code, where)
        if read.body != body:
            return Verdict(False, f"{CONTENT_MISMATCH}: test object read back differs in {where}", CONTENT_MISMATCH)
    except TimeoutError:  # the transport check connected a moment ago: the gateway is up, what is behind it is not
        return _silent(where, step)
    except OSError as exc:  # refused, reset, TLS: what botocore's path reports as unreachable too
        return Verdict(False, f"{UNREACHABLE}: {where}: {exc}", UNREACHABLE)
    finally:
        bucket.close()
    return Verdict(True, f"{where}: test object put, read back and deleted ({transport.message})")


def list_keys(tier, prefix: str, environ=os.environ) -> list[str]:
    """Keys under a prefix (used to see the objects a round trip wrote)."""
    client, endpoint, _ = client_of(tier, environ)
    response = client.list_objects_v2(Bucket=endpoint.bucket, Prefix=prefix)
    return [item["Key"] for item in response.get("Contents", [])]


def delete_keys(tier, keys: list[str], environ=os.environ) -> None:
    client, endpoint, _ = client_of(tier, environ)
    for start in range(0, len(keys), 1000):
        client.delete_objects(Bucket=endpoint.bucket,
                              Delete={"Objects": [{"Key": k} for k in keys[start:start + 1000]], "Quiet": True})
