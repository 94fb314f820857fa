package korder_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// With kgo.ManualFlushing, nothing is sent without a flush: a recovery
// round, which waits for the records it produces again, flushes them.
func TestManualFlushingRecovers(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: 1})
	p := newProducer(t, c, []kgo.Opt{kgo.ManualFlushing(), kgo.RecordRetries(0)}, korder.WithPolicies(korder.Retry(3, time.Millisecond), korder.Stop()))
	ps := newPromises()
	var exp []string
	for i := range 5 {
		r := rec(0, "k", i)
		exp = append(exp, string(r.Value))
		p.Produce(ctx, r, ps.fn())
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp)
	if s := p.Stats(); s.Retries == 0 {
		t.Errorf("stats %+v: expected a retry", s)
	}
}
