//go:build pristine

package e2e_test

import "github.com/twmb/franz-go/pkg/kgo"

// Stand-ins for shim_patched_test.go, for building BenchmarkProduce against
// pristine franz-go v1.22.3, which has no FailPartitionOnProduceFailure.
// failstop_bench_test.go, which needs the API, is not built here.

const failStopAvailable = false

func failStopOpt() []kgo.Opt { return nil }
