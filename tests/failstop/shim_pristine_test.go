//go:build pristine

package failstop_test

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Stand-ins for shim_patched_test.go, for building TestInvariantInvalidRecord
// against pristine franz-go v1.22.3, which has no
// FailPartitionOnProduceFailure. There the invariant test must fail: a record
// produced after the failure is written.

const failStopAvailable = false

func failStopOpts(any) []kgo.Opt { return nil }

// recoverPartition can only produce the records again.
func recoverPartition(cl *kgo.Client, _ string, _ int32, _ int, promise func(*kgo.Record, error), rs ...*kgo.Record) error {
	for _, r := range rs {
		cl.Produce(context.Background(), r, promise)
	}
	return nil
}

func isPartitionFailed(error) bool { return false }
