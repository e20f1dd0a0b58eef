# shellcheck shell=bash
# What the hack/*-binary scripts share; sourced (`. "$here/lib.sh"`, with here set to this folder), not run.
# It reads hack/versions.env (the pins) and sets cache, the folder outside the repository that the builds
# go into: ${IRONLB_CACHE:-$HOME/.cache/ironlb}.
# shellcheck source=/dev/null
. "$here/versions.env"
cache=${IRONLB_CACHE:-$HOME/.cache/ironlb}

# k8s_replace NAME: the replace lines a helper module that requires k8s.io/kubernetes@KUBE_VERSION needs,
# one a line: each staging module (k8s.io/api, k8s.io/client-go, ...) that k8s.io/kubernetes' go.mod
# points at ./staging, at its published version v0.<minor> instead. NAME prefixes the error message.
k8s_replace() {
  local kmod staging_ver="v0.${KUBE_VERSION#v1.}"
  kmod=$(cd /tmp && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
  [ -n "$kmod" ] || { echo "$1: cannot download k8s.io/kubernetes@${KUBE_VERSION}" >&2; return 1; }
  sed -n '/^replace (/,/^)/p' "$kmod" | awk '/=> \.\/staging/ {printf "\t%s => %s %s\n", $1, $1, "'"$staging_ver"'"}'
}

# k8s_gomod NAME MODULE [REQUIRE...]: the go.mod of helper module MODULE, which requires
# k8s.io/kubernetes@KUBE_VERSION and each REQUIRE ("path version"), with k8s_replace's lines.
k8s_gomod() {
  local name=$1 module=$2 replace r
  shift 2
  replace=$(k8s_replace "$name") || return 1
  echo "module $module"
  echo
  echo "go 1.26.0"
  echo
  if [ $# -eq 0 ]; then
    echo "require k8s.io/kubernetes ${KUBE_VERSION}"
  else
    echo "require ("
    echo "	k8s.io/kubernetes ${KUBE_VERSION}"
    for r in "$@"; do echo "	$r"; done
    echo ")"
  fi
  echo
  echo "replace ("
  echo "$replace"
  echo ")"
}

# tools_go IMPORT...: a tools.go (build tag tools, package tools) that imports each IMPORT for its side
# effects only, so that `go mod tidy` in a helper module keeps what building those packages needs.
tools_go() {
  local p
  printf '//go:build tools\n\npackage tools\n\nimport (\n'
  for p in "$@"; do printf '\t_ "%s"\n' "$p"; done
  echo ")"
}

# k8s_ldflags: the -ldflags that stamp KUBE_VERSION into what is built from k8s.io/kubernetes (what
# `kube-apiserver --version`, `e2e.test --version` and the client's user agent say).
k8s_ldflags() {
  local minor=${KUBE_VERSION#v1.}
  echo "-s -w -X k8s.io/component-base/version.gitVersion=${KUBE_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${minor%%.*} -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/client-go/pkg/version.gitVersion=${KUBE_VERSION} -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=${minor%%.*}"
}

# progress NAME EVERY TOTAL START MODE: a filter for the stderr of `go build -v` / `go install -v`, which
# names each package as it is compiled: every EVERY packages it prints "NAME: n/TOTAL packages compiled
# (Ns since START)" on stderr (without "/TOTAL" where TOTAL is empty), so a cold build is seen moving.
# MODE all counts every line; MODE pkgs counts only the lines that are an import path and passes the
# others (go: downloading ..., compiler errors) through.
progress() {
  awk -v name="$1" -v every="$2" -v total="$3" -v start="$4" -v mode="$5" '
    mode == "pkgs" && !/^[a-zA-Z0-9._~\/-]+$/ { print > "/dev/stderr"; fflush("/dev/stderr"); next }
    { n++; if (n % every == 0) { cmd = "date +%s"; cmd | getline now; close(cmd)
        of = total == "" ? "" : "/" total
        printf "%s: %d%s packages compiled (%ds)\n", name, n, of, now - start > "/dev/stderr"; fflush("/dev/stderr") } }'
}
