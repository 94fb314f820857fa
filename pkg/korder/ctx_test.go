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

// ctxPolicies are the policy sets the context tests run under: the
// defaults, and two that end with DeadLetter, which must not divert a
// record its application gave up on.
var ctxPolicies = []struct {
	name string
	opts []korder.Opt
}{
	{"defaults", nil},
	{"retry-deadletter", []korder.Opt{korder.WithPolicies(korder.Retry(3, 10*time.Millisecond), korder.DeadLetter(dlq))}},
	{"isolate-deadletter", []korder.Opt{korder.WithPolicies(korder.Isolate(), korder.DeadLetter(dlq))}},
}

// checkCanceledAlone checks that canceled got context.Canceled and nothing
// else, that every other record was written, and that the Producer stopped,
// diverted and dropped nothing.
func checkCanceledAlone(ctx context.Context, t *testing.T, c *kfake.Cluster, p *korder.Producer, ps *promises, canceled *kgo.Record, exp []string) {
	t.Helper()
	for r, err := range ps.check(t) {
		if r == canceled {
			if !errors.Is(err, context.Canceled) || errors.Is(err, korder.ErrStopped) || errors.Is(err, korder.ErrDeadLettered) {
				t.Errorf("record with the cancelled context got %v, expected context.Canceled alone", err)
			}
		} else if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp)
	expectLog(ctx, t, c, dlq, 0, nil)
	if s := p.Stats(); s.Stopped != 0 || s.DeadLettered != 0 || s.Dropped != 0 || s.Canceled != 1 {
		t.Errorf("stats %+v: expected 1 cancelled record and nothing stopped, dead-lettered or dropped", s)
	}
	// The topic is not stopped.
	if err := produceSync(ctx, p, rec(0, "z", 0)); err != nil {
		t.Fatalf("a record after the cancelled one got %v", err)
	}
}

// A record whose request-scoped context is cancelled right after Produce
// fails in kgo with its batch (kgo fails a batch whose first record's
// context is done), taking the live record B with it. The cancelled record
// is settled with its context's error, and takes no part in the policies;
// B, and C produced after, are written in order.
func TestCanceledProduceContext(t *testing.T) {
	for _, pol := range ctxPolicies {
		t.Run(pol.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 1)
			// A linger keeps A and B buffered in one batch until
			// after A's context is cancelled.
			p := newProducer(t, c, []kgo.Opt{kgo.ProducerLinger(50 * time.Millisecond)}, pol.opts...)
			if err := produceSync(ctx, p, rec(0, "w", 0)); err != nil {
				t.Fatal(err)
			}

			ps := newPromises()
			actx, cancel := context.WithCancel(ctx)
			a, b := rec(0, "a", 0), rec(0, "b", 0)
			aDone, adone := ps.fn(), make(chan struct{})
			p.Produce(actx, a, func(r *kgo.Record, err error) { aDone(r, err); close(adone) })
			cancel()
			p.Produce(ctx, b, ps.fn())
			waitClosed(ctx, t, adone, "A's promise")
			cr := rec(0, "c", 0)
			p.Produce(ctx, cr, ps.fn())
			ps.wait(ctx, t)
			checkCanceledAlone(ctx, t, c, p, ps, a, []string{"w-0", "b-0", "c-0"})
		})
	}
}

// A record whose context expires while it is held (its partition is
// recovering) is settled with its context's error when the hold ends, and
// the 20 records held after it, with live contexts, are written in order.
func TestCanceledWhileHeld(t *testing.T) {
	for _, pol := range ctxPolicies[:2] { // the failure is not per record: Isolate has nothing to do
		t.Run(pol.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 1)
			// F's first produce fails (retryable, but RecordRetries(0)),
			// and the recovery's produce of F is held by the broker, so
			// that the partition is recovering while H and the 20
			// records after it are produced.
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: 1})
			held, release := holdProduceContaining(t, c, "f-0", 2)
			p := newProducer(t, c, []kgo.Opt{kgo.RecordRetries(0)}, pol.opts...)

			ps := newPromises()
			f := rec(0, "f", 0)
			p.Produce(ctx, f, ps.fn())
			waitClosed(ctx, t, held, "the recovery's produce")

			hctx, cancel := context.WithCancel(ctx)
			h := rec(0, "h", 0)
			p.Produce(hctx, h, ps.fn()) // behind the recovery's round, in kgo
			cancel()
			exp := []string{"f-0"}
			for i := range 20 {
				r := rec(0, "l", i)
				p.Produce(ctx, r, ps.fn())
				exp = append(exp, string(r.Value))
			}
			release()
			ps.wait(ctx, t)
			checkCanceledAlone(ctx, t, c, p, ps, h, exp)
		})
	}
}

// A record whose context is cancelled while it waits in a batch that fails
// for another reason (a poison record after it), with records of live
// contexts around it. The cancelled record is settled alone, the
// poison record goes through the policies, and the rest is written in
// order.
func TestCanceledInFailedGroup(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	p := newProducer(t, c, []kgo.Opt{kgo.ProducerLinger(50 * time.Millisecond)}, korder.WithPolicies(korder.Isolate(), korder.DeadLetter(dlq)))
	if err := produceSync(ctx, p, rec(0, "w", 0)); err != nil {
		t.Fatal(err)
	}
	ps := newPromises()
	var exp []string
	var canceled, poisoned *kgo.Record
	bctx, cancel := context.WithCancel(ctx)
	for i := range 6 {
		r := rec(0, "k", i)
		pctx := ctx
		switch i {
		case 2:
			canceled, pctx = r, bctx
		case 4:
			r.Value = []byte("POISON")
			poisoned = r
		default:
			exp = append(exp, string(r.Value))
		}
		p.Produce(pctx, r, ps.fn())
	}
	cancel()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		switch r {
		case canceled:
			if !errors.Is(err, context.Canceled) || errors.Is(err, korder.ErrDeadLettered) {
				t.Errorf("cancelled record got %v", err)
			}
		case poisoned:
			if !errors.Is(err, korder.ErrDeadLettered) || !errors.Is(err, kerr.InvalidRecord) {
				t.Errorf("poison record got %v", err)
			}
		default:
			if err != nil {
				t.Errorf("record %s: %v", r.Value, err)
			}
		}
	}
	expectLog(ctx, t, c, topic, 0, append([]string{"w-0"}, exp...))
	expectLog(ctx, t, c, dlq, 0, []string{"POISON"})
	if s := p.Stats(); s.Canceled != 1 || s.DeadLettered != 1 {
		t.Errorf("stats %+v", s)
	}
}
