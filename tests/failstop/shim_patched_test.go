//go:build !pristine

package failstop_test

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// This file wires the FailPartitionOnProduceFailure API, which only the
// patched franz-go has. shim_pristine_test.go provides no-op versions so that
// TestInvariantInvalidRecord compiles against pristine franz-go too
// (go test -tags pristine), where it must fail.

// failStopAvailable reports whether the fail-stop API is compiled in.
const failStopAvailable = true

// failStopOpts enables FailPartitionOnProduceFailure and registers h, which
// implements kgo.HookProducePartitionFailed.
func failStopOpts(h any) []kgo.Opt {
	return []kgo.Opt{kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(h)}
}

func failedPartitions(cl *kgo.Client) map[string][]int32 {
	return cl.FailedProducePartitions()
}

func recoverPartitions(cl *kgo.Client, partitions map[string][]int32) error {
	return cl.RecoverProducePartitions(partitions)
}

// isPartitionFailed reports whether err is a rejection by a failed partition
// or topic.
func isPartitionFailed(err error) bool {
	return errors.Is(err, kgo.ErrProducePartitionFailed)
}
