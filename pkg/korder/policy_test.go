package korder_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// Issue 34's policy bugs, each with the test that failed first.

// holdFirstProduce holds the first produce request until the returned func
// is called, so that the records produced meanwhile batch up behind it.
func holdFirstProduce(c *kfake.Cluster) (release func()) {
	ch := make(chan struct{})
	var once, rel sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { c.SleepControl(func() { <-ch }) })
		return nil, nil, false
	})
	return func() { rel.Do(func() { close(ch) }) }
}

// Bug 3: with QuarantineKeys, records with the poison's key produced after
// it go to the dead-letter topic after it, both those in its own batch and
// those rejected and held while it failed; they were written to the topic
// once the poison was dead-lettered. No Isolate: DeadLetter narrows down.
func TestQuarantineHoldsLaterRecords(t *testing.T) {
	for _, mode := range []string{"same batch", "rejected"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 2)
			poison(c)
			hook, failed := failedHook()
			p := newProducer(t, c, []kgo.Opt{hook}, korder.WithPolicies(korder.DeadLetter(dlq).QuarantineKeys()))
			ps := newPromises()
			bad := &kgo.Record{Topic: topic, Partition: 0, Key: []byte("K"), Value: []byte("POISON")}
			later := []*kgo.Record{rec(0, "K", 1), rec(0, "other", 1), rec(0, "K", 2)}
			exp := []string{"other-1"}
			if mode == "same batch" {
				release := holdFirstProduce(c)
				p.Produce(ctx, rec(0, "w", 0), ps.fn())
				p.Produce(ctx, bad, ps.fn())
				for _, r := range later {
					p.Produce(ctx, r, ps.fn())
				}
				release()
				exp = []string{"w-0", "other-1"}
			} else {
				// The poison's failure comes back only once the
				// later records were rejected behind it.
				release := holdPromises(ctx, t, p, rec(1, "h", 0), ps.fn())
				p.Produce(ctx, bad, ps.fn())
				waitOn(ctx, t, failed, "the poison's failure")
				for _, r := range later {
					p.Produce(ctx, r, ps.fn())
				}
				close(release)
			}
			ps.wait(ctx, t)
			for r, err := range ps.check(t) {
				if wantDL := string(r.Key) == "K"; errors.Is(err, korder.ErrDeadLettered) != wantDL || !wantDL && err != nil {
					t.Errorf("%s: %v", r.Value, err)
				}
			}
			expectLog(ctx, t, c, topic, 0, exp)
			expectLog(ctx, t, c, dlq, 0, []string{"POISON", "K-1", "K-2"})
		})
	}
}

// Bug 4: an unkeyed record dead-lettered with QuarantineKeys quarantines
// nothing; it quarantined the empty key, and a record with Key []byte{} was
// diverted.
func TestUnkeyedDeadLetterQuarantinesNothing(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	p := newProducer(t, c, nil, korder.WithPolicies(korder.DeadLetter(dlq).QuarantineKeys()))
	if err := produceSync(ctx, p, &kgo.Record{Topic: topic, Value: []byte("POISON")}); !errors.Is(err, korder.ErrDeadLettered) {
		t.Fatalf("poison: got %v, want ErrDeadLettered", err)
	}
	if q, s := p.Quarantined(topic), p.Stats(); len(q) != 0 || s.Quarantined != 0 {
		t.Fatalf("quarantined %q (Stats.Quarantined %d), want none", q, s.Quarantined)
	}
	if err := produceSync(ctx, p, &kgo.Record{Topic: topic, Key: []byte{}, Value: []byte("empty")}); err != nil {
		t.Fatalf("a record with an empty key: %v", err)
	}
	expectLog(ctx, t, c, topic, 0, []string{"empty"})
}

// Bug 5: once a quarantined key's dead-letter copy failed, the key stays
// stopped until ReleaseQuarantine: K-2, produced once the dead-letter topic
// takes writes again, was dead-lettered after K-1 had failed with
// ErrStopped.
func TestStoppedKeyStaysStopped(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	p := newProducer(t, c, nil, korder.WithPolicies(korder.DeadLetter(dlq).QuarantineKeys()))
	if err := produceSync(ctx, p, &kgo.Record{Topic: topic, Key: []byte("K"), Value: []byte("POISON")}); !errors.Is(err, korder.ErrDeadLettered) {
		t.Fatalf("poison: got %v, want ErrDeadLettered", err)
	}
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: dlq, Err: kerr.MessageTooLarge, Count: -1})
	err := produceSync(ctx, p, rec(0, "K", 1))
	if !errors.Is(err, korder.ErrStopped) || !errors.Is(err, korder.ErrDeadLetterFailed) || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("K-1, its copy failing: got %v, want ErrStopped wrapping ErrDeadLetterFailed and MESSAGE_TOO_LARGE", err)
	}
	fault.Remove()
	// Wait until the dead-letter partition takes writes again (the
	// Producer recovers it once the failed copy's promise returned):
	// nothing tells when, so probe it.
	for {
		err := p.Client().ProduceSync(ctx, &kgo.Record{Topic: dlq, Value: []byte("probe")}).FirstErr()
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the dead-letter partition did not recover: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := produceSync(ctx, p, rec(0, "K", 2)); !errors.Is(err, korder.ErrStopped) {
		t.Fatalf("K-2, after K-1 was stopped: got %v, want ErrStopped", err)
	}
	if err := produceSync(ctx, p, rec(0, "other", 0)); err != nil {
		t.Fatalf("another key: %v", err)
	}
	p.ReleaseQuarantine(topic, []byte("K"))
	if err := produceSync(ctx, p, rec(0, "K", 3)); err != nil {
		t.Fatalf("K-3, after ReleaseQuarantine: %v", err)
	}
	expectLog(ctx, t, c, topic, 0, []string{"other-0", "K-3"})
	expectLog(ctx, t, c, dlq, 0, []string{"POISON", "probe"})
}

// Bug 8: a dead-letter copy that cannot be written passes the record on,
// its error saying so (wrapping ErrDeadLetterFailed, the dead-letter
// topic's error and the cause); with no policy after DeadLetter it is
// dropped, and the partition goes on. It fell through to an implicit Stop,
// with an error that did not say the copy failed.
func TestDeadLetterFailureIsNotAStop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		policies []korder.Policy
		want     error
	}{
		{"DeadLetter", []korder.Policy{korder.DeadLetter(dlq)}, korder.ErrDropped},
		{"DeadLetter+Stop", []korder.Policy{korder.DeadLetter(dlq), korder.Stop()}, korder.ErrStopped},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 1)
			poison(c)
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: dlq, Err: kerr.MessageTooLarge, Count: -1})
			p := newProducer(t, c, nil, korder.WithPolicies(tc.policies...))
			err := produceSync(ctx, p, &kgo.Record{Topic: topic, Value: []byte("POISON")})
			for _, want := range []error{tc.want, korder.ErrDeadLetterFailed, kerr.MessageTooLarge, kerr.InvalidRecord} {
				if !errors.Is(err, want) {
					t.Errorf("poison: got %v, want it to wrap %v", err, want)
				}
			}
			if !strings.Contains(fmt.Sprint(err), "dead-letter") {
				t.Errorf("poison: %v does not say the dead-letter write failed", err)
			}
			err = produceSync(ctx, p, rec(0, "a", 0))
			if stops := tc.want == korder.ErrStopped; errors.Is(err, korder.ErrStopped) != stops || !stops && err != nil {
				t.Fatalf("the next record: got %v (the partition stops only with Stop)", err)
			}
		})
	}
}

// Bug 9: a nil record and a nil Opt do not panic; the Producer does not
// produce to a dead-letter topic of its policies.
func TestBadInput(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	p := newProducer(t, c, nil, nil, korder.WithPolicies(korder.DeadLetter(dlq)))
	if err := produceSync(ctx, p, nil); err == nil {
		t.Fatal("a nil record: no error")
	}
	if err := produceSync(ctx, p, &kgo.Record{Topic: dlq, Value: []byte("x")}); err == nil || !strings.Contains(err.Error(), "dead-letter topic") {
		t.Fatalf("a record to the dead-letter topic: got %v, want an error", err)
	}
	if err := produceSync(ctx, p, rec(0, "a", 0)); err != nil {
		t.Fatal(err)
	}
	expectLog(ctx, t, c, dlq, 0, nil)
	if _, err := korder.NewProducer([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.DefaultProduceTopic(dlq)}, korder.WithPolicies(korder.DeadLetter(dlq))); err == nil {
		t.Fatal("NewProducer accepted the dead-letter topic as the default produce topic")
	}
}

// Bug 7: DeadLetter without Isolate diverts only the poison record, not
// the healthy records of its batches: with Retry(3, 10ms) then DeadLetter,
// one poison record among 300 over three partitions, everything else is
// written in order. It dead-lettered the first record of each failed batch.
func TestDeadLetterOnlyTheCulprit(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 3)
	poison(c)
	p := newProducer(t, c, []kgo.Opt{kgo.ProducerLinger(5 * time.Millisecond)},
		korder.WithPolicies(korder.Retry(3, 10*time.Millisecond), korder.DeadLetter(dlq)))
	ps := newPromises()
	exp := make([][]string, 3)
	var bad *kgo.Record
	for i := range 300 {
		part := int32(i % 3)
		r := rec(part, "k", i)
		if i == 151 {
			r.Value, bad = []byte("POISON"), r
		} else {
			exp[part] = append(exp[part], string(r.Value))
		}
		p.Produce(ctx, r, ps.fn())
	}
	ps.wait(ctx, t)
	checkPoisonDeadLettered(t, ps, bad)
	for part := range int32(3) {
		expectLog(ctx, t, c, topic, part, exp[part])
	}
	expectLog(ctx, t, c, dlq, 0, []string{"POISON"})
	if s := p.Stats(); s.DeadLettered != 1 {
		t.Errorf("stats %+v: want 1 dead-lettered", s)
	}
}

// The defaults, and what a partition's cause settles: the default
// policies (Retry(3, 100ms), Drop) drop only a poison record, and the
// records of a batch that fails for its partition once the retries run out
// (as kgo fails them); DeadLetter diverts those. The records behind are
// written in order, and nothing stops. The default stopped the partition.
func TestPolicyFailedBatch(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []korder.Opt
		want error
		dlq  bool
	}{
		{"defaults", nil, korder.ErrDropped, false},
		{"Retry+DeadLetter", []korder.Opt{korder.WithPolicies(korder.Retry(3, 0), korder.DeadLetter(dlq))}, korder.ErrDeadLettered, true},
	} {
		t.Run(tc.name+"/poison", func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 1)
			poison(c)
			p := newProducer(t, c, nil, tc.opts...)
			ps := newPromises()
			release := holdFirstProduce(c)
			exp := producePoisoned(ctx, p, ps, 8, 3)
			release()
			ps.wait(ctx, t)
			for r, err := range ps.check(t) {
				if string(r.Value) == "POISON" != (errors.Is(err, tc.want) && errors.Is(err, kerr.InvalidRecord)) || string(r.Value) != "POISON" && err != nil {
					t.Errorf("%s: %v", r.Value, err)
				}
			}
			expectLog(ctx, t, c, topic, 0, append(exp, produceAfter(ctx, t, p)))
		})
		t.Run(tc.name+"/partition", func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 1)
			// The first request and the three retries fail.
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: 4})
			hook, failed := failedHook()
			p := newProducer(t, c, []kgo.Opt{hook, kgo.RecordRetries(0), kgo.ProducerLinger(20 * time.Millisecond)}, tc.opts...)
			ps := newPromises()
			var as []*kgo.Record
			for i := range 3 {
				r := rec(0, "a", i)
				as = append(as, r)
				p.Produce(ctx, r, ps.fn())
			}
			waitOn(ctx, t, failed, "the batch's failure")
			var exp []string
			for i := range 3 {
				r := rec(0, "b", i)
				exp = append(exp, string(r.Value))
				p.Produce(ctx, r, ps.fn())
			}
			ps.wait(ctx, t)
			errs := ps.check(t)
			// The failed batch's records are settled; an a record that a
			// busy machine put in a later batch is written, before the b's.
			var settled, written []string
			for _, r := range as {
				switch err := errs[r]; {
				case errors.Is(err, tc.want) && errors.Is(err, kerr.NotEnoughReplicas) && len(written) == 0:
					settled = append(settled, string(r.Value))
				case err == nil && len(settled) > 0:
					written = append(written, string(r.Value))
				default:
					t.Errorf("%s: %v", r.Value, err)
				}
			}
			for r, err := range errs {
				if string(r.Key) == "b" && err != nil {
					t.Errorf("%s: %v", r.Value, err)
				}
			}
			expectLog(ctx, t, c, topic, 0, append(append(written, exp...), produceAfter(ctx, t, p)))
			if tc.dlq {
				expectLog(ctx, t, c, dlq, 0, settled)
			}
		})
	}
}

// produceAfter produces a record to partition 0 and returns its value: it
// must be written (the partition is not stopped).
func produceAfter(ctx context.Context, t *testing.T, p *korder.Producer) string {
	t.Helper()
	r := rec(0, "z", 0)
	if err := produceSync(ctx, p, r); err != nil {
		t.Fatalf("a record after the failure: %v", err)
	}
	return string(r.Value)
}

// Item 10: MaxQuarantinedKeys' room is checked and taken in one step: two
// poison records with different keys, dead-lettered at the same time with
// room for one key, do not both go to the dead-letter topic leaving one's
// key unquarantined. The dead-letter writes are held until both copies are
// buffered, or one poison record is settled (the fix: the other one finds
// the quarantine full and is dropped).
func TestQuarantineRoomIsReserved(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	poison(c)
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	defer open()
	dlqID := c.TopicInfo(dlq).TopicID
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == dlq || tp.TopicID == dlqID {
				c.SleepControl(func() { <-release })
			}
		}
		return nil, nil, false
	})
	var copies atomic.Int32
	buffered := bufferedHook(func(r *kgo.Record) {
		if r.Topic == dlq && copies.Add(1) == 2 {
			open()
		}
	})
	// A linger puts both poison records in one request.
	p := newProducer(t, c, []kgo.Opt{kgo.WithHooks(buffered), kgo.ProducerLinger(20 * time.Millisecond)}, korder.MaxQuarantinedKeys(1),
		korder.WithPolicies(korder.DeadLetter(dlq).QuarantineKeys(), korder.Drop()))
	ps := newPromises()
	for part, k := range []string{"A", "B"} {
		fn := ps.fn()
		p.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(part), Key: []byte(k), Value: []byte("POISON")}, func(r *kgo.Record, err error) {
			fn(r, err)
			open()
		})
	}
	ps.wait(ctx, t)
	quarantined := map[string]bool{}
	for _, k := range p.Quarantined(topic) {
		quarantined[string(k)] = true
	}
	diverted := 0
	for r, err := range ps.check(t) {
		switch {
		case errors.Is(err, korder.ErrDeadLettered):
			diverted++
			if !quarantined[string(r.Key)] {
				t.Errorf("%s was dead-lettered, but its key is not quarantined (quarantined: %v)", r.Key, quarantined)
			}
		case !errors.Is(err, korder.ErrDropped) || !errors.Is(err, korder.ErrDeadLetterFailed):
			t.Errorf("%s: got %v, want ErrDeadLettered, or ErrDropped for a full quarantine", r.Key, err)
		}
	}
	if diverted != 1 || len(quarantined) != 1 {
		t.Errorf("%d dead-lettered, %d keys quarantined: want 1 of each", diverted, len(quarantined))
	}
}

// A policy that settles the last record kept recovers the partition: the
// worker made no-record recoveries that kept it failed (it still counted
// the settled record's policy as a half's), spinning on a core, until a
// later record came back. Seen in the Producer keeping the topic.
func TestSettlingTheLastRecordRecovers(t *testing.T) {
	ctx, cancel := context.WithTimeout(testCtx(t), 10*time.Second)
	defer cancel()
	c := newCluster(t, 1)
	poison(c)
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Drop()))
	if err := produceSync(ctx, p, &kgo.Record{Topic: topic, Value: []byte("POISON")}); !errors.Is(err, korder.ErrDropped) {
		t.Fatalf("got %v, want ErrDropped", err)
	}
	for korder.Topics(p) != 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("the partition is kept failed after its last record was dropped: %+v", p.Stats())
		case <-time.After(time.Millisecond):
		}
	}
}
