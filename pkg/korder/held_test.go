package korder_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// holdPartition0 makes partition 0 recover until release is called: f-0's
// first produce fails (retryable, but RecordRetries(0)), and the recovery's
// produce of f-0 is held by partition 0's leader. It returns once partition
// 0 holds.
func holdPartition0(ctx context.Context, t *testing.T, c *kfake.Cluster, p *korder.Producer, ps *promises) (release func()) {
	t.Helper()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: 1})
	held, release := holdProduceContaining(t, c, "f-0", 2)
	p.Produce(ctx, rec(0, "f", 0), ps.fn())
	waitClosed(ctx, t, held, "the recovery's produce")
	return release
}

// With the default settings, a partition that holds more records than the
// old MaxHeld default (10000) does not block the producing goroutine: the
// records it produces to another partition meanwhile are written while
// partition 0 still holds.
func TestHeldDefaultsDoNotBlockHealthyPartitions(t *testing.T) {
	ctx := testCtx(t)
	c := twoBrokerCluster(t)                                // partitions 0 and 1 have different leaders
	p := newProducer(t, c, []kgo.Opt{kgo.RecordRetries(0)}) // default policies and bounds
	ps := newPromises()
	release := holdPartition0(ctx, t, c, p, ps)

	// A Produce that blocks gives up after 2s: the test then fails
	// instead of hanging.
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	exp0, healthy := []string{"f-0"}, newPromises()
	var exp1 []string
	for i := range 10500 {
		r := rec(0, "k", i)
		p.Produce(short, r, ps.fn())
		exp0 = append(exp0, string(r.Value))
		if i%100 == 99 {
			r := rec(1, "h", i)
			p.Produce(ctx, r, healthy.fn())
			exp1 = append(exp1, string(r.Value))
		}
	}
	healthy.wait(ctx, t) // partition 0 still holds
	if s := p.Stats(); s.Held != 10500 || s.HeldBytes == 0 {
		t.Errorf("stats %+v: expected 10500 records held", s)
	}
	for r, err := range healthy.check(t) {
		if err != nil {
			t.Errorf("healthy record %s: %v", r.Value, err)
		}
	}
	release()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil {
			t.Fatalf("record %s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp0)
	expectLog(ctx, t, c, topic, 1, exp1)
	if s := p.Stats(); s.Held != 0 || s.HeldBytes != 0 {
		t.Errorf("stats %+v: expected nothing held", s)
	}
}

// MaxHeldBytes bounds the bytes a topic holds; with RejectWhenHeldFull a
// record that does not fit fails at once with ErrHeldFull, and without it
// Produce blocks until its context is done.
func TestMaxHeldBytes(t *testing.T) {
	for _, reject := range []bool{true, false} {
		t.Run(map[bool]string{true: "reject", false: "block"}[reject], func(t *testing.T) {
			ctx := testCtx(t)
			c := twoBrokerCluster(t) // partitions 0 and 1 have different leaders
			opts := []korder.Opt{korder.MaxHeldBytes(1000)}
			if reject {
				opts = append(opts, korder.RejectWhenHeldFull())
			}
			p := newProducer(t, c, []kgo.Opt{kgo.RecordRetries(0)}, opts...)
			ps := newPromises()
			release := holdPartition0(ctx, t, c, p, ps)

			hundred := func(i int) *kgo.Record { // 100 bytes: key 1, value 99
				r := rec(0, "k", i)
				r.Value = append(r.Value, strings.Repeat("x", 99-len(r.Value))...)
				return r
			}
			exp := []string{"f-0"}
			for i := range 10 {
				r := hundred(i)
				p.Produce(ctx, r, ps.fn())
				exp = append(exp, string(r.Value))
			}
			if s := p.Stats(); s.Held != 10 || s.HeldBytes != 1000 {
				t.Fatalf("stats %+v: expected 10 records, 1000 bytes held", s)
			}
			full := hundred(10)
			produceCtx := ctx
			if !reject {
				short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				produceCtx = short
			}
			start := time.Now()
			err := produceSync(produceCtx, p, full)
			if reject {
				if !errors.Is(err, korder.ErrHeldFull) || time.Since(start) > time.Second {
					t.Fatalf("record that does not fit got %v after %v, expected ErrHeldFull at once", err, time.Since(start))
				}
				if s := p.Stats(); s.HeldFull != 1 {
					t.Errorf("stats %+v: expected 1 held-full record", s)
				}
			} else if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("record that does not fit got %v, expected its context's error", err)
			}
			// Partition 1 is not held, and its records count for nothing.
			if err := produceSync(ctx, p, rec(1, "h", 0)); err != nil {
				t.Fatal(err)
			}
			release()
			ps.wait(ctx, t)
			for r, err := range ps.check(t) {
				if err != nil {
					t.Errorf("record %s: %v", r.Value, err)
				}
			}
			if err := produceSync(ctx, p, hundred(11)); err != nil {
				t.Fatal(err)
			}
			expectLog(ctx, t, c, topic, 0, append(exp, string(hundred(11).Value)))
			if s := p.Stats(); s.HeldBytes != 0 {
				t.Errorf("stats %+v: expected nothing held", s)
			}
		})
	}
}

func TestMaxHeldBytesValidates(t *testing.T) {
	if _, err := korder.NewProducer([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, korder.MaxHeldBytes(0)); err == nil {
		t.Error("NewProducer accepted MaxHeldBytes(0)")
	}
}
