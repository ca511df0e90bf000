"""host.s3-tier's requests signed by the standard library (stackctl/storage/s3_signed.py): the signature equals
botocore's own S3SigV4Auth for the same request, on the wire too (a local S3 stand-in recomputes each request's
signature with botocore from what it received), and each answer an S3 server gives maps to the check's causes. The
same requests run against the real Ceph RGW in tests/integration/test_tier_preflight.py."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

import pytest

from stackctl.storage import s3_access
from stackctl.storage.s3_signed import signed_headers

KEYS = {"aws_access_key_id": "AKIDSTACKCTLTEST", "aws_secret_access_key": "c2VjcmV0L2tleS93aXRoK3NsYXNoZXM="}


def botocore_authorization(method: str, url: str, body: bytes, headers: dict, stamp: str,
                           region: str = "us-east-1") -> str:
    """The Authorization header botocore's S3 signer writes for this request at `stamp`."""
    from botocore.auth import S3SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    request = AWSRequest(method=method, url=url, data=body, headers=headers)
    request.context["timestamp"] = stamp
    auth = S3SigV4Auth(Credentials(KEYS["aws_access_key_id"], KEYS["aws_secret_access_key"]), "s3", region)
    auth._modify_request_before_signing(request)
    signature = auth.signature(auth.string_to_sign(request, auth.canonical_request(request)), request)
    auth._inject_signature_to_request(request, signature)
    return request.headers["Authorization"]


@pytest.mark.parametrize("method,key,body", [
    ("HEAD", "", b""),
    ("PUT", "stackctl-probe/host-1a2b", b"\x00\x01payload" * 64),
    ("GET", "stackctl-probe/a host+name~x", b""),
    ("DELETE", "stackctl-probe/host-1a2b", b""),
])
def test_the_signature_is_botocores(method, key, body):
    host = "stackctl-kv.rgw.stackctl.test:17443"
    ours = signed_headers(method, host, f"/{key}", body, "eu-west-3", KEYS["aws_access_key_id"],
                          KEYS["aws_secret_access_key"], when=1764123456.0)
    assert ours["X-Amz-Date"] == "20251126T021736Z"
    url = f"https://{host}/{quote(key, safe='/~')}"
    assert ours["Authorization"] == botocore_authorization(method, url, body, {}, ours["X-Amz-Date"], "eu-west-3")


class StandIn:
    """A local S3 stand-in on a loopback port: checks every request's signature with botocore (from the headers the
    request says it signed) and answers as S3 does: a bucket it holds, objects put and read back and deleted, 403
    with an XML code for a wrong signature, 404 without a body for a HEAD of a bucket it does not hold."""

    def __init__(self, bucket="stackctl-kv", corrupt=False, hold_writes_s=0.0):
        self.bucket, self.corrupt, self.objects, self.seen = bucket, corrupt, {}, []
        self.hold_writes_s = hold_writes_s  # a PUT answered this late: a Ceph gateway in front of a full cluster
        handler = type("Handler", (_Handler,), {"state": self})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the check's four requests share one connection
    state: StandIn

    def log_message(self, *args):
        pass

    def _answer(self, status: int, body: bytes = b""):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self):
        state = self.state
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        state.seen.append((self.command, self.path, self.client_address[1]))
        given = self.headers["Authorization"]
        signed = given.split("SignedHeaders=")[1].split(",")[0].split(";")
        url = f"http://{self.headers['Host']}{self.path}"
        expected = botocore_authorization(self.command, url, body, {name: self.headers[name] for name in signed},
                                          self.headers["X-Amz-Date"])
        if given != expected or KEYS["aws_access_key_id"] not in given:
            return self._answer(403, b"<Error><Code>SignatureDoesNotMatch</Code></Error>")
        if not self.headers["Host"].startswith(f"{state.bucket}."):
            return self._answer(404, b"" if self.command == "HEAD" else
                                b"<Error><Code>NoSuchBucket</Code></Error>")
        key = self.path.lstrip("/")
        if self.command == "PUT":
            time.sleep(state.hold_writes_s)
            state.objects[key] = body
        elif self.command == "GET":
            return self._answer(200, state.objects[key][::-1] if state.corrupt else state.objects[key])
        elif self.command == "DELETE":
            del state.objects[key]
            return self._answer(204)
        return self._answer(200)

    do_HEAD = do_PUT = do_GET = do_DELETE = _handle


def round_trip(stand_in, bucket="stackctl-kv", keys=KEYS):
    endpoint = s3_access.S3Endpoint(bucket=bucket, host="localhost", port=stand_in.port, tls=False,
                                    region="us-east-1")
    transport = s3_access.Verdict(True, f"{endpoint.virtual_host}:{stand_in.port} answers plain HTTP")
    return s3_access._signed_round_trip(endpoint, keys, transport)


@pytest.fixture
def to_loopback(monkeypatch):
    """BUCKET.localhost reaches the stand-in (a resolver may not know *.localhost)."""
    import socket

    connect = socket.create_connection
    monkeypatch.setattr(socket, "create_connection",
                        lambda address, *args, **kwargs: connect(("127.0.0.1", address[1]), *args, **kwargs))


def test_the_test_object_is_put_read_back_and_deleted_over_one_connection(to_loopback):
    with StandIn() as stand_in:
        verdict = round_trip(stand_in)
    assert verdict.ok, verdict.message
    assert verdict.message.startswith(f"bucket stackctl-kv at localhost:{stand_in.port}: test object put, read back "
                                      "and deleted")
    assert [method for method, _, _ in stand_in.seen] == ["HEAD", "PUT", "GET", "DELETE"]
    assert len({port for _, _, port in stand_in.seen}) == 1 and stand_in.objects == {}


@pytest.mark.parametrize("case,cause", [("missing bucket", "bucket missing"), ("wrong key", "access denied"),
                                        ("corrupt", "content mismatch"), ("down", "endpoint unreachable"),
                                        ("full", "store not answering")])
def test_each_answer_names_its_cause(to_loopback, monkeypatch, case, cause):
    monkeypatch.setattr(s3_access, "TIMEOUT_S", 0.3)
    with StandIn(corrupt=case == "corrupt", hold_writes_s=1.0 if case == "full" else 0.0) as stand_in:
        if case == "down":
            stand_in.httpd.server_close()
        bucket = "stackctl-missing" if case == "missing bucket" else "stackctl-kv"
        keys = {**KEYS, "aws_secret_access_key": "not-the-key"} if case == "wrong key" else KEYS
        verdict = round_trip(stand_in, bucket, keys)
    assert not verdict.ok and verdict.cause == cause and verdict.message.startswith(cause), verdict.message
    if case == "full":  # the step that got no answer, and where to look
        assert "gave no answer to the test's PUT in 0.3 s" in verdict.message and "full or down" in verdict.message


def test_keys_from_the_recipes_variables_take_the_signed_path(monkeypatch):
    """Named keys: the signed requests; no keys named: botocore's default credential chain (its own client)."""
    from types import SimpleNamespace

    tier = SimpleNamespace(url="s3://b.h:1", disable_tls=True, region=None, access_key_env="A", secret_key_env="S",
                           credentials_file=None)
    calls = []
    monkeypatch.setattr(s3_access, "check_transport", lambda endpoint: s3_access.Verdict(True, "ok"))
    monkeypatch.setattr(s3_access, "_signed_round_trip", lambda *args: calls.append("signed") or args[2])
    monkeypatch.setattr(s3_access, "client_of", lambda *args: calls.append("botocore") or (_ for _ in ()).throw(
        RuntimeError("stop")))
    assert s3_access.check_bucket(tier, {"A": "k", "S": "s"}).ok and calls == ["signed"]
    tier.access_key_env = tier.secret_key_env = None
    with pytest.raises(RuntimeError, match="stop"):
        s3_access.check_bucket(tier, {})
    assert calls == ["signed", "botocore"]


class _Tier:
    """The S3 tier fields host.s3-tier reads."""

    def __init__(self, access_key_env=None, secret_key_env=None, credentials_file=None):
        self.access_key_env, self.secret_key_env, self.credentials_file = access_key_env, secret_key_env, credentials_file


def test_credentials_come_from_the_named_variables_or_a_file_else_botocores_chain(tmp_path, monkeypatch):
    assert s3_access.credentials_of(_Tier("A", "S"), {"A": "k"}) == (
        {}, "credentials missing: host variable(s) S not set")
    assert s3_access.credentials_of(_Tier("A", "S"), {"A": "k", "S": "s"}) == (
        {"aws_access_key_id": "k", "aws_secret_access_key": "s"}, "")
    missing = tmp_path / "none"
    assert s3_access.credentials_of(_Tier(credentials_file=str(missing)), {}) == (
        {}, f"credentials missing: {missing} does not exist")
    present = tmp_path / "credentials"
    present.write_text("[default]\n")
    monkeypatch.delenv("AWS_SHARED_CREDENTIALS_FILE", raising=False)
    assert s3_access.credentials_of(_Tier(credentials_file=str(present)), {}) == ({}, "")
    import os

    assert os.environ["AWS_SHARED_CREDENTIALS_FILE"] == str(present)  # botocore's default chain reads it
    assert s3_access.credentials_of(_Tier(), {}) == ({}, "")


@pytest.mark.parametrize("code,status,cause", [
    ("NoSuchBucket", 404, "bucket missing"), ("404", 404, "bucket missing"), ("InvalidAccessKeyId", 403, "access denied"),
    ("SlowDown", 503, "S3 error"),
])
def test_a_botocore_error_is_told_with_its_cause(code, status, cause):
    from botocore.exceptions import ClientError, EndpointConnectionError

    endpoint = s3_access.S3Endpoint(bucket="stackctl-kv", host="rgw.test", port=80, tls=False, region="us-east-1")
    error = ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "HeadBucket")
    verdict = s3_access.error_verdict(error, endpoint)
    assert not verdict.ok and verdict.cause == cause and "bucket stackctl-kv at rgw.test:80" in verdict.message
    down = s3_access.error_verdict(EndpointConnectionError(endpoint_url="http://rgw.test"), endpoint)
    assert not down.ok and down.cause == "endpoint unreachable"
