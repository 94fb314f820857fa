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

// failStopOpts enables FailPartitionOnProduceFailure and, unless h is nil,
// registers h, which implements kgo.HookProducePartitionFailed.
func failStopOpts(h any) []kgo.Opt {
	if h == nil {
		return []kgo.Opt{kgo.FailPartitionOnProduceFailure()}
	}
	return []kgo.Opt{kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(h)}
}

// recoverPartition is kgo's RecoverProducePartition, un-failing the
// partition (keepFailed false).
func recoverPartition(cl *kgo.Client, topic string, partition int32, seen int, promise func(*kgo.Record, error), rs ...*kgo.Record) error {
	return cl.RecoverProducePartition(topic, partition, seen, false, promise, rs...)
}

// isPartitionFailed reports whether err is a rejection by a failed partition
// or topic.
func isPartitionFailed(err error) bool {
	return errors.Is(err, kgo.ErrProducePartitionFailed)
}
