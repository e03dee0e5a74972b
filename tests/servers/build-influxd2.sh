#!/bin/sh
# A real InfluxDB 2.x server for the tests of longhaul's InfluxDB 2.x path (POST /api/v2/write with
# a token, Flux on /api/v2/query): InfluxDB OSS 2.7.12, cmd/influxd without UI assets, built from
# the Go module proxy and crates.io only (Debian has no InfluxDB 2.x). `make test` runs it.
#
#   tests/servers/build-influxd2.sh OUT_DIR     -> OUT_DIR/influxd2
#
# Cold: about 10 minutes and 3 GB of caches here (libflux is Rust, built by cargo through
# InfluxData's pkg-config wrapper); the binary is cached in /var/cache/longhaul/influxd-v2/<version>/,
# so every later run, a CI clone's too, copies it in a moment.
set -eu

mkdir -p "${1:?usage: build-influxd2.sh OUT_DIR}"
out=$(cd "$1" && pwd)         # absolute: the build changes directory
VERSION=2.7.12
CACHE_ROOT="${LONGHAUL_CACHE:-/var/cache/longhaul}"
OUT="$CACHE_ROOT/influxd-v2/$VERSION"
BIN="$OUT/influxd"

install_binary() {
    mkdir -p "$out"
    cp "$BIN" "$out/influxd2.tmp.$$"
    mv -f "$out/influxd2.tmp.$$" "$out/influxd2"
}

if [ -x "$BIN" ]; then
    install_binary
    exit 0
fi
# Optional: a stock Debian 12 has neither a Go that builds InfluxDB 2.7 nor Rust (libflux). Then
# the tests of the 2.x path skip, saying so; the module proxy and the crate registry are the
# machine's own (GOPROXY, Cargo's configuration), never a host named here.
have=$(go env GOVERSION 2>/dev/null || true)
minor=$(printf '%s' "$have" | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
if [ -z "$minor" ] || [ "$minor" -lt 21 ] || ! command -v cargo >/dev/null; then
    echo "skipped: InfluxDB $VERSION needs Go >= 1.21 and Rust's cargo (found: ${have:-no Go}," \
         "$(command -v cargo >/dev/null && echo cargo || echo no cargo)); the InfluxDB 2.x tests skip"
    exit 0
fi
C="$CACHE_ROOT/go-influxd"
export GOMODCACHE="$C/mod"
export GOCACHE="$C/build"
export CARGO_HOME="$C/cargo"
export GOSUMDB=off          # sum.golang.org is not reachable here
export GOTOOLCHAIN=local    # never try to download another Go toolchain
export GOFLAGS="-buildvcs=false"

mkdir -p "$GOMODCACHE" "$GOCACHE" "$CARGO_HOME" "$OUT" "$C/bin"
tmp=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM

# go.mod of influxdb/v2 has a replace directive, so `go install pkg@version` is
# refused: fetch the module and build inside a writable copy of it.
MOD="github.com/influxdata/influxdb/v2@v$VERSION"
dir=$(nice -n 19 go mod download -json "$MOD" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
[ -d "$dir" ] || { echo "go mod download $MOD failed" >&2; exit 1; }
src="$C/src/influxdb-$VERSION"
if [ ! -f "$src/.copied" ]; then
    rm -rf "$src"; mkdir -p "$C/src"
    cp -R "$dir" "$src"; chmod -R u+w "$src"; touch "$src/.copied"
fi
cd "$src"
# InfluxData's pkg-config wrapper: when cgo asks for "flux" it copies
# github.com/influxdata/flux/libflux into $GOCACHE/pkgconfig and runs cargo build.
nice -n 19 go build -mod=mod -o "$C/bin/pkg-config" github.com/influxdata/pkg-config >&2
# flux-core has #![deny(warnings)] (feature "strict", on by default); newer rustc
# adds lints (dead_code, mismatched_lifetime_syntaxes) that then become errors.
# RUSTFLAGS does not reach the host build-script deps when cargo gets --target,
# so cap lints through a rustc wrapper instead.
cat > "$C/bin/rustc-caplints" <<'W'
#!/bin/sh
exec "$@" --cap-lints=warn
W
chmod +x "$C/bin/rustc-caplints"
export RUSTC_WRAPPER="$C/bin/rustc-caplints"
# flux pins channel 1.72 in rust-toolchain.toml; use the installed default instead.
if command -v rustup >/dev/null; then
    export RUSTUP_TOOLCHAIN="${RUSTUP_TOOLCHAIN:-stable}"
fi
export PKG_CONFIG="$C/bin/pkg-config"
export CGO_ENABLED=1
CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}" nice -n 19 go build -mod=mod -trimpath \
    -tags 'sqlite_foreign_keys,sqlite_json' \
    -ldflags "-s -w -X main.version=v$VERSION -X main.commit=v$VERSION" \
    -o "$tmp/influxd" ./cmd/influxd >&2

mv "$tmp/influxd" "$BIN.tmp"
mv "$BIN.tmp" "$BIN"           # atomic publish
install_binary
