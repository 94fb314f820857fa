//go:build pristine

package failstop_test

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Stand-ins for shim_patched_test.go, for building TestInvariantInvalidRecord
// against pristine franz-go v1.22.3, which has no
// FailPartitionOnProduceFailure. There the invariant test must fail: a record
// produced after the failure is written.

const failStopAvailable = false

// failure stands in for kgo.ErrProducePartitionFailed; the hook that would
// pass one is never registered.
type failure struct {
	Topic     string
	Partition int32
	Err       error
}

func (*failure) Error() string { return "partition failed (never on pristine franz-go)" }

var errRecoveryPending = errors.New("no recovery on pristine franz-go")

func failStopOpts(any) []kgo.Opt { return nil }

// recoverPartition can only produce the records again.
func recoverPartition(cl *kgo.Client, _ *failure, promise func(*kgo.Record, error), rs ...*kgo.Record) error {
	for _, r := range rs {
		cl.Produce(context.Background(), r, promise)
	}
	return nil
}

func failureOf(error) *failure { return nil }

func isRejected(error) bool { return false }
