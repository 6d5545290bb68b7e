#!/usr/bin/env bash
# bindings/run_tests.sh — runs one binding check for ctest (bindings/CMakeLists.txt).
#
# Usage: run_tests.sh KIND WORK_DIR LIBRARY MODEL_TOOL ORACLE_DIR
#   KIND       go-vet | go-test | go-consumer | cargo-test
#   WORK_DIR   a directory in the build tree: Go's cache and GOPATH, cargo's target dir and
#              the tests' temporary files go there (nothing is written to $HOME)
#   LIBRARY    the built libcolibri.so.1;  MODEL_TOOL  the built colibri-model
#   ORACLE_DIR tests/fixtures/oracle/mixtral_gqa
# The paths reach the tests as environment variables (COLIBRI_LIB, COLIBRI_MODEL_TOOL,
# COLIBRI_ORACLE_DIR, COLIBRI_TEST_TMPDIR): test-runner plumbing, not product configuration.
# Exit 77 (ctest SKIP_RETURN_CODE) when the toolchain is missing.
set -euo pipefail
kind=$1 work=$2
export COLIBRI_LIB=$3 COLIBRI_MODEL_TOOL=$4 COLIBRI_ORACLE_DIR=$5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work/tmp" && mkdir -p "$work/tmp"
export COLIBRI_TEST_TMPDIR="$work/tmp"

skip() {
  echo "SKIPPED: $1"
  exit 77
}

case $kind in
  go-consumer)
    # Another module depending on the binding offline, exactly as bindings/go/README.md says
    # ("Using it from your own module"): a require plus a replace directive, no proxy, no go get.
    command -v go >/dev/null || skip "go not found (Debian package golang-go; scripts/install-deps.sh installs it)"
    export GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local CGO_ENABLED=1 GOFLAGS=
    export GOCACHE="$work/go-cache" GOPATH="$work/gopath" GOENV=off
    app="$work/tmp/myapp"
    lib=$(realpath "$COLIBRI_LIB")
    mkdir -p "$app"
    cat >"$app/go.mod" <<EOF
module example.com/myapp

go 1.19

require colibri.dev/colibri v0.0.0

replace colibri.dev/colibri => $here/go
EOF
    cat >"$app/main.go" <<'EOF'
package main

import (
	"fmt"
	"os"

	"colibri.dev/colibri"
)

func main() {
	lib, err := colibri.Load(os.Args[1]) // "" = libcolibri.so.1 from the loader path
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("libcolibri", lib.Version(), "ABI", lib.ABIVersion())
}
EOF
    cd "$app"
    go build -o myapp .
    out=$(./myapp "$lib")
    echo "$out"
    [[ $out == "libcolibri "*" ABI "* ]] || { echo "unexpected output: $out"; exit 1; }
    ;;
  go-vet | go-test)
    command -v go >/dev/null || skip "go not found (Debian package golang-go; scripts/install-deps.sh installs it)"
    # Offline and self-contained: no module proxy, caches inside the build tree.
    export GOFLAGS=-mod=mod GOPROXY=off GOSUMDB=off GOTOOLCHAIN=local CGO_ENABLED=1
    export GOCACHE="$work/go-cache" GOPATH="$work/gopath" GOENV=off
    cd "$here/go"
    go version
    if [[ $kind == go-vet ]]; then
      go vet ./...
      unformatted=$(gofmt -l .)
      if [[ -n $unformatted ]]; then
        echo "gofmt: these files need formatting: $unformatted"
        exit 1
      fi
      echo "go vet: clean; gofmt: clean"
    else
      # -race needs the race runtime (Debian's golang-go ships it for amd64/arm64).
      race=-race
      if ! go env GOARCH | grep -qE '^(amd64|arm64)$'; then race=; fi
      go test $race -count=1 -v ./...
    fi
    ;;
  cargo-test)
    command -v cargo >/dev/null || skip "cargo not found (Debian package cargo; scripts/install-deps.sh installs it)"
    export CARGO_TARGET_DIR="$work/cargo-target" CARGO_TERM_COLOR=never
    cd "$here/rust"
    cargo --version
    cargo test --offline --locked 2>&1
    ;;
  *)
    echo "run_tests.sh: unknown kind $kind" >&2
    exit 2
    ;;
esac
