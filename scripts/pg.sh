#!/usr/bin/env bash
# A private PostgreSQL cluster in a data directory of the checkout, on a Unix
# socket only (no TCP port to collide with).
#   scripts/pg.sh start DIR   init if needed, start, print the database URL
#   scripts/pg.sh stop DIR    stop (fast) if running
#   scripts/pg.sh url DIR     print the database URL
# initdb and pg_ctl refuse to run as root, so as root they run as postgres.
set -euo pipefail

cmd=${1:?start, stop or url}
dir=$(mkdir -p "${2:?data directory}" && cd "$2" && pwd)
bindir=$(pg_config --bindir 2>/dev/null || ls -d /usr/lib/postgresql/*/bin | tail -1)
[ -x "$bindir/initdb" ] || bindir=$(ls -d /usr/lib/postgresql/*/bin | tail -1)

as_owner=()
owner=$(id -un)
if [ "$(id -u)" -eq 0 ]; then
  as_owner=(runuser -u postgres --)
  owner=postgres
fi

url() {
  echo "postgresql:///postgres?host=$dir&user=$owner"
}

case "$cmd" in
  start)
    if [ ! -f "$dir/PG_VERSION" ]; then
      [ "$(id -u)" -eq 0 ] && chown postgres "$dir"
      "${as_owner[@]}" "$bindir/initdb" -D "$dir" -A trust -U "$owner" \
        --no-sync >"$dir/../$(basename "$dir").initdb.log" 2>&1
      cat >>"$dir/postgresql.conf" <<CONF
listen_addresses = ''
unix_socket_directories = '$dir'
fsync = off
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = all
CONF
    fi
    if ! "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
      "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir" -l "$dir/server.log" -w \
        -t 30 start >/dev/null
    fi
    url
    ;;
  stop)
    if "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir" status >/dev/null 2>&1; then
      "${as_owner[@]}" "$bindir/pg_ctl" -D "$dir" -m fast -w stop >/dev/null
    fi
    ;;
  url) url ;;
  *) echo "unknown command $cmd" >&2; exit 2 ;;
esac
