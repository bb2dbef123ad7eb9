#!/usr/bin/env bash
# Fetches the Java Aeron media driver used by the `vs_aeron` bench and `examples/latency.rs`
# (the comparison crate compare/, and the bridge) into target/aeron/, from Maven Central with the ordinary mvn client.
# Needs Java 17+ at run time and Maven here; nothing else in the crate needs either.
set -euo pipefail
VERSION="${AERON_VERSION:-1.51.0}"   # newest io.aeron:aeron-all on Maven Central
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
OUT="${AERON_JAR_DIR:-$ROOT/target/aeron}"
JAR="$OUT/aeron-all-$VERSION.jar"
if [[ -s "$JAR" ]]; then
    echo "already there: $JAR"
    exit 0
fi
command -v mvn >/dev/null || { echo "mvn not found: apt-get install -y maven (and a JDK 17+)" >&2; exit 1; }
mkdir -p "$OUT"
mvn -B -q dependency:copy -Dartifact="io.aeron:aeron-all:$VERSION" -DoutputDirectory="$OUT"
test -s "$JAR"
echo "fetched $JAR"
