#!/usr/bin/env bash
# A throwaway PostgreSQL server on loopback, for the distributed-sweep tests and CI.
#
#   scripts/postgres.sh install          install the Debian `postgresql` package if its binaries are missing
#   scripts/postgres.sh start DIR [PORT] initdb a cluster in DIR (created), start it on 127.0.0.1:PORT
#                                        (default: a free port), create database `dse`, print its URL
#   scripts/postgres.sh stop DIR         stop the cluster in DIR (the directory is left for the caller)
#   scripts/postgres.sh resume DIR       start the stopped cluster in DIR again on its port, print its URL
#
# As root, the server runs as the `postgres` system user (PostgreSQL refuses to run as root); DIR is
# handed to that user. Authentication is `trust` on loopback only: never use this for real data.
set -euo pipefail

pg_bin() {
  # The versioned directory of the Debian package holds every tool (initdb, pg_ctl, createdb).
  local found
  found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  if [ -n "$found" ] && [ -x "$found/initdb" ] && [ -x "$found/createdb" ]; then
    echo "$found"
    return 0
  fi
  if command -v initdb >/dev/null 2>&1; then
    found=$(dirname "$(readlink -f "$(command -v initdb)")")
    if [ -x "$found/pg_ctl" ] && [ -x "$found/createdb" ]; then
      echo "$found"
      return 0
    fi
  fi
  return 1
}

as_db_user() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

cmd=${1:-install}
case "$cmd" in
  install)
    if pg_bin >/dev/null; then
      echo "postgresql binaries present in $(pg_bin)"
      exit 0
    fi
    if [ "$(id -u)" != 0 ]; then
      echo "postgresql is not installed and this is not root: run 'sudo apt-get install -y postgresql'" >&2
      exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q postgresql
    echo "postgresql installed in $(pg_bin)"
    ;;
  start)
    dir=${2:?usage: postgres.sh start DIR [PORT]}
    port=${3:-$(free_port)}
    bin=$(pg_bin) || { echo "postgresql binaries not found: run scripts/postgres.sh install" >&2; exit 1; }
    mkdir -p "$dir"
    if [ "$(id -u)" = 0 ]; then
      id postgres >/dev/null 2>&1 || { echo "no 'postgres' system user to run the server as" >&2; exit 1; }
      chown postgres "$dir"
      chmod 700 "$dir"
      runuser -u postgres -- test -w "$dir" || {
        echo "the postgres user cannot reach $dir: every parent directory must be searchable (chmod o+x)" >&2
        exit 1
      }
    fi
    as_db_user "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
    as_db_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=100 -c fsync=off" start \
      >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    as_db_user "$bin/createdb" -h 127.0.0.1 -p "$port" -U postgres dse
    echo "$port" >"$dir/port"
    echo "postgresql://postgres@127.0.0.1:$port/dse"
    ;;
  resume)
    dir=${2:?usage: postgres.sh resume DIR}
    bin=$(pg_bin) || { echo "postgresql binaries not found: run scripts/postgres.sh install" >&2; exit 1; }
    port=$(cat "$dir/port")
    as_db_user "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c max_connections=100 -c fsync=off" start \
      >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgresql://postgres@127.0.0.1:$port/dse"
    ;;
  stop)
    dir=${2:?usage: postgres.sh stop DIR}
    bin=$(pg_bin) || exit 0
    if [ -f "$dir/data/postmaster.pid" ]; then
      as_db_user "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    fi
    ;;
  *)
    echo "usage: scripts/postgres.sh install | start DIR [PORT] | stop DIR | resume DIR" >&2
    exit 2
    ;;
esac
