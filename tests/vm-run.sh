#!/usr/bin/env bash
# Boot a kernel flavour with virtme-ng and run a command in the guest as root.
#
#   tests/vm-run.sh [--kernel debug|stock] [--timeout SECONDS] [--cpus N] [--icount] -- CMD...
#
# The guest's root filesystem is the build root (read-only, with overlays); the
# repository is mounted read-write at its host path and is the working directory.  The
# guest sees RSIW_KO (the rsiw.ko built for this kernel), RSIW_SIW_KO (the C siw for the
# stock kernel; the debug kernel has siw as a regular module), RSIW_SMBD_DIR (stock only:
# smbdirect.ko, ksmbd.ko and cifs.ko with SMB Direct, tests/smbdirect.sh), RSIW_KERNEL and
# RSIW_RUN_DIR (a scratch directory shared with the host).
#
# Prints the command's output; exits with its status.  A boot failure, a guest panic or a
# timeout exits non-zero and shows the tail of the guest console.  A guest that is still
# running 45 s before the timeout gets an NMI through the QEMU monitor: it panics
# (unknown_nmi_panic) and prints every CPU's backtrace, memory and blocked tasks to the
# console, so that a hang shows where the guest was stuck.
#
# KVM is used only if a real probe boots this kernel under KVM (this kind of machine
# exposes /dev/kvm but cannot run stock kernels with it); RSIW_KVM=0|1 overrides.
#
# --cpus sets the guest's vCPUs (default 2). --icount runs TCG with
# `-icount shift=0,sleep=off`: the guest's clocks (TSC included) advance by one nanosecond
# per guest instruction executed, so that timings in the guest count instructions and do
# not depend on the host's load (`make bench`). It implies TCG and runs every vCPU on one
# host thread, in turn.
#
# RSIW_CONSOLE_KEEP=FILE keeps the guest's whole console (kernel messages included) in FILE
# whatever the outcome; otherwise only a failed guest's is kept, in build/vm-FLAVOUR-console.log.
. "$(dirname "$0")/lib.sh"

flavour=${KERNEL:-debug}
timeout_s=${RSIW_VM_TIMEOUT:-1800}
cpus=2
icount=0
while [ $# -gt 0 ]; do
	case "$1" in
	--kernel) flavour=$2; shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--cpus) cpus=$2; shift 2 ;;
	--icount) icount=1; shift ;;
	--) shift; break ;;
	*) break ;;
	esac
done
[ $# -gt 0 ] || die "usage: tests/vm-run.sh [--kernel debug|stock] [--timeout S] -- CMD..."

cache_lock
root=$("$RSIW_TOP/tests/root.sh")
# shellcheck disable=SC1091
. "$root/rsiw-versions.env"
tree=$("$RSIW_TOP/tests/kernel.sh" "$flavour")
ko=$("$RSIW_TOP/tests/build-module.sh" "$flavour")
smbd_dir=
[ "$flavour" = stock ] && smbd_dir=$("$RSIW_TOP/tests/smbdirect.sh")
cache_unlock

case "$flavour" in
debug)
	kernel="$tree/arch/x86/boot/bzImage"
	run_arg="$tree"
	siw_ko=
	;;
stock)
	kernel="/boot/vmlinuz-$LINUX_ABI"
	run_arg="$kernel"
	siw_ko="$tree/rsiw-siw/siw.ko"
	;;
esac

# --- accelerator: a real probe, cached per kernel and host ---
kvm_ok() {
	[ -e /dev/kvm ] || return 1
	local key cache out
	key=$(hash_of probe-in-root "$(uname -r)" "$kernel" \
		"$(stat -c %Y "$root$kernel" 2>/dev/null || stat -c %Y "$kernel")")
	cache="$RSIW_CACHE/kvm-probe-$key"
	if [ ! -f "$cache" ]; then
		log "probing KVM: booting the kernel under -accel kvm for up to 40 s"
		# `timeout` inside the root: in_root is a shell function, which `timeout` cannot run.
		out=$(in_root "$root" timeout 40 qemu-system-x86_64 -accel kvm -cpu host -M q35 -m 256 \
			-nographic -no-reboot -kernel "$kernel" \
			-append "console=ttyS0 panic=-1 init=/nonexistent" 2>&1 | tr -d '\r' | tail -n 200) || true
		if printf '%s' "$out" | grep -q 'No working init found\|Run /nonexistent\|Kernel panic - not syncing: VFS\|Requested init /nonexistent failed'; then
			echo yes >"$cache"
		else
			echo no >"$cache"
			printf '%s\n' "$out" | grep -m3 -i 'msr\|kvm\|emulation\|error' | sed 's/^/    kvm probe: /' >&2 || true
		fi
	fi
	[ "$(cat "$cache")" = yes ]
}
accel=(--disable-kvm)
case "${RSIW_KVM:-auto}" in
1) accel=() ;;
0) ;;
*) if [ "$icount" = 0 ] && kvm_ok; then accel=(); fi ;;
esac
icount_opts=
if [ "$icount" = 1 ]; then
	[ ${#accel[@]} -gt 0 ] || die "--icount needs TCG (RSIW_KVM=1 asks for KVM)"
	icount_opts=" -icount shift=0,sleep=off"
	log "vm ($flavour): TCG with -icount shift=0,sleep=off (clocks count guest instructions), $cpus vCPU(s)"
elif [ ${#accel[@]} -eq 0 ]; then
	log "vm ($flavour): KVM"
else
	log "vm ($flavour): TCG (software emulation; KVM unusable or disabled here)"
fi

# --- the run directory, shared with the guest ---
run=$(mktemp -d "$RSIW_CACHE/run.XXXXXX")
trap 'rm -rf "$run"' EXIT
# The command's output lines carry a "@@ " prefix on the console so that the host can tell
# them from kernel messages (which also reach the console with --verbose).
{
	echo "#!/bin/bash"
	printf 'export RSIW_KO=%q RSIW_SIW_KO=%q RSIW_SMBD_DIR=%q RSIW_KERNEL=%q RSIW_RUN_DIR=%q\n' \
		"$ko" "$siw_ko" "$smbd_dir" "$flavour" "$run"
	printf 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n'
	printf 'export PYTHONUNBUFFERED=1\n'
	printf 'cd %q || exit 97\n' "$RSIW_TOP"
	printf '{ '
	printf '%q ' "$@"
	printf '; } 2>&1 | sed -u "s/^/@@ /"\n'
	echo 'rc=${PIPESTATUS[0]}'
	printf 'echo "$rc" > %q\n' "$run/status"
	echo 'exit $rc'
} >"$run/cmd.sh"
chmod +x "$run/cmd.sh"

# The hang watchdog (see the header): the monitor socket is in the run directory, which
# the chroot sees at the same path.
monitor="$run/monitor.sock"
watchdog=
start_watchdog() {
	[ "$timeout_s" -gt 90 ] && command -v python3 >/dev/null || return 0
	(
		# Killed (TERM, from stop_watchdog or the EXIT trap), the subshell takes its sleep
		# along: a sleep left behind would hold the caller's pipes open for the whole timeout.
		sleep $((timeout_s - 45)) </dev/null >/dev/null 2>&1 &
		sleeper=$!
		trap 'kill "$sleeper" 2>/dev/null; exit 0' TERM
		wait "$sleeper"
		[ -S "$monitor" ] || exit 0
		log "vm ($flavour): still running 45 s before the timeout: NMI to the guest"
		python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); time.sleep(0.5)
s.sendall(b"nmi\n"); time.sleep(0.5)' "$monitor" || true
	) &
	watchdog=$!
}
stop_watchdog() {
	[ -z "$watchdog" ] || kill "$watchdog" 2>/dev/null || true
	watchdog=
}
trap 'stop_watchdog; rm -rf "$run"' EXIT

# boot_once: one boot running cmd.sh; leaves $run/console.log, $run/vng.status (QEMU's
# exit, via vng and timeout) and, if the command ended, $run/status.
boot_once() {
	rm -f "$run/console.log" "$run/vng.status" "$run/status" "$run/timeout.pid" "$monitor"
	start_watchdog
	set +e +o pipefail
	# The console log holds everything; stdout shows only the command's output, both line
	# by line as the guest prints (tr's output is line-buffered: into a pipe it would come
	# in 4 KiB blocks, long after a quiet guest printed it). The pipeline runs in the
	# background: bash would hold a TERM or INT to this script until a foreground pipeline
	# ended, and QEMU would outlive the script. `timeout` passes the signal on to its
	# process group, QEMU included.
	{
		timeout -k 15 "$timeout_s" unshare --mount --propagation private -- /bin/bash -c '
		set -e
		root=$1 top=$2 cache=$3
		shift 3
		mount -t proc proc "$root/proc"
		mount --rbind /sys "$root/sys"
		mount --rbind /dev "$root/dev"
		mount -t tmpfs tmpfs "$root/tmp"
		mount -t tmpfs tmpfs "$root/run"
		mkdir -p "$root$top" "$root$cache"
		mount --bind "$top" "$root$top"
		mount --bind "$cache" "$root$cache"
		exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
			PATH=/opt/vng/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$@"
	' rsiw-vm "$root" "$RSIW_TOP" "$RSIW_CACHE" \
		vng --run "$run_arg" "${accel[@]}" --verbose --memory 2G --cpus "$cpus" --user root \
		--rwdir "$RSIW_TOP" --rwdir "$RSIW_CACHE" --cwd "$RSIW_TOP" \
		--append "panic_on_warn=0 panic=-1 oops=panic no5lvl unknown_nmi_panic panic_sys_info=all_bt,mem,blocked_tasks" \
		--qemu-opts="-monitor unix:$monitor,server,nowait$icount_opts" \
		--exec "$run/cmd.sh" </dev/null 2>&1 &
		echo $! >"$run/timeout.pid"
		wait $!
		echo $? >"$run/vng.status"
	} | stdbuf -oL tr -d '\r' | tee "$run/console.log" | sed -un 's/^.*@@ //p' &
	pipeline=$!
	trap 'kill -TERM "$(cat "$run/timeout.pid" 2>/dev/null)" 2>/dev/null; wait "$pipeline"; exit 143' \
		INT TERM
	wait "$pipeline"
	trap - INT TERM
	set -e -o pipefail
	stop_watchdog
}

# QEMU's TCG aborts on an assertion of its own now and then while the guest boots (seen:
# system/physmem.c iotlb_to_section, during PCI enumeration); the same boot passes when run
# again. Such a boot is retried, at most twice, and only when the guest never started the
# command: a command that ran is never run a second time.
qemu_aborted_before_command() {
	[ ! -f "$run/status" ] &&
		! grep -q 'virtme-ng-init: starting script' "$run/console.log" &&
		grep -q '^qemu-system-[^:]*: .*Assertion .* failed' "$run/console.log"
}
rc=0
for attempt in 1 2 3; do
	log "vm ($flavour): booting $(basename "$kernel") (attempt $attempt of 3), running: $*"
	boot_once
	qemu_aborted_before_command || break
	log "vm ($flavour): QEMU aborted before the command started, a fault of QEMU's own:"
	grep -m 1 '^qemu-system-[^:]*: .*Assertion .* failed' "$run/console.log" >&2
done
# The whole console, kept where the caller asked (`make soak`: one file per guest).
if [ -n "${RSIW_CONSOLE_KEEP:-}" ]; then
	cp "$run/console.log" "$RSIW_CONSOLE_KEEP" || true
fi
status=$(cat "$run/vng.status" 2>/dev/null || echo 99)

# Kernel reports after the command started fail the run; earlier ones (boot) are shown.
problems='Kernel panic\|BUG: \|KASAN\|Oops\|WARNING: \|general protection'
# The console without the known upstream lockdep report the guest tests tolerate (see
# KNOWN_UPSTREAM in tests/guest/conftest.py): from its WARNING line to its backtrace's end.
known_upstream() {
	awk '
	/WARNING: possible circular locking dependency detected/ { inblk = 1; blk = ""; }
	inblk {
		blk = blk $0 "\n"
		if ($0 ~ /<\/TASK>/) {
			if (!(index(blk, "nvmet_config_sem") && index(blk, "&id_priv->handler_mutex") &&
			      !index(blk, "rsiw")))
				printf "%s", blk
			inblk = 0
		}
		next
	}
	{ print }
	END { if (inblk) printf "%s", blk }'
}
# A user-space program's fault ("traps: comm[pid] general protection fault ... in lib.so",
# show_signal()) is the test's to judge by the program's exit status, not a kernel report.
user_traps() { grep -v '\] traps: [^ ]*\[[0-9]*\] '; }
# No match (a guest that never reached its command) must not end this script under set -e:
# the report of such a guest, with its console's last lines, is below.
started=$(grep -n 'virtme-ng-init: starting script' "$run/console.log" | head -n 1 | cut -d: -f1 ||
	true)
started=${started:-1}
if head -n "$started" "$run/console.log" | grep -q "$problems"; then
	log "vm ($flavour): note: the kernel reported a problem during boot (before the command):"
	head -n "$started" "$run/console.log" | grep -m 3 "$problems" >&2
fi
if [ -f "$run/status" ]; then
	rc=$(cat "$run/status")
	if tail -n "+$started" "$run/console.log" | known_upstream | user_traps | grep -q "$problems"; then
		log "vm ($flavour): the guest kernel reported a problem:"
		tail -n "+$started" "$run/console.log" | known_upstream | user_traps |
			grep -m 20 -A 15 "$problems" >&2
		[ "$rc" != 0 ] || rc=98
	fi
	log "vm ($flavour): command exited with $rc"
	exit "$rc"
fi
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
	log "vm ($flavour): TIMEOUT after ${timeout_s}s; last guest console lines:"
else
	log "vm ($flavour): the guest did not finish the command (vng exit $status); last guest console lines:"
fi
kept="$RSIW_TOP/build/vm-$flavour-console.log"
mkdir -p "$(dirname "$kept")" && cp "$run/console.log" "$kept" && log "vm ($flavour): console log kept in $kept"
if grep -q 'NMI received for unknown reason' "$run/console.log"; then
	# The watchdog's NMI: the backtraces tell where the guest hung.
	sed -n '/NMI received for unknown reason/,$p' "$run/console.log" | head -n 400 >&2
else
	tail -n 60 "$run/console.log" >&2
fi
exit 99
