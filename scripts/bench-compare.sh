#!/bin/bash
# Before/after of the hot paths (claims on each store, inbox batched and unbatched,
# relay, fence, middleware, serve): the test binaries of two trees run alternately,
# ROUNDS times, into OUT/base.txt, OUT/new.txt and benchstat's OUT/stat.txt.
# A tree is a checkout: git worktree add --detach /tmp/base <rev>.
# usage: scripts/bench-compare.sh BASE_DIR NEW_DIR OUT [ROUNDS]   (benchstat: go install golang.org/x/perf/cmd/benchstat@latest)
set -u
base=$(cd "$1" && pwd); new=$(cd "$2" && pwd); out=$3; rounds=${4:-3}
mkdir -p $out
specs=(
 "./idemmem|^BenchmarkClaimComplete$|200000x"
 "./idempg|^BenchmarkClaim$|^BenchmarkClaimComplete$|3000x"
 "./idemsqlite|^BenchmarkClaimConcurrent$|3000x"
 "./idemmysql|^BenchmarkClaim$|2000x"
 "./idemredis|^BenchmarkClaimComplete$|3000x"
 "./inbox|^BenchmarkProcessSQLite$|^BenchmarkProcessPostgres$|^BenchmarkProcessPostgresUnbatched$|2000x"
 "./outbox|^BenchmarkRelayThroughput$|3000x"
 "./effect|^BenchmarkFence$|^BenchmarkFenceConcurrent$|1000x"
 "./idemhttp|^BenchmarkMiddleware$|20000x"
 "./cmd/idem|^BenchmarkServe$|5000x"
)
# compile test binaries once per tree
for tree in base new; do
  dir=${!tree}
  for s in "${specs[@]}"; do
    pkg=${s%%|*}; name=$(echo $pkg | tr '/.' '__')
    (cd $dir && go test -c -o $out/$tree$name.test $pkg) || echo "BUILD FAIL $tree $pkg"
  done
done
for r in $(seq 1 $rounds); do
  for tree in base new; do
    dir=${!tree}
    for s in "${specs[@]}"; do
      IFS='|' read -ra parts <<< "$s"
      pkg=${parts[0]}; bt=${parts[-1]}; name=$(echo $pkg | tr '/.' '__')
      pat=$(IFS='|'; echo "${parts[*]:1:${#parts[@]}-2}")
      (cd $dir/$pkg && IDEM_REQUIRE_SERVICES=1 $out/$tree$name.test -test.run '^$' -test.bench "$pat" -test.benchtime $bt -test.benchmem 2>&1 | grep -E '^(Benchmark|pkg:)' >> $out/$tree.txt)
    done
  done
done
benchstat $out/base.txt $out/new.txt > $out/stat.txt 2>&1
