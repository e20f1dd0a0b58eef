#!/usr/bin/env bash
# The README's promise, checked for real: on a fresh Debian 12 machine with only Go (and make), a clean
# clone, no cache and none of hack/deps.sh's packages, `make lab` alone brings the lab up and runs seed
# 000's experiment. Run by hand as root (not in CI: it downloads Debian's minimal system and the whole
# module graph; the cold build took over an hour at load 5-28 on 2 cores, and ~11 GB
# under DIR). docs/benchmarks.md, "make lab on a fresh
# machine".
#
#   hack/fresh-machine.sh [--keep] [--reuse] [--dir DIR] [--branch B] [--lock FILE] [--build-only]
#
# Phases, each timed:
#   root   debootstrap --variant=minbase bookworm (+ make) into DIR/root, from the Debian mirror and
#          apt sources this machine uses (/etc/apt); needs debootstrap (installed with apt-get if missing)
#   go     this machine's Go toolchain (go env GOROOT) copied to /usr/local/go: "only Go installed"
#   clone  git clone --branch B of this repository (committed work only) to /root/ironlb
#   build  chroot: make deps build k8s registry coredns chart (the cold part of `make lab`; no lock)
#   lab    chroot, under flock FILE if given (the lab is shared): make lab, then bin/ironlb lab down
# The chroot has fresh /proc, /dev, /sys (with /sys/fs/cgroup), a tmpfs /run, and the host's /run/netns
# (bound for the lab phase only), so the lab's namespaces are the host's to see (ip netns list) and to
# clean up. Downloads: Debian's packages and the Go module proxy only (GOPROXY from `go env GOPROXY`
# without "direct", so a module the proxy does not serve fails instead of being fetched from its VCS).
#
# On every exit (success, failure, ^C) it takes the lab down, ends every process whose root is the
# chroot, unmounts every mount under DIR (made slaves first, so that nothing unmounts on the host) and
# removes DIR unless --keep. --reuse keeps DIR/root from an earlier --keep run, fetches the branch
# again and re-runs build and lab with the caches it has (not a fresh check: to retry a failing phase).
set -euo pipefail

dir=/var/tmp/ironlb-fresh keep=0 reuse=0 lock="" build_only=0
repo=$(cd "$(dirname "$0")/.." && pwd)
branch=$(git -C "$repo" rev-parse --abbrev-ref HEAD)
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) keep=1 ;;
    --reuse) reuse=1 keep=1 ;;
    --dir) dir=$2; shift ;;
    --branch) branch=$2; shift ;;
    --lock) lock=$2; shift ;;
    --build-only) build_only=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d;s/^# \{0,1\}//'; exit 0 ;;
    *) echo "fresh-machine: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "fresh-machine: run as root (debootstrap, chroot, the lab)" >&2; exit 1; }
case "$dir" in /var/tmp/?*) ;; *) echo "fresh-machine: --dir must be under /var/tmp" >&2; exit 1 ;; esac
root=$dir/root
log=$dir/logs
goroot=$(go env GOROOT)
goproxy=$(go env GOPROXY | sed 's/[,|]direct$//; s/^direct$/off/')
[ "$reuse" = 1 ] || [ ! -e "$dir" ] || { echo "fresh-machine: $dir exists (an earlier --keep run: --reuse, or remove it)" >&2; exit 1; }

t0=$(date +%s)
declare -a times=()
phase_start=0 phase=""
begin() { phase=$1 phase_start=$(date +%s); echo "== fresh-machine: $1 ($(date -u +%H:%M:%SZ), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
end() {
  local s=$(( $(date +%s) - phase_start ))
  times+=("$(printf '%-6s %5ds  %dm%02ds' "$phase" "$s" $((s / 60)) $((s % 60)))")
  echo "== fresh-machine: $phase done in ${s}s"
  phase=""
}

# inroot CMD...: CMD in the chroot as root, with the environment of a root login that has Go on PATH and
# nothing else: an empty cache, GOPROXY passed in, niced (this is a background check).
inroot() {
  nice -n 19 chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GOPROXY="$goproxy" /bin/bash -c 'cd /root/ironlb && "$@"' bash "$@"
}

# mounted: every mount point under DIR, deepest first.
mounted() { awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r; }

chroot_pids() {
  local p r
  for p in /proc/[0-9]*; do
    r=$(readlink "$p/root" 2>/dev/null) || continue
    case "$r" in "$root"|"$root"/*) echo "${p#/proc/}" ;; esac
  done
}

lab_up=0 locked=0
cleanup() {
  local rc=$? m pids
  trap - EXIT INT TERM
  [ -n "$phase" ] && echo "== fresh-machine: $phase failed (exit $rc) after $(( $(date +%s) - phase_start ))s" >&2
  if [ "$lab_up" = 1 ]; then
    echo "== fresh-machine: cleanup: bin/ironlb lab down" >&2
    inroot bin/ironlb lab down >&2 || echo "fresh-machine: lab down failed" >&2
  fi
  pids=$(chroot_pids)
  if [ -n "$pids" ]; then
    echo "== fresh-machine: cleanup: ending processes in the chroot: $(echo $pids)" >&2
    kill $pids 2>/dev/null || true; sleep 2
    pids=$(chroot_pids); [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true; sleep 1
  fi
  # Slaves first: unmounting a bind of a shared mount (/run/netns) would otherwise unmount the host's.
  for m in $(mounted); do mount --make-rslave "$m" 2>/dev/null || true; done
  for m in $(mounted); do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  [ "$locked" = 1 ] && flock -u 9
  if [ -n "$(mounted)" ]; then
    echo "fresh-machine: still mounted under $dir, not removing it:" >&2; mounted >&2; rc=1
  elif [ "$keep" = 1 ]; then
    echo "== fresh-machine: kept $dir (logs in $log)" >&2
  else
    rm -rf --one-file-system "$dir"
  fi
  echo "== fresh-machine: phases (elapsed):"
  [ ${#times[@]} -eq 0 ] || printf '   %s\n' "${times[@]}"
  echo "== fresh-machine: total $(( $(date +%s) - t0 ))s, exit $rc, load $(cut -d' ' -f1-3 /proc/loadavg)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== fresh-machine: $repo branch $branch ($(git -C "$repo" rev-parse --short "$branch")) into $root; GOPROXY=$goproxy"
if [ "$reuse" = 0 ]; then
  mkdir -p "$root" "$log"
  begin root
  command -v debootstrap >/dev/null || { apt-get update -qq && apt-get install -y -qq debootstrap >/dev/null; }
  # The mirror this machine's apt uses (deb822 or one-line sources), and its sources for the chroot.
  mirror=$(sed -n 's/^URIs: *\(\S*\/debian\)\/\{0,1\}$/\1/p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  mirror=${mirror:-http://deb.debian.org/debian}
  nice -n 19 debootstrap --variant=minbase --include=make bookworm "$root" "$mirror" >"$log/debootstrap.log" 2>&1 ||
    { tail -20 "$log/debootstrap.log" >&2; exit 1; }
  # No service starts in the chroot: it shares the host's network namespace, where the packages'
  # daemons (frr, prometheus) would listen. A real machine starts them; the lab runs its own.
  printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
  chmod 0755 "$root/usr/sbin/policy-rc.d"
  # The /etc/hosts Debian's installer writes (no package owns it; debootstrap writes none), which the
  # lab's pods get a copy of.
  printf '127.0.0.1\tlocalhost\n127.0.1.1\t%s\n::1\tlocalhost ip6-localhost ip6-loopback\n' \
    "$(cat "$root/etc/hostname")" >"$root/etc/hosts"
  if ls /etc/apt/sources.list.d/*.sources >/dev/null 2>&1; then
    : >"$root/etc/apt/sources.list"
    for f in /etc/apt/sources.list.d/*.sources; do grep -q '/debian' "$f" && cp "$f" "$root/etc/apt/sources.list.d/"; done
  fi
  end

  begin go
  mkdir -p "$root/usr/local"
  cp -a "$goroot" "$root/usr/local/go"
  "$root/usr/local/go/bin/go" version
  end

  begin clone
  git clone -q --branch "$branch" "$repo" "$root/root/ironlb"
  git -C "$root/root/ironlb" log --oneline -1
  end
else
  [ -d "$root/root/ironlb" ] || { echo "fresh-machine: --reuse: no $root/root/ironlb" >&2; exit 1; }
  mkdir -p "$log"
  git -C "$root/root/ironlb" fetch -q origin "$branch" && git -C "$root/root/ironlb" reset -q --hard FETCH_HEAD
  echo "== fresh-machine: --reuse: $(git -C "$root/root/ironlb" log --oneline -1) (caches kept: not a fresh check)"
fi

cp /etc/resolv.conf "$root/etc/resolv.conf"
# This site's own CAs (a TLS-intercepting egress proxy, a company CA): the network's, not the machine's,
# so the chroot trusts them too. They take effect when deps.sh installs ca-certificates (which reads
# /usr/local/share/ca-certificates), or at once if it is installed (--reuse).
if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
  mkdir -p "$root/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/"
  [ ! -x "$root/usr/sbin/update-ca-certificates" ] || chroot "$root" update-ca-certificates >/dev/null
fi
# The root is a mount point of its own, as a real machine's is: runc's pivot_root(2) refuses a root that
# is only a chroot's directory (EINVAL, "the current root directory is not a mount point").
mount --bind "$root" "$root" && mount --make-rslave "$root"
mount -t proc proc "$root/proc"
mount --rbind /sys "$root/sys" && mount --make-rslave "$root/sys"
mount --rbind /dev "$root/dev" && mount --make-rslave "$root/dev"
mount -t tmpfs -o mode=755 tmpfs "$root/run"
echo "   Debian $(cat "$root/etc/debian_version"), $(dpkg --root="$root" -l | grep -c '^ii') packages, $("$root/usr/local/go/bin/go" version)"

begin build
inroot make deps build k8s registry coredns chart 2>&1 | tee "$log/build.log"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
end
[ "$build_only" = 1 ] && exit 0

if [ -n "$lock" ]; then
  exec 9>"$lock"
  echo "== fresh-machine: waiting for $lock ($(date -u +%H:%M:%SZ))"
  flock 9; locked=1
fi
mkdir -p "$root/run/netns"
mount --bind /run/netns "$root/run/netns" 2>/dev/null || {
  # No lab ever ran here: make the host's /run/netns the shared mount point `ip netns` would make.
  mkdir -p /run/netns && mount --bind /run/netns /run/netns && mount --make-shared /run/netns &&
    mount --bind /run/netns "$root/run/netns"
}
begin lab
lab_up=1
inroot make lab 2>&1 | tee "$log/lab.log"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
end
begin down
lab_up=0
inroot bin/ironlb lab down 2>&1 | tee "$log/down.log"
[ "${PIPESTATUS[0]}" = 0 ] || exit 1
end
left=$(ip netns list | grep -c . || true)
echo "== fresh-machine: namespaces left on the host: $left"
