#!/usr/bin/env bash
# tshark as the independent oracle for what rsiw puts on the wire.
#
# 1. The host test userspace/core/tests/pcap_exchange.rs drives the real protocol core
#    (MPA startup in both roles, the DDP/RDMAP TX builder for every RDMAP opcode, a
#    TERMINATE) on three connections (Rev 1 + markers + CRC, Rev 2 + CRC + P2P, Rev 2 without
#    CRC) and writes iwarp_exchange.pcap plus the field values tshark must show (*.tsv).
# 2. tshark from the build root decodes the capture. Required: zero "Bad CRC32", zero
#    malformed packets, zero expert errors (IP/TCP checksums checked), no expert warnings
#    other than the two RFC 5044-era ones tshark raises for RFC 6581 Rev 2 frames, a
#    "Good CRC32" for every FPDU sent with CRCs, markers on the markers connection, and
#    exactly the expected MPA and FPDU field rows.
#
# Usage: tests/pcap-check.sh        (output in build/pcap, or $RSIW_PCAP_OUT inside the repo)
# Only reads the build root; builds it first if it does not exist yet (tests/root.sh).
. "$(dirname "$0")/lib.sh"

out=${RSIW_PCAP_OUT:-$RSIW_TOP/build/pcap}
mkdir -p "$out"
out=$(cd "$out" && pwd)
case "$out/" in
"$RSIW_TOP"/* | "$RSIW_CACHE"/*) ;;
*) die "RSIW_PCAP_OUT=$out must be inside $RSIW_TOP or $RSIW_CACHE (visible in the build root)" ;;
esac
rm -f "$out"/iwarp_exchange.*

log "pcap: writing the exchange (cargo test --test pcap_exchange)"
(cd "$RSIW_TOP/userspace" &&
	RSIW_PCAP_OUT="$out" cargo test --locked -q -p rsiw-core --test pcap_exchange >"$out/cargo.log" 2>&1) ||
	{ cat "$out/cargo.log" >&2; die "pcap_exchange test failed"; }
pcap=$out/iwarp_exchange.pcap
[ -s "$pcap" ] || die "the test wrote no $pcap"

root=$("$RSIW_TOP/tests/root.sh")
[ -x "$root/usr/bin/tshark" ] || die "no tshark in the build root $root"

opts=(-r "$pcap" --disable-protocol rpcordma -o tcp.check_checksum:TRUE -o ip.check_checksum:TRUE)
# ts ARGS...: tshark in the build root on the capture; stderr (the "running as root" notice,
# real errors) goes to tshark.err.
ts() {
	in_root "$root" tshark "${opts[@]}" "$@" 2>>"$out/tshark.err"
}

fail=0
bad() {
	log "pcap: FAIL: $*"
	fail=1
}

ts -V >"$out/verbose.txt" || die "tshark failed: $(tail -n 5 "$out/tshark.err")"
ts -q -z expert >"$out/expert.txt"

n_bad=$(grep -c 'Bad CRC32' "$out/verbose.txt" || true)
n_good=$(grep -c 'Good CRC32' "$out/verbose.txt" || true)
n_malformed=$(grep -c 'Malformed Packet' "$out/verbose.txt" || true)
[ "$n_bad" -eq 0 ] || bad "$n_bad Bad CRC32: $(grep 'Bad CRC32' "$out/verbose.txt" | head -n 5)"
[ "$n_malformed" -eq 0 ] || bad "$n_malformed malformed packets"

errors=$(ts -Y '_ws.expert.severity == error || _ws.malformed' -T fields -e frame.number \
	-e _ws.expert.message)
[ -z "$errors" ] || bad "expert errors or malformed frames:"$'\n'"$errors"
# The expert tap also sees items the per-frame filter misses (the MPA dissector's own).
if grep -q '^Errors (' "$out/expert.txt"; then
	bad "expert errors:"$'\n'"$(cat "$out/expert.txt")"
fi
warnings=$(awk '/^Warns \(/ { w = 1; next } /^[A-Z][a-z]+ \(/ { w = 0 }
	w && $1 ~ /^[0-9]+$/ { print }' "$out/expert.txt")
unexpected=$(printf '%s\n' "$warnings" | grep -v -e 'Res field is NOT set to zero' \
	-e 'Rev field is NOT set to one' -e '^$' || true)
[ -z "$unexpected" ] || bad "unexpected expert warnings:"$'\n'"$unexpected"
n_warn=$(printf '%s\n' "$warnings" | awk '$1 ~ /^[0-9]+$/ { n += $1 } END { print n + 0 }')

# Expected field rows: line 1 "#filter F", line 2 "#fields a b ...", then rows.
rows_total=0
for tsv in "$out"/iwarp_exchange.*.tsv; do
	name=$(basename "$tsv" .tsv)
	filter=$(sed -n '1s/^#filter //p' "$tsv")
	read -r -a fields <<<"$(sed -n '2s/^#fields //p' "$tsv")"
	[ -n "$filter" ] && [ "${#fields[@]}" -gt 0 ] || die "$tsv: bad header"
	args=()
	for f in "${fields[@]}"; do
		args+=(-e "$f")
	done
	ts -Y "$filter" -T fields -E separator=/t -E occurrence=a -E aggregator=, "${args[@]}" \
		>"$out/$name.actual.tsv"
	tail -n +3 "$tsv" >"$out/$name.expected.tsv"
	rows_total=$((rows_total + $(wc -l <"$out/$name.expected.tsv")))
	if ! diff -u "$out/$name.expected.tsv" "$out/$name.actual.tsv" >"$out/$name.diff"; then
		bad "$name: tshark's fields differ from what the core sent (- expected, + tshark);" \
			"columns: ${fields[*]}"$'\n'"$(head -n 60 "$out/$name.diff")"
	fi
done

n_fpdu=$(wc -l <"$out/iwarp_exchange.fpdu.expected.tsv")
# Every FPDU sent with CRCs on shows a Good CRC32 (column 4 is iwarp_mpa.crc_check).
n_crc=$(awk -F'\t' '$4 != ""' "$out/iwarp_exchange.fpdu.expected.tsv" | wc -l)
[ "$n_good" -eq "$n_crc" ] || bad "$n_good Good CRC32, expected $n_crc"
opcodes=$(ts -Y iwarp_mpa.fpdu -T fields -e iwarp_rdma.opcode | sort -u | tr '\n' ' ')
for op in 0x00 0x01 0x02 0x03 0x04 0x05 0x06 0x07 0x08 0x09 0x0a 0x0b; do
	case " $opcodes " in
	*" $op "*) ;;
	*) bad "RDMAP opcode $op not decoded" ;;
	esac
done
n_markers=$(ts -Y 'iwarp_mpa.marker_fpduptr' -T fields -E occurrence=a -E aggregator=' ' \
	-e iwarp_mpa.marker_fpduptr | wc -w)
n_marker_streams=$(ts -Y 'iwarp_mpa.marker_fpduptr' -T fields -e tcp.stream | sort -u | tr '\n' ' ')
[ "$n_markers" -gt 0 ] || bad "no markers decoded"
[ "$n_marker_streams" = "0 " ] || bad "markers on streams '$n_marker_streams', expected only 0"
terms=$(ts -Y 'iwarp_rdma.opcode == 0x07' -T fields -e tcp.stream -e iwarp_rdma.term_layer \
	-e iwarp_rdma.term_etype_rdma -e iwarp_rdma.term_etype_ddp -e iwarp_rdma.term_etype_llp \
	-e iwarp_rdma.term_errcode_rdma -e iwarp_rdma.term_errcode_ddp_tagged \
	-e iwarp_rdma.term_errcode_ddp_untagged -e iwarp_rdma.term_errcode_llp |
	awk -F'\t' '{ s = ""; for (i = 1; i <= NF; i++) if ($i != "") s = s (s == "" ? "" : "/") $i
		printf "%s ", s }')
[ "$(wc -w <<<"$terms")" -eq 3 ] || bad "expected 3 TERMINATEs, tshark shows: $terms"
if [ "$fail" -ne 0 ]; then
	log "pcap: tshark's decoding of $pcap:"
	ts >&2 || true
	log "pcap: expert summary:"
	cat "$out/expert.txt" >&2
	log "pcap: full verbose decode in $out/verbose.txt, tshark stderr in $out/tshark.err"
	die "pcap check failed"
fi

frames=$(ts -T fields -e frame.number | wc -l)
n_mpa=$(wc -l <"$out/iwarp_exchange.mpa.expected.tsv")
log "pcap: $pcap: $frames frames, 3 connections (Rev 1 markers+CRC, Rev 2 CRC+P2P, Rev 2 no CRC)"
log "pcap:   MPA Request/Reply frames: $n_mpa, FPDUs: $n_fpdu, Good CRC32: $n_good, Bad CRC32: 0, malformed: 0, expert errors: 0"
log "pcap:   RDMAP opcodes decoded: $opcodes"
log "pcap:   markers (FPDUPTR) decoded: $n_markers, all on stream 0"
log "pcap:   TERMINATEs (stream/layer/etype/ecode): $terms"
log "pcap:   expected field rows matched: $rows_total"
log "pcap:   expert warnings: $n_warn, all 'Res field is NOT set to zero' / 'Rev field is NOT set to one' on the Rev 2 Request/Reply frames (RFC 6581 S bit and Rev 2, expected)"
log "pcap: passed"
