//go:build !pristine

package chaos_test

import (
	"errors"
	"math"
	"strings"

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

// recoverPartitions recovers partitions whose every record the harness has
// seen promised (it waits for that), with no records: it produces the failed
// ones again itself, holding the partition's new records until then.
func recoverPartitions(cl *kgo.Client, partitions map[string][]int32) {
	for topic, ps := range partitions {
		for _, p := range ps {
			cl.RecoverProducePartition(topic, p, math.MaxInt, false, nil)
		}
	}
}

// failedPartitions probes which of topic's n partitions (and the topic, -1)
// are failed in kgo: a recovery with seen -1 is refused, changing nothing,
// exactly when the partition is failed.
func failedPartitions(cl *kgo.Client, topic string, n int) map[string][]int32 {
	var failed []int32
	for p := int32(-1); p < int32(n); p++ {
		if err := cl.RecoverProducePartition(topic, p, -1, false, nil); err != nil && strings.Contains(err.Error(), "not seen") {
			failed = append(failed, p)
		}
	}
	if failed == nil {
		return nil
	}
	return map[string][]int32{topic: failed}
}

// isPartitionFailed reports whether err is a rejection by a failed partition
// or topic.
func isPartitionFailed(err error) bool { return errors.Is(err, kgo.ErrProducePartitionFailed) }

// Compile-time check that the hook type implements the patched hook.
var _ kgo.HookProducePartitionFailed = (*failHook)(nil)

// isPossiblyWritten reports whether err says that its record may have been
// written although it failed.
func isPossiblyWritten(err error) bool { return errors.Is(err, kgo.ErrPossiblyWritten) }
