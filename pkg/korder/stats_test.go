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

// Stats.Stopped counts every record whose promise got ErrStopped: the
// records Stop failed (failed, rejected and held ones) and the records
// produced while the topic was stopped.
func TestStoppedCountsEveryRecord(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidRecord, Count: -1})
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Retry(3, 100*time.Millisecond), korder.Stop()))

	ps := newPromises()
	first := rec(0, "k", 0)
	firstDone, firstc := ps.fn(), make(chan struct{})
	p.Produce(ctx, first, func(r *kgo.Record, err error) { firstDone(r, err); close(firstc) })
	// Failed with the first record, or held during its recovery.
	for i := 1; i < 20; i++ {
		p.Produce(ctx, rec(0, "k", i), ps.fn())
	}
	waitClosed(ctx, t, firstc, "the first record's promise")
	// Produced while stopped.
	for i := 20; i < 51; i++ {
		p.Produce(ctx, rec(0, "k", i), ps.fn())
	}
	ps.wait(ctx, t)
	stopped := 0
	for r, err := range ps.check(t) {
		if !errors.Is(err, korder.ErrStopped) {
			t.Errorf("record %s: %v, expected ErrStopped", r.Value, err)
			continue
		}
		stopped++
	}
	if s := p.Stats(); s.Stopped != int64(stopped) || stopped != 51 {
		t.Fatalf("Stats.Stopped %d, but %d promises got ErrStopped (of 51)", s.Stopped, stopped)
	}
}
