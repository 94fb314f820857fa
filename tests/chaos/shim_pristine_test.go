//go:build pristine

package chaos_test

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Stand-ins for shim_patched_test.go and korder_patched_test.go, for building
// the harness against pristine franz-go v1.22.3, which has no
// FailPartitionOnProduceFailure (and so no korder). Only the naive, option-off
// baseline can run there.

const failStopAvailable = false

// failure stands in for kgo.ErrProducePartitionFailed, which no record
// carries here.
type failure struct{ Partition int32 }

func failStopOpts(any) []kgo.Opt { return nil }

func recoverFailure(*kgo.Client, *failure) error { return nil }

func isRecoveryPending(error) bool { return false }

func failureOf(error) *failure { return nil }

func isRejected(error) bool { return false }

func newOrderedProducer(runConfig, []kgo.Opt) (orderedProducer, *kgo.Client, error) {
	return nil, nil, errors.New("korder needs the patched franz-go")
}

func korderOutcome(error) string { return "" }

func korderStats(orderedProducer) string { return "" }

func isPossiblyWritten(error) bool { return false }

func countsInTxn(error) bool { return true }
