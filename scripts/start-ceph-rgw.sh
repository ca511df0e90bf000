#!/usr/bin/env bash
# A single-node Ceph cluster serving S3 through the RADOS Gateway, all on 127.0.0.1, for stackctl's S3 tier tests
# and the smoke stack: one monitor, one OSD keeping its objects in RAM (memstore), and radosgw speaking plain HTTP
# and TLS (a CA and certificate made here). Daemons run in the foreground of background jobs and are stopped by PID.
#
#   scripts/start-ceph-rgw.sh start   # idempotent: does nothing when the gateway already answers
#   scripts/start-ceph-rgw.sh stop    # stops the daemons by PID and removes the cluster's directory
#   scripts/start-ceph-rgw.sh status  # whether it runs, where, how to stop it; exit 0 when the gateway answers
#
# After `start`, $STACKCTL_CEPH_DIR/s3.env holds what clients need (endpoints, CA file, test credentials).
# A second, separate cluster (another S3 store under the same names, e.g. for a host whose /etc/hosts points the
# names elsewhere) runs beside the first with its own STACKCTL_CEPH_DIR, STACKCTL_CEPH_ADDR (another loopback
# address, e.g. 127.0.0.2: then /etc/hosts is left alone) and STACKCTL_CEPH_MON_PORT.
# Needs Debian's radosgw, ceph-mon and ceph-osd (scripts/setup.sh installs them), openssl and curl.
set -euo pipefail

DIR=${STACKCTL_CEPH_DIR:-/tmp/stackctl-ceph}
ADDR=${STACKCTL_CEPH_ADDR:-127.0.0.1}
MON_PORT=${STACKCTL_CEPH_MON_PORT:-16789}
HTTP_PORT=${STACKCTL_RGW_HTTP_PORT:-17480}
HTTPS_PORT=${STACKCTL_RGW_HTTPS_PORT:-17443}
DNS_NAME=rgw.stackctl.test
BUCKET=stackctl-kv
# Fixed test credentials of a throwaway cluster (RAM only, bound to 127.0.0.1).
ACCESS_KEY=STACKCTLTESTACCESS01
SECRET_KEY=stackctl-test-secret-0123456789abcdefghij
# LMCache's S3 client addresses buckets as BUCKET.HOST (virtual-hosted style), so those names must resolve.
HOSTS_LINE="127.0.0.1 $DNS_NAME $BUCKET.$DNS_NAME stackctl-missing.$DNS_NAME # stackctl test S3 (start-ceph-rgw.sh)"

CONF=$DIR/ceph.conf
ceph_cli() { timeout 30 ceph -c "$CONF" "$@"; }

answers() { curl -s -o /dev/null --max-time 2 "http://$ADDR:$HTTP_PORT/"; }

alive() { [ -f "$DIR/$1.pid" ] && kill -0 "$(cat "$DIR/$1.pid")" 2>/dev/null; }

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
    local deadline=$((SECONDS + $1)) what=$2
    shift 2
    until "$@" >/dev/null 2>&1; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "start-ceph-rgw: timed out waiting for $what (logs: $DIR/log)" >&2
            return 1
        fi
        sleep 0.5
    done
}

daemon() {  # daemon NAME COMMAND...: run in the foreground of a background job, PID in $DIR/NAME.pid
    local name=$1
    shift
    setsid "$@" >"$DIR/log/$name.out" 2>&1 < /dev/null &
    echo $! > "$DIR/$name.pid"
}

stop() {
    local name pid
    for name in rgw osd mon; do
        [ -f "$DIR/$name.pid" ] || continue
        pid=$(cat "$DIR/$name.pid")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$DIR/$name.pid"
    done
    rm -rf "$DIR"
}

write_conf() {
    local fsid=$1
    cat > "$CONF" <<EOF
[global]
fsid = $fsid
mon_host = v1:$ADDR:$MON_PORT
ms_bind_msgr2 = false
ms_bind_ipv6 = false
public_addr = $ADDR
cluster_addr = $ADDR
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
keyring = $DIR/\$name.keyring
run_dir = $DIR/run
admin_socket = $DIR/run/\$name.asok
log_file = $DIR/log/\$name.log
# One OSD: pools of size one, placement on a single host, few placement groups.
osd_pool_default_size = 1
osd_pool_default_min_size = 1
mon_allow_pool_size_one = true
osd_crush_chooseleaf_type = 0
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
mon_warn_on_pool_no_redundancy = false

[mon]
mon_data = $DIR/mon/\$id
# The monitor's store is a few MB and the objects live in RAM, so a nearly full host disk is no reason to refuse to
# start: Ceph's default stops a monitor under 5% free (15 GB free of a 252 GB disk stopped this one).
mon_data_avail_crit = 1
mon_data_avail_warn = 2

[osd]
osd_data = $DIR/osd/\$id
osd_objectstore = memstore
# 3 GiB of RAM at most, taken as objects arrive: a CI run's LMCache stacks put about 1 GB of KV chunks in the
# bucket, and a full OSD does not refuse writes, it stalls them (RGW then times out every request).
memstore_device_bytes = 3221225472

[client.rgw.gw]
rgw_frontends = beast endpoint=$ADDR:$HTTP_PORT ssl_endpoint=$ADDR:$HTTPS_PORT ssl_certificate=$DIR/tls/server.pem ssl_private_key=$DIR/tls/server.key
rgw_dns_name = $DNS_NAME
rgw_data = $DIR/rgw
EOF
}

make_tls() {  # a CA and a server certificate for the gateway's names (bucket subdomains included)
    local tls=$DIR/tls
    mkdir -p "$tls"
    openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=stackctl test CA" \
        -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$DNS_NAME" -keyout "$tls/server.key" -out "$tls/server.csr" 2>/dev/null
    printf 'subjectAltName=DNS:%s,DNS:*.%s,DNS:localhost,IP:%s\n' "$DNS_NAME" "$DNS_NAME" "$ADDR" > "$tls/san.ext"
    openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial -days 30 \
        -extfile "$tls/san.ext" -out "$tls/server.pem" 2>/dev/null
}

# A full OSD (the RAM store holds every KV chunk the LMCache stacks ever put: LMCache never deletes from S3) still
# answers HTTP but stalls every write; such a store (full, or nearly) is started afresh, empty, like a broken one.
full() { ceph_cli health 2>/dev/null | grep -qi 'full'; }

start() {
    if alive rgw && answers; then
        if ! full; then
            echo "start-ceph-rgw: already running (http $ADDR:$HTTP_PORT, https $ADDR:$HTTPS_PORT)"
            return 0
        fi
        echo "start-ceph-rgw: the store is full ($(ceph_cli health 2>/dev/null | head -c 200)); starting it afresh, empty"
    fi
    stop  # leftovers of an earlier, broken start
    local started=$SECONDS fsid osd_uuid osd_id
    mkdir -p "$DIR"/{run,log,mon,osd,rgw}
    if [ "$ADDR" = 127.0.0.1 ]; then
        grep -qF "$HOSTS_LINE" /etc/hosts || echo "$HOSTS_LINE" >> /etc/hosts
    fi
    fsid=$(cat /proc/sys/kernel/random/uuid)
    write_conf "$fsid"
    make_tls

    # Monitor: keyrings for mon. and client.admin, a monmap with one monitor, then the store.
    ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
    ceph-authtool --create-keyring "$DIR/client.admin.keyring" --gen-key -n client.admin \
        --cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
    ceph-authtool "$DIR/mon.keyring" --import-keyring "$DIR/client.admin.keyring" >/dev/null
    monmaptool --create --addv a "[v1:$ADDR:$MON_PORT]" --fsid "$fsid" "$DIR/monmap" >/dev/null
    ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/mon.keyring"
    daemon mon ceph-mon -c "$CONF" -f -i a
    wait_for 30 "the monitor" ceph_cli -s

    # One OSD in RAM.
    osd_uuid=$(cat /proc/sys/kernel/random/uuid)
    osd_id=$(ceph_cli osd new "$osd_uuid")
    mkdir -p "$DIR/osd/$osd_id"
    ceph-authtool --create-keyring "$DIR/osd.$osd_id.keyring" --gen-key -n "osd.$osd_id" >/dev/null
    ceph_cli auth add "osd.$osd_id" osd 'allow *' mon 'allow profile osd' -i "$DIR/osd.$osd_id.keyring" >/dev/null 2>&1
    ceph-osd -c "$CONF" -i "$osd_id" --mkfs --no-mon-config --osd-uuid "$osd_uuid" >"$DIR/log/osd-mkfs.out" 2>&1
    daemon osd ceph-osd -c "$CONF" -f -i "$osd_id"
    wait_for 60 "the OSD" bash -c "ceph -c '$CONF' osd stat 2>/dev/null | grep -q '1 up'"

    # The gateway, a user with the fixed keys, and the bucket (through the S3 API, as clients will use it).
    ceph_cli auth get-or-create client.rgw.gw mon 'allow rw' osd 'allow rwx' -o "$DIR/client.rgw.gw.keyring"
    daemon rgw radosgw -c "$CONF" -f -n client.rgw.gw
    wait_for 90 "the gateway" answers
    timeout 60 radosgw-admin -c "$CONF" user create --uid stackctl --display-name stackctl \
        --access-key "$ACCESS_KEY" --secret-key "$SECRET_KEY" >/dev/null
    # curl signs with SigV4; RGW wants the payload hash header (here: of the empty body).
    wait_for 30 "bucket $BUCKET" curl -sf --max-time 5 -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" \
        -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
        --user "$ACCESS_KEY:$SECRET_KEY" "http://$ADDR:$HTTP_PORT/$BUCKET"

    cat > "$DIR/s3.env" <<EOF
STACKCTL_S3_HOST=$DNS_NAME
STACKCTL_S3_ADDR=$ADDR
STACKCTL_S3_HTTP_PORT=$HTTP_PORT
STACKCTL_S3_HTTPS_PORT=$HTTPS_PORT
STACKCTL_S3_BUCKET=$BUCKET
STACKCTL_S3_CA_FILE=$DIR/tls/ca.pem
STACKCTL_S3_ACCESS_KEY=$ACCESS_KEY
STACKCTL_S3_SECRET_KEY=$SECRET_KEY
EOF
    echo "start-ceph-rgw: Ceph RGW up in $((SECONDS - started)) s (http $ADDR:$HTTP_PORT, https $ADDR:$HTTPS_PORT, $DIR/s3.env)"
}

this_cluster() {  # the command that names this cluster again: its non-default settings, then the script
    local prefix=""
    [ "$DIR" = /tmp/stackctl-ceph ] || prefix+="STACKCTL_CEPH_DIR=$DIR "
    [ "$ADDR" = 127.0.0.1 ] || prefix+="STACKCTL_CEPH_ADDR=$ADDR "
    printf '%sbash %s' "$prefix" "$0"
}

status() {
    if alive rgw && answers; then
        echo "Ceph RGW: running (radosgw pid $(cat "$DIR/rgw.pid"); objects in RAM, cluster files in $DIR)"
        echo "  S3: http://$ADDR:$HTTP_PORT and https://$ADDR:$HTTPS_PORT (CA $DIR/tls/ca.pem), bucket $BUCKET"
        echo "  clients' settings: $DIR/s3.env"
        echo "  stop: $(this_cluster) stop"
        return 0
    fi
    local left=()
    for name in mon osd rgw; do alive "$name" && left+=("$name"); done
    if [ "${#left[@]}" -gt 0 ]; then
        echo "Ceph RGW: not answering on http://$ADDR:$HTTP_PORT, but ${left[*]} still run (logs: $DIR/log)"
        echo "  clean up: $(this_cluster) stop; then start again: $(this_cluster) start"
    else
        echo "Ceph RGW: not running (start: $(this_cluster) start)"
    fi
    return 1
}

case "${1:-start}" in
    start) start ;;
    stop) stop; echo "Ceph RGW: stopped ($DIR removed)" ;;
    status) status ;;
    *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
