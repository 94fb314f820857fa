//go:build !pristine

package failstop_test

import (
	"runtime"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestRejectedRecordsPromisedTogether: records a failed partition rejects
// while the promise goroutine is busy cost no allocation each (each was
// pushed to the promise ring alone, in a slice of its own), and are still
// promised in order, each with the failure, which is recovered once they
// returned.
func TestRejectedRecordsPromisedTogether(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	h := newFailHook()
	cl := newClient(t, c, append(failStopOpts(h), kgo.RecordPartitioner(kgo.ManualPartitioner()))...)
	produceOK(ctx, t, cl, rec(topic, 0, 0)) // the client knows the topic

	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: 1})
	await(ctx, t, produceAsync(ctx, cl, rec(topic, 0, 1)))
	f := h.wait(ctx, t)

	// Seq 2's promise keeps the promise goroutine busy.
	blocked, release := make(chan struct{}), make(chan struct{})
	cl.Produce(ctx, rec(topic, 0, 2), func(*kgo.Record, error) { close(blocked); <-release })
	select {
	case <-blocked:
	case <-ctx.Done():
		t.Fatal("seq 2 was not rejected")
	}
	const n = 5000
	rs := recs(topic, 0, 3, 3+n)
	got := make(chan result, n)
	promise := func(r *kgo.Record, err error) { got <- result{r, err} }
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, r := range rs {
		cl.Produce(ctx, r, promise)
	}
	runtime.ReadMemStats(&after)
	close(release)
	if allocs := after.Mallocs - before.Mallocs; allocs > n/10 {
		t.Errorf("rejecting %d records allocated %d times", n, allocs)
	}
	for i, want := range rs {
		select {
		case r := <-got:
			if r.r != want || failureOf(r.err) != f {
				t.Fatalf("promise %d: seq %s with %v, want seq %s rejected with the failure", i, r.r.Value, r.err, want.Value)
			}
		case <-ctx.Done():
			t.Fatalf("%d of %d rejected records promised", i, n)
		}
	}
	recoverOK(ctx, t, cl, f, rec(topic, 0, 1))
}
