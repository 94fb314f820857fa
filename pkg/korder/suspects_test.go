package korder

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// internalProducer returns a context bounded to a minute, and a Producer with
// opts over a kfake cluster with topic "t" of 2 partitions.
func internalProducer(t *testing.T, opts ...Opt) (context.Context, *Producer, *kfake.Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	p, err := NewProducer([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return ctx, p, c
}

// The queue is in Produce order (record numbers), kgo's batches in the
// order records were buffered: a record of another goroutine, numbered
// before a failed record but buffered after the failure, is rejected and
// sits before or between the failed records. The suspects run from the
// front through the last failed record, and the policies decide on the
// first failed one, never on a record that was only rejected. Before, the
// suspects stopped at the first rejected record (Isolate took the failed
// record before it for a lone culprit: TestMatrixMidStream, about once in
// 100 -race runs), the policies decided on the front record (DeadLetter
// diverted a rejected record; Retry read a rejection, which never wraps
// ErrPossiblyWritten, and produced possibly written records again), and a
// round that un-failed the partition counted only its own records, not
// those produced after it that failed with it.
func TestSuspectsAcrossGoroutines(t *testing.T) {
	_, p, _ := internalProducer(t, WithPolicies(Retry(3, 0), Stop()))
	tp := &topic{p: p, name: "t", parts: map[int32]*partition{}}
	pt := tp.partitionLocked(0)
	failed := fmt.Errorf("%w: %w", kgo.ErrPossiblyWritten, kerr.RequestTimedOut)
	rejected := &kgo.ErrProducePartitionFailed{Topic: "t", Partition: 0, Err: kerr.RequestTimedOut}
	pds := map[uint64]*pending{}
	fill := func(recs ...any) { // seq, error (rejected: the failure itself), round, ...
		pt.q = queue{}
		for i := 0; i < len(recs); i += 3 {
			err := recs[i+1].(error)
			pd := &pending{seq: uint64(recs[i].(int)), r: &kgo.Record{Topic: "t"}, err: err, rejected: err == error(rejected), round: uint64(recs[i+2].(int))}
			pds[pd.seq] = pd
			pt.q.insert(pd)
		}
	}
	check := func(what string, wantN int, wantFirst uint64) {
		t.Helper()
		n, first, wait := pt.suspectsLocked()
		if n != wantN || first != pds[wantFirst] || wait {
			t.Fatalf("%s: %d suspects from seq %d (wait %v), expected %d from seq %d", what, n, first.seq, wait, wantN, wantFirst)
		}
	}
	pt.mu.Lock()
	defer pt.mu.Unlock()

	fill(5, rejected, 0, 10, failed, 0, 20, rejected, 0, 30, failed, 0, 40, rejected, 0)
	check("first failure", 4, 10)
	if a := p.decide(&call{pd: pds[10], suspects: 4, env: pt}); a.kind == actProduce {
		t.Fatalf("Retry produces possibly written records again: %+v", a)
	}

	// A round (2) that kept the partition failed took 10 and 30; 20,
	// rejected meanwhile, went back between them.
	fill(10, failed, 2, 20, rejected, 0, 30, failed, 2, 40, rejected, 0)
	pt.round, pt.suspectRd, pt.suspectHi = 2, 2, 30
	check("failed round", 3, 10)
	// Isolate wrote 10 and 20, and settled 30: no suspect is left, and
	// the rejected record is not one.
	fill(20, rejected, 0, 40, rejected, 0)
	if n, _, _ := pt.suspectsLocked(); n != 0 {
		t.Fatalf("after the culprit: %d suspects, expected none", n)
	}

	// A round (3) that un-failed the partition failed with 50, produced
	// after it, in its batch; 60 was rejected.
	// Its last record, 35, is written: the round ends.
	fill(10, failed, 3, 30, failed, 3, 50, failed, 0, 60, rejected, 0)
	last := &kgo.Record{Topic: "t"}
	pt.inRound = map[*kgo.Record]*pending{last: {seq: 35, r: last, promise: func(*kgo.Record, error) {}, round: 3}}
	pt.round, pt.roundKept, pt.failedRd, pt.roundEnd = 3, false, true, make(chan struct{})
	pt.mu.Unlock()
	pt.roundPromise(last, nil)
	pt.mu.Lock()
	check("a round that un-failed the partition", 3, 10)
}
