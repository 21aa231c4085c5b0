# Shared helpers for the rsiw build and test scripts.  Source it; do not run it.
# shellcheck shell=bash

set -euo pipefail

RSIW_TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=tests/versions.env
. "$RSIW_TOP/tests/versions.env"

# One cache directory for everything built outside the repository (build root, kernel
# trees, downloaded packages).  Override with RSIW_CACHE.
RSIW_CACHE=${RSIW_CACHE:-/var/cache/rsiw}
mkdir -p "$RSIW_CACHE"

_rsiw_t0=${_rsiw_t0:-$(date +%s)}
export _rsiw_t0

# log MSG...: one progress line with the elapsed time since the first script started.
log() {
	local now
	now=$(date +%s)
	printf '[rsiw %4ds] %s\n' "$((now - _rsiw_t0))" "$*" >&2
}

die() {
	log "ERROR: $*"
	exit 1
}

# hash_of FILE...: short stable hash over the contents of the given files and strings.
hash_of() {
	local f
	for f in "$@"; do
		if [ -f "$f" ]; then
			cat "$f"
		else
			printf '%s\n' "$f"
		fi
	done | sha256sum | cut -c1-12
}

# run_logged LOGFILE CMD...: run a long command with its output in LOGFILE, printing a
# heartbeat line every 60 s and the log's tail on failure.
run_logged() {
	local logfile=$1 pid rc=0 start
	shift
	start=$(date +%s)
	("$@") >"$logfile" 2>&1 &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		local i
		for i in $(seq 60); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "  ... still running ($(( $(date +%s) - start ))s): $(tail -n 1 "$logfile" | cut -c1-100)"
		fi
	done
	wait "$pid" || rc=$?
	if [ "$rc" -ne 0 ]; then
		log "command failed (exit $rc): $*"
		tail -n 40 "$logfile" >&2
		log "full log: $logfile"
	fi
	return "$rc"
}

# The build root: a Debian trixie tree holding the toolchain and the guest user space.
root_key() {
	hash_of "$RSIW_TOP/tests/versions.env" "$RSIW_TOP/tests/root.sh" "$RSIW_TOP/tests/root-packages.txt"
}
root_dir() {
	echo "$RSIW_CACHE/root-$(root_key)"
}

# in_root ROOT CMD...: run CMD inside the build root in a private mount namespace, with
# /proc, /sys, /dev, the repository and the cache directory mounted at their host paths.
# Mounts vanish with the namespace, so nothing leaks onto the host.
in_root() {
	local root=$1
	shift
	unshare --mount --propagation private -- /bin/bash -c '
		set -e
		root=$1 top=$2 cache=$3
		shift 3
		mount -t proc proc "$root/proc"
		mount --rbind /sys "$root/sys"
		mount --rbind /dev "$root/dev"
		mount -t tmpfs tmpfs "$root/tmp"
		mount -t tmpfs tmpfs "$root/run"
		# After the tmpfs mounts: a checkout under /tmp or /run needs its mount point there.
		mkdir -p "$root$top" "$root$cache"
		mount --bind "$top" "$root$top"
		mount --bind "$cache" "$root$cache"
		cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
		exec chroot "$root" /usr/bin/env -i HOME=/root TERM="${TERM:-dumb}" \
			PATH=/opt/vng/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			LANG=C.UTF-8 RSIW_CACHE="$cache" _rsiw_t0="$_rsiw_t0" "$@"
	' rsiw-in-root "$root" "$RSIW_TOP" "$RSIW_CACHE" "$@"
}

# cache_lock / cache_unlock: one builder at a time per cache.  kernel.sh replaces a
# flavour's tree when its key changes, so an unserialised build from another checkout could
# delete a tree that is being built or booted.  Children of a holder skip the lock.
cache_lock() {
	[ -n "${RSIW_CACHE_LOCKED:-}" ] && return 0
	exec 9>"$RSIW_CACHE/.build.lock"
	if ! flock -n 9; then
		log "waiting for another build using $RSIW_CACHE"
		flock 9
	fi
	export RSIW_CACHE_LOCKED=1
}
cache_unlock() {
	[ "${RSIW_CACHE_LOCKED:-}" = 1 ] || return 0
	exec 9>&-
	unset RSIW_CACHE_LOCKED
}
