package korder_test

import (
	"context"
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// A record produced once its key is quarantined goes to the dead-letter
// topic after the key's records the partition still holds: those rejected
// behind the poison record, diverted once it is. It went there at once,
// ahead of them (here, produced from the poison record's promise, which runs
// when the quarantine has begun and before the held records are diverted).
//
// Released meanwhile, the key's records, kept or held, go to the topic, in
// order.
func TestQuarantineKeepsHeldRecordsFirst(t *testing.T) {
	for _, release := range []bool{false, true} {
		t.Run(map[bool]string{false: "quarantined", true: "released"}[release], func(t *testing.T) {
			testQuarantineKeepsHeldRecordsFirst(t, release)
		})
	}
}

func testQuarantineKeepsHeldRecordsFirst(t *testing.T, releaseKey bool) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	poison(c)
	hook, failed := failedHook()
	p := newProducer(t, c, []kgo.Opt{hook}, korder.WithPolicies(korder.Isolate(), korder.DeadLetter(dlq).QuarantineKeys()))
	ps := newPromises()
	// The poison's failure comes back only once the later records were
	// rejected behind it.
	release := holdPromises(ctx, t, p, rec(1, "h", 0), ps.fn())
	badDone, next := ps.fn(), ps.fn()
	p.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("K"), Value: []byte("POISON")}, func(r *kgo.Record, err error) {
		p.Produce(context.Background(), rec(0, "K", 3), next)
		if releaseKey {
			p.ReleaseQuarantine(topic, []byte("K"))
		}
		badDone(r, err)
	})
	waitOn(ctx, t, failed, "the poison's failure")
	for _, r := range []*kgo.Record{rec(0, "K", 1), rec(0, "other", 1), rec(0, "K", 2)} {
		p.Produce(ctx, r, ps.fn())
	}
	close(release)
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if wantDL := string(r.Key) == "K" && (!releaseKey || string(r.Value) == "POISON"); errors.Is(err, korder.ErrDeadLettered) != wantDL || !wantDL && err != nil {
			t.Errorf("%s: %v", r.Value, err)
		}
	}
	if releaseKey {
		expectLog(ctx, t, c, topic, 0, []string{"K-1", "other-1", "K-2", "K-3"})
		expectLog(ctx, t, c, dlq, 0, []string{"POISON"})
		return
	}
	expectLog(ctx, t, c, topic, 0, []string{"other-1"})
	expectLog(ctx, t, c, dlq, 0, []string{"POISON", "K-1", "K-2", "K-3"})
}
