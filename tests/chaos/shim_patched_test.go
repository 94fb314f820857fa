//go:build !pristine

package chaos_test

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// This file wires the FailPartitionOnProduceFailure API, which only the
// patched franz-go has. shim_pristine_test.go provides stand-ins so that the
// harness, and its naive option-off baseline, compile against pristine
// franz-go v1.22.3 (go test -tags pristine).

// failStopAvailable reports whether the fail-stop API is compiled in.
const failStopAvailable = true

// failure is kgo's failure of a partition (or topic): what the hook is
// passed and what every record it failed or rejected carries.
type failure = kgo.ErrProducePartitionFailed

// failStopOpts enables FailPartitionOnProduceFailure and registers h, which
// implements kgo.HookProducePartitionFailed.
func failStopOpts(h any) []kgo.Opt {
	return []kgo.Opt{kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(h)}
}

// OnProducePartitionFailed implements kgo.HookProducePartitionFailed.
func (h *failHook) OnProducePartitionFailed(f *kgo.ErrProducePartitionFailed) {
	h.failed(f.Topic, f.Partition, f.Err, f)
}

// Compile-time check that the hook type implements the patched hook.
var _ kgo.HookProducePartitionFailed = (*failHook)(nil)

// recoverFailure recovers f's partition (or topic) with no records: the
// harness produces the failed ones again itself, holding the partition's
// new records until then.
func recoverFailure(cl *kgo.Client, f *failure) error {
	return cl.RecoverProducePartition(f, nil)
}

// isRecoveryPending reports whether a recovery was refused because a promise
// of the failure has not returned yet.
func isRecoveryPending(err error) bool { return errors.Is(err, kgo.ErrRecoveryPending) }

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

// countsInTxn reports whether kgo counts a record that failed with err
// against its transaction (EndTransaction then refuses to commit). As kgo's
// failWith: a MaxBufferedPartitionRecords failure does not count, nor do the
// record that caused it (its error has the failure's own text: kgo's record
// error is not exported) and the records it rejects, none of them sent; a
// record that fails later for a cause of its own does.
func countsInTxn(err error) bool {
	f := failureOf(err)
	if f == nil || !errors.Is(f.Err, kgo.ErrMaxBuffered) {
		return true
	}
	return !isRejected(err) && err.Error() != f.Err.Error()
}

// isPossiblyWritten reports whether err says that its record may have been
// written although it failed.
func isPossiblyWritten(err error) bool { return errors.Is(err, kgo.ErrPossiblyWritten) }
