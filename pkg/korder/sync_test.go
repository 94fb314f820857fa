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

// ProduceSync returns every record's result in the order given, as
// kgo.Client.ProduceSync does; with kgo.ManualFlushing it sends the records
// itself (kgo's drains their partitions).
func TestProduceSync(t *testing.T) {
	for _, manual := range []bool{false, true} {
		t.Run(map[bool]string{false: "linger", true: "manual flushing"}[manual], func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 2)
			kopts := []kgo.Opt{kgo.ProducerLinger(time.Minute)}
			if manual {
				kopts = []kgo.Opt{kgo.ManualFlushing()}
			}
			p := newProducer(t, c, kopts)
			rs := []*kgo.Record{rec(1, "b", 0), rec(0, "a", 0), rec(0, "a", 1), rec(1, "b", 1)}
			res := p.ProduceSync(ctx, rs...)
			if len(res) != len(rs) {
				t.Fatalf("%d results for %d records", len(res), len(rs))
			}
			for i, x := range res {
				if x.Record != rs[i] || x.Err != nil {
					t.Fatalf("result %d: record %s, err %v; expected record %s, no error", i, x.Record.Value, x.Err, rs[i].Value)
				}
			}
			if err := res.FirstErr(); err != nil {
				t.Fatal(err)
			}
			if res[0].Record.Offset != 0 || res[3].Record.Offset != 1 || res[2].Record.Offset != 1 {
				t.Fatalf("offsets %d %d %d %d", res[0].Record.Offset, res[1].Record.Offset, res[2].Record.Offset, res[3].Record.Offset)
			}
			expectLog(ctx, t, c, topic, 0, []string{"a-0", "a-1"})
		})
	}
}

// A record that ProduceSync cannot write carries the Producer's error; the
// others of the call are written.
func TestProduceSyncFailure(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: -1})
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Stop()))
	res := p.ProduceSync(ctx, rec(0, "a", 0), rec(1, "b", 0))
	if err := res[0].Err; !errors.Is(err, korder.ErrStopped) || !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("record on the failing partition got %v, expected ErrStopped wrapping INVALID_RECORD", err)
	}
	if err := res[1].Err; err != nil {
		t.Fatalf("record on the healthy partition got %v", err)
	}
	if res.FirstErr() != res[0].Err {
		t.Fatalf("FirstErr %v", res.FirstErr())
	}
	expectLog(ctx, t, c, topic, 1, []string{"b-0"})
}
