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

// failStopOpts enables FailPartitionOnProduceFailure and registers h, which
// implements kgo.HookProducePartitionFailed.
func failStopOpts(h any) []kgo.Opt {
	return []kgo.Opt{kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(h)}
}

func recoverPartitions(cl *kgo.Client, partitions map[string][]int32) {
	cl.RecoverProducePartitions(partitions)
}

func failedPartitions(cl *kgo.Client) map[string][]int32 { return cl.FailedProducePartitions() }

// isPartitionFailed reports whether err is a rejection by a failed partition
// or topic.
func isPartitionFailed(err error) bool { return errors.Is(err, kgo.ErrProducePartitionFailed) }

// Compile-time check that the hook type implements the patched hook.
var _ kgo.HookProducePartitionFailed = (*failHook)(nil)

// isPossiblyWritten reports whether err says that its record may have been
// written although it failed.
func isPossiblyWritten(err error) bool { return errors.Is(err, kgo.ErrPossiblyWritten) }
