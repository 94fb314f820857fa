package korder_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// unbuffered closes a channel when a record with value v is unbuffered with
// an error.
type unbuffered struct {
	v  string
	ch chan struct{}
}

func (h *unbuffered) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil && string(r.Value) == h.v {
		select {
		case <-h.ch:
		default:
			close(h.ch)
		}
	}
}

// A stalled partition's buffered records fail after the records produced
// behind them were rejected: kgo.MaxBufferedPartitionRecords failed the
// partition before they failed, so kgo promises them last. They were produced
// first and must be written first. (Numbering records in the order they come
// back wrote them last.)
func TestStalledRecordsFailingLateKeepOrder(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	h := &unbuffered{v: "k-0", ch: make(chan struct{})}
	p := newProducer(t, c, []kgo.Opt{kgo.MaxBufferedPartitionRecords(2), kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RecordRetries(4), kgo.WithHooks(h)}, korder.WithPolicies(korder.Retry(1000, 10*time.Millisecond)))
	if err := produceSync(ctx, p, rec(0, "w", 0)); err != nil { // the topic is known
		t.Fatal(err)
	}
	stall := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: -1})
	defer stall.Remove()
	ps := newPromises()
	var want []string
	produce := func(from, to int) {
		for i := from; i < to; i++ {
			r := rec(0, "k", i)
			want = append(want, string(r.Value))
			p.Produce(ctx, r, ps.fn())
		}
	}
	produce(0, 2) // buffered, retried
	// Stalled (the bound applies) once kgo handled two answers to the
	// first batch: the fourth answer comes after that (see held_test.go).
	if err := stall.Wait(ctx, 4); err != nil {
		t.Fatal(err)
	}
	produce(2, 6) // past the bound: k-2 fails the partition, the rest are rejected
	select {      // k-0 and k-1 fail once their retries run out
	case <-h.ch:
	case <-ctx.Done():
		t.Fatal("the stalled records did not fail")
	}
	stall.Remove()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil {
			t.Errorf("%s: %v", r.Value, err)
		}
	}
	if err := p.Flush(ctx); err != nil && !errors.Is(err, ctx.Err()) {
		t.Fatal(err)
	}
	expectLog(ctx, t, c, topic, 0, append([]string{"w-0"}, want...))
}
