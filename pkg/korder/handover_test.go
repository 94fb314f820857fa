package korder_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// Produce allocates nothing while nothing fails: kgo gets the caller's
// promise, and hands a failed record over to the Producer with it.
func TestProduceAllocatesNothing(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, topic), kfake.BlackholeProduce())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := newProducer(t, c, []kgo.Opt{kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))})
	ctx := testCtx(t)
	promise := func(*kgo.Record, error) {}
	rs := make([]*kgo.Record, 2001)
	for i := range rs {
		rs[i] = &kgo.Record{Topic: topic, Key: []byte{byte(i)}, Value: []byte("v")}
	}
	i := 0
	// Whole allocations per call: kgo's other goroutines allocate a little.
	if n := testing.AllocsPerRun(2000, func() { p.Produce(ctx, rs[i], promise); i++ }); n >= 1 {
		t.Errorf("%v allocations per Produce, expected none", n)
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

type ctxKey struct{}

// A record that fails and is produced again reaches its promise with its own
// Context: the one it was produced with, or ctx if it had none (as kgo sets
// it), whether it is written or not.
func TestRecordContextKept(t *testing.T) {
	base := testCtx(t)
	ctx := context.WithValue(base, ctxKey{}, "Produce")
	own := context.WithValue(base, ctxKey{}, "own")
	for _, stop := range []bool{false, true} {
		c := newCluster(t, 1)
		count := 1
		if stop {
			count = -1
		}
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidRecord, Count: count})
		p := newProducer(t, c, nil, korder.WithPolicies(korder.Retry(2, time.Millisecond), korder.Stop()))
		ps := newPromises()
		a, b := rec(0, "k", 0), rec(0, "k", 1)
		b.Context = own
		p.Produce(ctx, a, ps.fn())
		p.Produce(ctx, b, ps.fn())
		ps.wait(base, t)
		errs := ps.check(t)
		for r, want := range map[*kgo.Record]context.Context{a: ctx, b: own} {
			if r.Context != want {
				t.Errorf("stop %v: %s reached its promise with Context %v, want %v", stop, r.Value, r.Context, want)
			}
			if err := errs[r]; (err != nil) != stop || stop && !errors.Is(err, korder.ErrStopped) {
				t.Errorf("stop %v: %s: %v", stop, r.Value, err)
			}
		}
	}
}

// A record produced through Client() that fails with its partition is the
// Producer's: kgo hands every such record over, and it is produced again.
func TestClientRecordTakenOver(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: 1})
	p := newProducer(t, c, []kgo.Opt{kgo.RecordRetries(0)}, korder.WithPolicies(korder.Retry(2, time.Millisecond)))
	res := p.Client().ProduceSync(ctx, rec(0, "k", 0))
	if err := res.FirstErr(); err != nil {
		t.Fatalf("a record produced through Client(): %v", err)
	}
	if s := p.Stats(); s.Failures != 1 || s.Retries != 1 {
		t.Errorf("stats %+v, want a failure and a retry", s)
	}
	expectLog(ctx, t, c, topic, 0, []string{"k-0"})
}

// wrapsContext replaces a buffered record's Context with a child, as a
// tracing hook (kotel) does.
type wrapsContext struct{}

type wrapKey struct{}

func (wrapsContext) OnProduceRecordBuffered(r *kgo.Record) {
	r.Context = context.WithValue(r.Context, wrapKey{}, true)
}

// A produce hook that wraps a record's Context does not hide the Producer's
// own records from it: records with and without a Context of their own fail
// twice (the second time in their round) and are written in order, each
// promise called once.
func TestHookWrappingRecordContext(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	p := newProducer(t, c, []kgo.Opt{kgo.WithHooks(wrapsContext{})}, korder.WithPolicies(korder.Retry(1000, 10*time.Millisecond)))
	if err := produceSync(ctx, p, rec(0, "w", 0)); err != nil { // the topic is known
		t.Fatal(err)
	}
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: 2})
	ps := newPromises()
	var want []string
	for i := range 6 {
		r := rec(0, "k", i)
		if i%2 == 1 {
			r.Context = ctx // the Producer's own record
		}
		want = append(want, string(r.Value))
		p.Produce(ctx, r, ps.fn())
	}
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil {
			t.Errorf("%s: %v", r.Value, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	expectLog(ctx, t, c, topic, 0, append([]string{"w-0"}, want...))
}
