#!/usr/bin/env bash
# Build Telegraf with only the plugins longhaul uses, and put the binary in OUT_DIR/telegraf.
#
#   appliance/setup/build-telegraf.sh OUT_DIR
#
# Telegraf's own build tags select its plugins: `custom` drops every plugin, and one tag per
# plugin (`inputs.net`, `outputs.file`, ...; see plugins/*/all/*.go in Telegraf's source) adds it
# back. A full build takes ~9 minutes and ~7 GB here; this one takes well under a minute.
#
# Caches, shared by every checkout on this machine (a CI clone too):
#   /var/cache/longhaul/go/{mod,build}                    GOMODCACHE and GOCACHE
#   /var/cache/longhaul/telegraf/<version>-<tags hash>/   the finished binary
# so a second run only copies the cached binary. LONGHAUL_CACHE moves the root (tests).
set -euo pipefail

out=${1:?usage: build-telegraf.sh OUT_DIR}

VERSION=v1.37.2
# The module's hash (go.sum's h1: form), pinned when this version was first downloaded here: the
# Go checksum database cannot be reached from the lab, so the script checks every download against it.
MODULE_SUM="h1:mYr0I/suEw9+UM4KrCFuYuzJuq/e99cINniIwqO6ykw="
# Keep in step with collectors/live/telegraf.py (the plugins its config uses) and with the
# plugin names in Telegraf's plugins/{inputs,outputs,parsers,serializers}/all/*.go.
TAGS="custom,inputs.cpu,inputs.execd,inputs.net,inputs.netstat,inputs.nstat,outputs.file,parsers.influx,serializers.influx"

cache=${LONGHAUL_CACHE:-/var/cache/longhaul}
hash=$(printf '%s' "$TAGS" | sha256sum | cut -c1-12)
slot="$cache/telegraf/${VERSION#v}-$hash"

install_binary() {
  mkdir -p "$out"
  cp "$slot/telegraf" "$out/telegraf.tmp.$$"
  mv -f "$out/telegraf.tmp.$$" "$out/telegraf"    # atomic: a running telegraf keeps its inode
}

if [ -x "$slot/telegraf" ]; then
  install_binary
  exit 0
fi

# Optional: a stock Debian 12 has Go 1.19. Without a Go that can build Telegraf, longhaul takes
# `telegraf` from PATH (InfluxData's package; docs/telemetry.md), and a run that asks for Telegraf
# where there is none is refused at its preflight.
go=$(command -v go || true)
[ -n "$go" ] || { [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go; }
have=$([ -n "$go" ] && "$go" env GOVERSION 2>/dev/null || true)
minor=$(printf '%s' "$have" | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
if [ -z "$minor" ] || [ "$minor" -lt 25 ]; then
  where=$(command -v telegraf || true)
  echo "skipped: Telegraf $VERSION needs Go >= 1.25 (found: ${have:-no Go}); ${where:+$where is used; }without" \
       "one, a run with [store] influx and telegraf = true is refused"
  exit 0
fi

mkdir -p "$cache/telegraf" "$cache/go"
# One build at a time per machine (a developer's make and a CI run share the cache).
exec 9>"$cache/telegraf/.lock"
flock 9
if [ -x "$slot/telegraf" ]; then     # built by whoever held the lock before us
  install_binary
  exit 0
fi

export GOMODCACHE="$cache/go/mod" GOCACHE="$cache/go/build"
# The module proxy is the machine's own (GOPROXY from the environment or `go env`): a facility's
# proxy or mirror, never a host named here.
export GOTOOLCHAIN=local CGO_ENABLED=0
# sum.golang.org is not reachable from here, and `go mod download` of a module that is in no
# go.sum asks it for the module's hash: Telegraf itself is exempted from that lookup (GONOSUMDB)
# and checked against MODULE_SUM above instead. Its dependencies need no lookup: they are all in
# Telegraf's own go.sum, which the build verifies them against (-mod=readonly: go.sum is never
# extended behind our back, so a dependency missing from it fails the build instead).
export GONOSUMDB=github.com/influxdata/telegraf GOFLAGS="-mod=readonly -buildvcs=false"

start=$(date +%s)
info=$("$go" mod download -json "github.com/influxdata/telegraf@$VERSION")
src=$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
sum=$(printf '%s\n' "$info" | sed -n 's/^[[:space:]]*"Sum": "\(.*\)",\{0,1\}$/\1/p')
if [ "$sum" != "$MODULE_SUM" ]; then
  echo "build-telegraf: github.com/influxdata/telegraf@$VERSION has hash '$sum', expected $MODULE_SUM" >&2
  exit 1
fi

# `go install module@version` refuses modules whose go.mod has replace directives; building in a
# writable copy of the module (the module cache is read-only) works either way.
work=$(mktemp -d "$cache/telegraf/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp -r "$src/." "$work/src"
chmod -R u+w "$work/src"
(
  cd "$work/src"
  "$go" build -trimpath -tags "$TAGS" \
    -ldflags "-s -w -X github.com/influxdata/telegraf/internal.Version=${VERSION#v}" \
    -o "$work/telegraf" ./cmd/telegraf
)
"$work/telegraf" --version >/dev/null
mkdir -p "$slot"
mv "$work/telegraf" "$slot/telegraf.tmp"
mv "$slot/telegraf.tmp" "$slot/telegraf"
printf 'version %s\ntags %s\nseconds %s\nbytes %s\n' "$VERSION" "$TAGS" "$(($(date +%s) - start))" \
  "$(stat -c %s "$slot/telegraf")" > "$slot/BUILD-INFO"
echo "build-telegraf: built Telegraf $VERSION ($TAGS) in $(($(date +%s) - start)) s, $(stat -c %s "$slot/telegraf") bytes"
install_binary
