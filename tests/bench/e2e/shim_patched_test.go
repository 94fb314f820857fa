//go:build !pristine

package e2e_test

import "github.com/twmb/franz-go/pkg/kgo"

// This file wires the FailPartitionOnProduceFailure API, which only the
// patched franz-go has. shim_pristine_test.go provides stand-ins so that
// BenchmarkProduce compiles against pristine franz-go v1.22.3 too
// (go test -tags pristine).

// failStopAvailable reports whether the fail-stop API is compiled in.
const failStopAvailable = true

// failStopOpt is what KGO_BENCH_FAIL_STOP=1 adds to BenchmarkProduce's
// client: the option, and nothing else.
func failStopOpt() []kgo.Opt {
	return []kgo.Opt{kgo.FailPartitionOnProduceFailure()}
}
