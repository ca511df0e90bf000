"""Where things live inside a stack's image and container: the paths and variable names the bundle's files, the
container's arguments and doctor's probes agree on. Constants only; nothing here reads a recipe."""

# Where things live inside the image / container.
APP_DIR = "/opt/stackctl"
RUN_DIR = f"{APP_DIR}/run"            # the bundle's runtime files, mounted read-only at `up`
PROBES_DIR = f"{APP_DIR}/probes"      # probes/*.py copied into the image
LMCACHE_CONFIG_PATH = f"{RUN_DIR}/lmcache.yaml"
# The S3 tier's private CA (the tier's ca_file), mounted read-only. LMCache's S3 client (awscrt) trusts the system
# bundle or SSL_CERT_FILE only, so serve.sh (and the doctor's tier check) join this CA to the image's own bundle and
# point SSL_CERT_FILE at the result.
S3_CA_PATH = "/run/stackctl/s3-ca.pem"
# The S3 tier's credentials_file, mounted read-only; AWS_SHARED_CREDENTIALS_FILE points the S3 client at it.
S3_CREDENTIALS_PATH = "/run/secrets/aws-credentials"
S3_CA_ENV = "STACKCTL_S3_CA"
S3_CA_BUNDLE = "/tmp/stackctl-ca-bundle.pem"  # in the container; probes/tiers/roundtrip.py names it too
VENV = "/opt/venv"                    # the CPU image's Python environment

# stackctl's LMCache connector for vLLM-CPU (connector/stackctl_lmcache_cpu): shipped in every cpu image with
# LMCache, switched on in the server's environment by this variable (its import hook reads it).
CPU_CONNECTOR_ENV = "STACKCTL_LMCACHE_CPU_CONNECTOR"
CPU_CONNECTOR_PACKAGE = "stackctl_lmcache_cpu"


# lmcache-mp: where the LMCache server listens in the container (host networking: also on the host), and its log.
LMCACHE_SERVER_HOST = "127.0.0.1"
