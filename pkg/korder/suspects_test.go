package korder

import (
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The queue is in Produce order (record numbers), kgo's batches in the
// order records were buffered: a record of another goroutine, numbered
// before a failed record but buffered after the failure (so rejected), sits
// between the failed records. The suspects run from the front through the
// last failed record; counting only the failed records at the front made
// the first of them a lone culprit, which Isolate then diverted (seen in
// TestMatrixMidStream under -race, about once in 100 runs).
func TestSuspectsSpanInterleavedRecords(t *testing.T) {
	_, p, _ := ringProducer(t, nil)
	tp := &topic{p: p, name: "t", parts: map[int32]*partition{}}
	pt := tp.partitionLocked(0)
	failed := errors.New("INVALID_RECORD")
	rejected := fmt.Errorf("%w: %w", kgo.ErrProducePartitionFailed, failed)
	add := func(seq uint64, err error, round uint64) {
		pt.q.insert(&pending{seq: seq, r: &kgo.Record{Topic: "t"}, err: err, round: round})
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()

	// The first failure: 10 and 30 failed, 20 was rejected, 40 too.
	add(10, failed, 0)
	add(20, rejected, 0)
	add(30, failed, 0)
	add(40, rejected, 0)
	if n, wait := pt.suspectsLocked(); n != 3 || wait {
		t.Fatalf("first failure: %d suspects (wait %v), expected 3: 10, 20 and 30", n, wait)
	}

	// A failed round (2) took 10 and 30; 20, rejected meanwhile, went
	// back between them.
	pt.q = queue{}
	add(10, failed, 2)
	add(20, rejected, 0)
	add(30, failed, 2)
	add(40, rejected, 0)
	pt.round, pt.suspectRd, pt.suspectHi = 2, 2, 30
	if n, _ := pt.suspectsLocked(); n != 3 {
		t.Fatalf("failed round: %d suspects, expected 3: 10, 20 and 30", n)
	}
	// Isolate wrote 10 and 20, and settled 30: no suspect is left, and
	// the rejected record is not one.
	pt.q.take(0, 3)
	add(20, rejected, 0)
	if n, _ := pt.suspectsLocked(); n != 0 {
		t.Fatalf("after the culprit: %d suspects, expected none", n)
	}
}
