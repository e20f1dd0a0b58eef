#!/usr/bin/env bash
# Benchmarks of the lab (docs/benchmarks.md): warm `lab up` until every node is Ready and until kube-proxy
# runs everywhere (RUNS times, median), and the resident memory of the whole lab at rest.
set -euo pipefail
cd "$(dirname "$0")/.."
IRONLB=${IRONLB:-bin/ironlb}
RUNS=${RUNS:-5}
REST=${REST:-30}
# More `lab up` flags, e.g. LAB_UP_ARGS=--runtime=runc (with a static IRONLB).
read -r -a up_args <<<"${LAB_UP_ARGS:-}"
trap '"$IRONLB" lab down >/dev/null 2>&1 || true' EXIT INT TERM
"$IRONLB" lab down >/dev/null
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ready=(); full=(); helmready=()
for i in $(seq "$RUNS"); do
  out=$("$IRONLB" lab up "${up_args[@]}" 2>&1)
  r=$(sed -n 's/.*nodes Ready.*; \([0-9.]*\)s after start).*/\1/p' <<<"$out")
  f=$(sed -n 's/^lab .* is up in \([0-9.]*\)s$/\1/p' <<<"$out")
  # From helm upgrade --install (push, pull and install of the chart) to every ironlb pod Ready.
  h=$(sed -n 's/.*every ironlb pod Ready \([0-9.]*\)s after helm started.*/\1/p' <<<"$out")
  printf 'run %d/%d: nodes Ready after %ss, lab up returned after %ss, ironlb Ready %ss after helm started\n' "$i" "$RUNS" "$r" "$f" "${h:--}" >&2
  ready+=("$r"); full+=("$f"); [ -z "$h" ] || helmready+=("$h")
  if [ "$i" -lt "$RUNS" ]; then "$IRONLB" lab down >/dev/null; fi
done
echo "resting ${REST}s before reading memory" >&2
sleep "$REST"
mem=$("$IRONLB" lab status | sed -n 's/.*resident memory: \([0-9]*\) MiB/\1/p')
procs=$("$IRONLB" lab status | sed -n 's/^processes: \([0-9]*\),.*/\1/p')
cg=$(ls -d /sys/fs/cgroup/ironlb-lab-myk8s /sys/fs/cgroup/unified/ironlb-lab-myk8s 2>/dev/null | head -1 || true)
echo
echo "| metric (lab: 1 control plane + 3 workers, kube-proxy iptables, ironlb installed) | median of $RUNS | all runs |"
echo "|---|---|---|"
echo "| warm \`lab up\` until every node is Ready | $(printf '%s\n' "${ready[@]}" | median) s | ${ready[*]} |"
echo "| warm \`lab up\` until it returns (kube-proxy on every node, ironlb controller and speakers ready) | $(printf '%s\n' "${full[@]}" | median) s | ${full[*]} |"
if [ ${#helmready[@]} -gt 0 ]; then
  echo "| from helm (chart pushed, pulled and installed) to every ironlb pod Ready | $(printf '%s\n' "${helmready[@]}" | median) s | ${helmready[*]} |"
fi
echo "| resident memory of the whole lab at rest (${REST}s after up, $procs processes, summed RSS) | $mem MiB | |"
echo
echo "Per process at rest (RSS MiB):"
for p in $(find "$cg" -name cgroup.procs -exec cat {} +); do
  printf '%6.0f  %s\n' "$(awk '/VmRSS/ {print $2/1024}' /proc/$p/status 2>/dev/null || echo 0)" "$(tr '\0' ' ' </proc/$p/cmdline 2>/dev/null | cut -c1-90)"
done | sort -rn | awk '{print "    " $0}'
