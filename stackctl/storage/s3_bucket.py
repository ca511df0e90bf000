"""A tier kept in an S3 bucket (s3: tier.url), reached by LMCache inside the container and by doctor and fleet doctor
from the host through s3_access.py. The recipe's credentials file and CA are mounted read-only and named in the
environment; its key references are passed at run time only."""

from __future__ import annotations

from stackctl.layout import S3_CA_ENV, S3_CA_PATH, S3_CREDENTIALS_PATH
from stackctl.storage.base import Absent, Storage, StoreError, url_place

MARKER_PREFIX = "stackctl-marker/"  # fleet doctor's marker object's key prefix in the bucket
PLAIN_HTTP_PORT = ":7480"  # Ceph RGW's default frontend, which speaks plain HTTP


def bucket_verdict(ctx, tier):
    """check_bucket's verdict on an S3 tier, asked once per doctor run: host.s3-tier and image.tiers share it (each
    ask puts, reads back and deletes a test object in the user's bucket)."""
    from stackctl.storage.s3_access import check_bucket

    return ctx.remember(f"s3-bucket:{tier.url}", lambda: check_bucket(tier))


class BucketMarker:
    """Fleet doctor's marker as an object in the tier's bucket, through the tier's own endpoint, TLS, CA and
    credentials (s3_access.py)."""

    not_there = "the marker object {writer} put there is not in the bucket this host reaches"

    def __init__(self, tier, marker_id: str):
        from stackctl.storage import s3_access

        self.client, self.endpoint, self.credentials_problem = s3_access.client_of(tier)
        self.key = f"{MARKER_PREFIX}{marker_id}"

    def put(self, content: str) -> None:
        self._do("put_object", Body=content.encode())

    def get(self) -> str:
        return self._do("get_object")["Body"].read().decode(errors="replace")

    def delete(self) -> None:
        self._do("delete_object")

    def _do(self, operation: str, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError

        from stackctl.storage.s3_access import error_verdict

        if self.credentials_problem:
            raise StoreError(self.credentials_problem)
        try:
            return getattr(self.client, operation)(Bucket=self.endpoint.bucket, Key=self.key, **kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404"):
                raise Absent() from None
            raise StoreError(error_verdict(exc, self.endpoint).message) from None
        except BotoCoreError as exc:
            raise StoreError(error_verdict(exc, self.endpoint).message) from None


class S3Bucket(Storage):
    name = "s3-bucket"
    key_env = {"access_key_env": "AWS_ACCESS_KEY_ID", "secret_key_env": "AWS_SECRET_ACCESS_KEY"}
    mounted_files = {"credentials_file": S3_CREDENTIALS_PATH, "ca_file": S3_CA_PATH}
    marker_store_class = BucketMarker

    def environment(self, tier) -> dict[str, str]:
        env = {}
        if tier.credentials_file:
            env["AWS_SHARED_CREDENTIALS_FILE"] = S3_CREDENTIALS_PATH
        if tier.ca_file:
            env[S3_CA_ENV] = S3_CA_PATH
        return env

    def host_problem(self, ctx, tier, want_bytes: int) -> str:
        verdict = bucket_verdict(ctx, tier)
        return "" if verdict.ok else verdict.message

    def seen_and_removed(self, tier, report: dict, model: str) -> str:
        from stackctl.storage.s3_access import delete_keys, endpoint_of, list_keys

        try:
            keys = list_keys(tier, model)
            delete_keys(tier, keys)
            left = list_keys(tier, model)
        except Exception as exc:  # listing is evidence, not the verdict
            return f"objects not listed ({type(exc).__name__}: {exc})"
        return f"{len(keys)} object(s) seen in bucket {endpoint_of(tier).bucket}, removed" + (
            f" ({len(left)} left)" if left else "")

    def failure_cause(self, tier, report: dict, chunk_bytes: int, log: str, facts: str) -> str:
        from stackctl.storage.s3_access import check_bucket

        verdict = check_bucket(tier)
        return "" if verdict.ok else f"{verdict.message} ({facts})"

    def place(self, tier) -> str:
        return url_place(tier)

    def group_key(self, tier) -> str:
        from stackctl.storage.s3_access import endpoint_of

        endpoint = endpoint_of(tier)
        return f"{tier.kind} {endpoint.bucket} {endpoint.host.lower()}:{endpoint.port}"

    def label(self, tier) -> str:
        from stackctl.storage.s3_access import endpoint_of, where_of

        return f"{tier.kind} tier {where_of(endpoint_of(tier))}"

    def credentials_unset(self, tier) -> bool:
        return not tier.credentials_file and not (tier.access_key_env and tier.secret_key_env)

    def tls_on_plain_port(self, tier) -> bool:
        return bool(tier.url) and not tier.disable_tls and tier.url.rstrip("/").endswith(PLAIN_HTTP_PORT)


S3_BUCKET = S3Bucket()
