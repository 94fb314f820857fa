//go:build pristine

package chaos_test

import "github.com/twmb/franz-go/pkg/kgo"

// Stand-ins for shim_patched_test.go, for building the harness against
// pristine franz-go v1.22.3, which has no FailPartitionOnProduceFailure. Only
// the naive, option-off baseline can run there.

const failStopAvailable = false

func failStopOpts(any) []kgo.Opt { return nil }

func recoverPartitions(*kgo.Client, map[string][]int32) {}

func failedPartitions(*kgo.Client) map[string][]int32 { return nil }

func isPartitionFailed(error) bool { return false }
