//go:build !pristine

package failstop_test

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// This file wires the FailPartitionOnProduceFailure API, which only the
// patched franz-go has. shim_pristine_test.go provides stand-ins so that
// TestInvariantInvalidRecord compiles against pristine franz-go too
// (go test -tags pristine), where it must fail.

// failStopAvailable reports whether the fail-stop API is compiled in.
const failStopAvailable = true

// failure is a partition (or topic) failure: what the hook is passed, and
// what every record it failed or rejected carries.
type failure = kgo.ErrProducePartitionFailed

// errRecoveryPending is what a recovery is refused with while a promise of
// the failure's records has not returned.
var errRecoveryPending = kgo.ErrRecoveryPending

// failStopOpts enables FailPartitionOnProduceFailure and, unless h is nil,
// registers h, which implements kgo.HookProducePartitionFailed.
func failStopOpts(h any) []kgo.Opt {
	if h == nil {
		return []kgo.Opt{kgo.FailPartitionOnProduceFailure()}
	}
	return []kgo.Opt{kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(h)}
}

// OnProducePartitionFailed implements kgo.HookProducePartitionFailed.
func (h *failHook) OnProducePartitionFailed(f *kgo.ErrProducePartitionFailed) { h.failed(f) }

var _ kgo.HookProducePartitionFailed = (*failHook)(nil)

// recoverPartition is kgo's RecoverProducePartition: it un-fails f's
// partition (or topic) and buffers rs at its front.
func recoverPartition(cl *kgo.Client, f *failure, promise func(*kgo.Record, error), rs ...*kgo.Record) error {
	return cl.RecoverProducePartition(f, promise, rs...)
}

// failureOf returns the failure a promise's error carries, nil if none.
func failureOf(err error) *failure {
	var f *kgo.ErrProducePartitionFailed
	if errors.As(err, &f) {
		return f
	}
	return nil
}

// isRejected reports whether err rejected a record produced to a failed
// partition or topic: it is the failure itself.
func isRejected(err error) bool {
	f := failureOf(err)
	return f != nil && err == error(f)
}
