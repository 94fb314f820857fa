//go:build pristine

package failstop_test

import "github.com/twmb/franz-go/pkg/kgo"

// No-op versions of shim_patched_test.go, for building
// TestInvariantInvalidRecord against pristine franz-go v1.22.3, which has no
// FailPartitionOnProduceFailure. There the invariant test must fail: a record
// produced after the failure is written.

const failStopAvailable = false

func failStopOpts(any) []kgo.Opt { return nil }

func failedPartitions(*kgo.Client) map[string][]int32 { return nil }

func recoverPartitions(*kgo.Client, map[string][]int32) error { return nil }

func isPartitionFailed(error) bool { return false }
