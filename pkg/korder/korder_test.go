package korder_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"strconv"
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

const topic, dlq = "t", "dlq"

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newCluster(t *testing.T, partitions int32) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic, dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func newProducer(t *testing.T, c *kfake.Cluster, kopts []kgo.Opt, opts ...korder.Opt) *korder.Producer {
	t.Helper()
	kopts = append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ProducerLinger(0),
		kgo.ProducerBatchCompression(kgo.NoCompression()), // so that faults can see record values
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}, append(traceOpts(t), kopts...)...)
	p, err := korder.NewProducer(kopts, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	traceGoroutines(t)
	return p
}

// poison faults, with INVALID_RECORD, every batch of the topic that holds
// a record with the value "POISON", failing the whole batch, as a broker
// does when one record of a batch is invalid. Only that partition's batch
// of the request fails: a fault per partition.
func poison(c *kfake.Cluster) *kfake.FaultHandle {
	id := c.TopicInfo(topic).TopicID
	var faults []kfake.Fault
	for part := range int32(8) {
		faults = append(faults, kfake.Fault{
			Keys:       []kmsg.Key{kmsg.Produce},
			Topic:      topic,
			Partitions: []int32{part},
			Err:        kerr.InvalidRecord,
			Count:      -1,
			When: func(req kmsg.Request) bool {
				for _, t := range req.(*kmsg.ProduceRequest).Topics {
					if t.Topic != topic && t.TopicID != id {
						continue
					}
					for _, p := range t.Partitions {
						if p.Partition == part && bytes.Contains(p.Records, []byte("POISON")) {
							return true
						}
					}
				}
				return false
			},
		})
	}
	return c.Fault(faults...)
}

// promises records every promise call, to check each is called once.
type promises struct {
	mu    sync.Mutex
	calls map[*kgo.Record][]error
	wg    sync.WaitGroup
}

func newPromises() *promises { return &promises{calls: make(map[*kgo.Record][]error)} }

func (ps *promises) fn() func(*kgo.Record, error) {
	ps.wg.Add(1)
	return func(r *kgo.Record, err error) {
		ps.mu.Lock()
		ps.calls[r] = append(ps.calls[r], err)
		n := len(ps.calls[r])
		ps.mu.Unlock()
		if n == 1 {
			ps.wg.Done()
		}
	}
}

func (ps *promises) wait(ctx context.Context, t *testing.T) {
	t.Helper()
	done := make(chan struct{})
	go func() { ps.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		buf := make([]byte, 4<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Errorf("promises did not all run; goroutines:\n%s", buf) // for a hang seen once in CI; the caller says which
	}
}

// check checks that every promise ran exactly once and returns each
// record's error.
func (ps *promises) check(t *testing.T) map[*kgo.Record]error {
	t.Helper()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make(map[*kgo.Record]error, len(ps.calls))
	for r, errs := range ps.calls {
		if len(errs) != 1 {
			t.Errorf("record %s: promise called %d times: %v", r.Value, len(errs), errs)
		}
		out[r] = errs[0]
	}
	return out
}

func rec(partition int32, key string, seq int) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Key: []byte(key), Value: []byte(key + "-" + strconv.Itoa(seq))}
}

// readAll reads every record of topic t partition p from the start.
func readAll(ctx context.Context, t *testing.T, c *kfake.Cluster, tp string, p int32) []*kgo.Record {
	t.Helper()
	hw := c.PartitionInfo(tp, p).HighWatermark
	if hw == 0 {
		return nil
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		tp: {p: kgo.NewOffset().AtStart()},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for int64(len(out)) < hw {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s/%d: got %d of %d records", tp, p, len(out), hw)
		}
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	return out
}

func values(rs []*kgo.Record) []string {
	var vs []string
	for _, r := range rs {
		vs = append(vs, string(r.Value))
	}
	return vs
}

func expectLog(ctx context.Context, t *testing.T, c *kfake.Cluster, tp string, p int32, exp []string) {
	t.Helper()
	got := values(readAll(ctx, t, c, tp, p))
	if fmt.Sprint(got) != fmt.Sprint(exp) {
		t.Fatalf("%s/%d holds\n  %v\nexpected\n  %v", tp, p, got, exp)
	}
}

// Records failing mid-stream on one partition while another flows: Retry
// produces them again, in order, and everything is written exactly once.
func TestRetryKeepsOrder(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	p := newProducer(t, c, []kgo.Opt{kgo.RecordRetries(0)}, korder.WithPolicies(korder.Retry(10, time.Millisecond), korder.Stop()))

	ps := newPromises()
	var exp0, exp1 []string
	for i := range 20 {
		if i == 5 {
			// Two produce requests to partition 0 fail with a
			// retryable error that RecordRetries(0) does not retry.
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: 2})
		}
		r0, r1 := rec(0, "a", i), rec(1, "b", i)
		p.Produce(ctx, r0, ps.fn())
		p.Produce(ctx, r1, ps.fn())
		exp0, exp1 = append(exp0, string(r0.Value)), append(exp1, string(r1.Value))
	}
	ps.wait(ctx, t)
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for r, err := range ps.check(t) {
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp0)
	expectLog(ctx, t, c, topic, 1, exp1)
	if s := p.Stats(); s.Failures == 0 || s.Retries == 0 {
		t.Errorf("stats %+v: expected failures and retries", s)
	}
}

// A poison record in the middle of a batch: Isolate writes everything else
// in order, and the dead-letter topic holds the poison record.
func TestIsolateDeadLetter(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	// Hold the first produce response so that the following records
	// batch up behind it, around the poison record.
	release := make(chan struct{})
	var once sync.Once
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		once.Do(func() { c.SleepControl(func() { <-release }) })
		return nil, nil, false
	})
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Retry(1, 0), korder.Isolate(), korder.DeadLetter(dlq)))

	ps := newPromises()
	var exp []string
	var poisoned *kgo.Record
	for i := range 12 {
		r := rec(0, "k", i)
		if i == 6 {
			r.Value = []byte("POISON")
			r.Headers = []kgo.RecordHeader{{Key: "h", Value: []byte("v")}}
			poisoned = r
		} else {
			exp = append(exp, string(r.Value))
		}
		p.Produce(ctx, r, ps.fn())
	}
	close(release)
	ps.wait(ctx, t)
	checkPoisonDeadLettered(t, ps, poisoned)
	expectLog(ctx, t, c, topic, 0, exp)
	dl := readAll(ctx, t, c, dlq, 0)
	if len(dl) != 1 || string(dl[0].Value) != "POISON" || string(dl[0].Key) != "k" {
		t.Fatalf("dead-letter topic holds %v, expected the poison record", values(dl))
	}
	headers := map[string]string{}
	for _, h := range dl[0].Headers {
		headers[h.Key] = string(h.Value)
	}
	if headers["h"] != "v" || headers[korder.HeaderTopic] != topic || headers[korder.HeaderPartition] != "0" || !strings.Contains(headers[korder.HeaderCause], "INVALID_RECORD") {
		t.Errorf("dead-letter headers %v", headers)
	}
	if s := p.Stats(); s.DeadLettered != 1 || s.Isolations == 0 {
		t.Errorf("stats %+v: expected 1 dead-lettered and an isolation", s)
	}
}

// Key quarantine: once a record with key K is dead-lettered, later records
// with K go to the dead-letter topic too; other keys continue; releasing
// the quarantine lets K through again. Later records are produced either
// after the recovery or while it runs (from the poison record's promise, so
// that they are held and released by the recovery).
func TestQuarantineKeys(t *testing.T) {
	for _, during := range []bool{false, true} {
		t.Run(map[bool]string{false: "after", true: "during"}[during], func(t *testing.T) {
			testQuarantineKeys(t, during)
		})
	}
}

func testQuarantineKeys(t *testing.T, during bool) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Isolate(), korder.DeadLetter(dlq).QuarantineKeys()))

	ps := newPromises()
	later := []*kgo.Record{rec(0, "K", 1), rec(0, "other", 1), rec(0, "K", 2)}
	fns := make([]func(*kgo.Record, error), len(later))
	for i := range later {
		fns[i] = ps.fn()
	}
	produceLater := func() {
		for i, r := range later {
			p.Produce(ctx, r, fns[i])
		}
	}
	bad := &kgo.Record{Topic: topic, Key: []byte("K"), Value: []byte("POISON")}
	badDone, badc := ps.fn(), make(chan struct{})
	p.Produce(ctx, bad, func(r *kgo.Record, err error) {
		if during {
			produceLater()
		}
		badDone(r, err)
		close(badc)
	})
	if !during {
		select {
		case <-badc:
		case <-ctx.Done():
			t.Fatal("the poison record's promise did not run")
		}
		produceLater()
	}
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		wantDL := string(r.Key) == "K"
		if gotDL := errors.Is(err, korder.ErrDeadLettered); gotDL != wantDL {
			t.Errorf("record %s/%s: %v", r.Key, r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, []string{"other-1"})
	expectLog(ctx, t, c, dlq, 0, []string{"POISON", "K-1", "K-2"})
	if got := p.Quarantined(topic); len(got) != 1 || string(got[0]) != "K" {
		t.Fatalf("quarantined %q, expected K", got)
	}

	p.ReleaseQuarantine(topic, []byte("K"))
	if err := produceSync(ctx, p, rec(0, "K", 3)); err != nil {
		t.Fatalf("after releasing: %v", err)
	}
	expectLog(ctx, t, c, topic, 0, []string{"other-1", "K-3"})
}

// checkPoisonDeadLettered checks that every promise ran once, that poisoned
// was dead-lettered with INVALID_RECORD, and that every other record was
// written.
func checkPoisonDeadLettered(t *testing.T, ps *promises, poisoned *kgo.Record) {
	t.Helper()
	for r, err := range ps.check(t) {
		switch {
		case r == poisoned:
			if !errors.Is(err, korder.ErrDeadLettered) || !errors.Is(err, kerr.InvalidRecord) {
				t.Errorf("poison record got %v, expected ErrDeadLettered wrapping INVALID_RECORD", err)
			}
		case err != nil:
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
}

func produceSync(ctx context.Context, p *korder.Producer, r *kgo.Record) error {
	errc := make(chan error, 1)
	p.Produce(ctx, r, func(_ *kgo.Record, err error) { errc <- err })
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Drop reports the failed record and continues with the rest in order.
func TestDrop(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Isolate(), korder.Drop()))

	ps := newPromises()
	exp := producePoisoned(ctx, p, ps, 6, 2)
	ps.wait(ctx, t)
	dropped := 0
	for r, err := range ps.check(t) {
		if string(r.Value) == "POISON" {
			if !errors.Is(err, korder.ErrDropped) || !errors.Is(err, kerr.InvalidRecord) {
				t.Errorf("poison record got %v", err)
			}
			dropped++
		} else if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp)
	if s := p.Stats(); s.Dropped != 1 || dropped != 1 {
		t.Errorf("stats %+v", s)
	}
}

// Stop keeps the partition failed: the failed record and everything after
// it fail with ErrStopped, new records fail fast, and Resume continues.
func TestStopResume(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.InvalidRecord, Count: -1})
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Retry(3, 100*time.Millisecond), korder.Stop()))

	err := produceSync(ctx, p, rec(0, "k", 0))
	if !errors.Is(err, korder.ErrStopped) || !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("got %v, expected ErrStopped wrapping INVALID_RECORD", err)
	}
	if err := produceSync(ctx, p, rec(0, "k", 1)); !errors.Is(err, korder.ErrStopped) {
		t.Fatalf("record after the stop got %v", err)
	}
	h.Remove()
	expectLog(ctx, t, c, topic, 0, nil)

	p.Resume(topic)
	if err := produceSync(ctx, p, rec(0, "k", 2)); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
	expectLog(ctx, t, c, topic, 0, []string{"k-2"})
}

// Several producing goroutines, each with its own keys, with failures
// mid-stream: every key's records are written once, in order.
func TestConcurrentProducers(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 3)
	p := newProducer(t, c, []kgo.Opt{kgo.RecordRetries(0)}, korder.WithPolicies(korder.Retry(20, time.Millisecond), korder.Stop()))

	const goroutines, perKey = 4, 60
	ps := newPromises()
	var wg sync.WaitGroup
	var faults atomic.Int32
	for g := range goroutines {
		wg.Go(func() {
			key := "g" + strconv.Itoa(g)
			for i := range perKey {
				if g == 0 && i%20 == 10 && faults.Add(1) <= 3 {
					c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{int32(i % 3)}, Err: kerr.NotEnoughReplicas})
				}
				p.Produce(ctx, rec(int32(g%3), key, i), ps.fn())
			}
		})
	}
	wg.Wait()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	next := map[string]int{}
	for part := range int32(3) {
		for _, r := range readAll(ctx, t, c, topic, part) {
			key := string(r.Key)
			if want := key + "-" + strconv.Itoa(next[key]); string(r.Value) != want {
				t.Fatalf("partition %d: got %s, expected %s", part, r.Value, want)
			}
			next[key]++
		}
	}
	for g := range goroutines {
		if n := next["g"+strconv.Itoa(g)]; n != perKey {
			t.Errorf("key g%d: %d records written, expected %d", g, n, perKey)
		}
	}
}

func TestNewProducerValidates(t *testing.T) {
	for _, opts := range [][]korder.Opt{
		{korder.MaxHeld(0)},
		{korder.WithPolicies()},
		{korder.WithPolicies(korder.Retry(0, 0))},
		{korder.WithPolicies(korder.DeadLetter(""))},
		{korder.WithPolicies(korder.Stop(), korder.Drop())},
		{korder.WithPolicies(korder.Policy{})},
	} {
		if _, err := korder.NewProducer([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, opts...); err == nil {
			t.Errorf("NewProducer accepted %v", opts)
		}
	}
	if _, err := korder.NewProducer([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(5)}); err == nil {
		t.Error("NewProducer accepted a configuration kgo's fail-stop refuses")
	}
}

// A broker refusing writes long enough for the delivery timeout to run out,
// then back: Retry produces the timed out records again, and they must not
// time out at once for being old (kgo measures the delivery timeout from
// Produce, not from the record's Timestamp). Everything is written once, in
// order.
func TestRetryAfterDeliveryTimeout(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: -1})
	p := newProducer(t, c,
		[]kgo.Opt{kgo.RecordDeliveryTimeout(time.Second), kgo.MetadataMinAge(10 * time.Millisecond)},
		korder.WithPolicies(korder.Retry(1000, 20*time.Millisecond), korder.Stop()),
	)

	ps := newPromises()
	var exp []string
	for i := range 5 {
		r := rec(0, "k", i)
		exp = append(exp, string(r.Value))
		p.Produce(ctx, r, ps.fn())
	}
	// The broker stays down across several delivery timeouts and retries.
	if err := h.Wait(ctx, 150); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Failures == 0 {
		t.Fatalf("stats %+v: no failure while the broker was down", s)
	}
	h.Remove()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp)
}

// A dead-letter topic that cannot be written: DeadLetter passes the record
// on to the next policy (here Drop), and the rest of the partition still
// continues in order.
func TestDeadLetterUnavailableFallsThrough(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: dlq, Err: kerr.TopicAuthorizationFailed, Count: -1})
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Isolate(), korder.DeadLetter(dlq), korder.Drop()))

	ps := newPromises()
	exp := producePoisoned(ctx, p, ps, 4, 1)
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if string(r.Value) == "POISON" {
			if !errors.Is(err, korder.ErrDropped) || errors.Is(err, korder.ErrDeadLettered) {
				t.Errorf("poison record got %v, expected ErrDropped", err)
			}
		} else if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp)
	expectLog(ctx, t, c, dlq, 0, nil)
	if s := p.Stats(); s.Dropped != 1 || s.DeadLettered != 0 {
		t.Errorf("stats %+v", s)
	}
}

// producePoisoned produces n records with key k to partition 0, the one at
// index at with the value POISON, and returns the values of the others.
func producePoisoned(ctx context.Context, p *korder.Producer, ps *promises, n, at int) []string {
	var exp []string
	for i := range n {
		r := rec(0, "k", i)
		if i == at {
			r.Value = []byte("POISON")
		} else {
			exp = append(exp, string(r.Value))
		}
		p.Produce(ctx, r, ps.fn())
	}
	return exp
}

// A record without a topic goes to kgo.DefaultProduceTopic, as with kgo.
func TestDefaultProduceTopic(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	p := newProducer(t, c, []kgo.Opt{kgo.DefaultProduceTopic(topic)})
	r := rec(0, "k", 0)
	r.Topic = ""
	if err := produceSync(ctx, p, r); err != nil {
		t.Fatal(err)
	}
	expectLog(ctx, t, c, topic, 0, []string{"k-0"})
}

// rejectedBeforeHook is the application's hook in TestRejectedBeforeHook: it
// signals the first failure (it must not block or produce: kgo calls it
// inline, with the partition's lock held), and records whether kgo rejected
// the target record (its error is the failure itself).
type rejectedBeforeHook struct {
	failed   chan struct{}
	target   atomic.Pointer[kgo.Record]
	rejected atomic.Bool
	once     sync.Once
}

func (h *rejectedBeforeHook) OnProducePartitionFailed(*kgo.ErrProducePartitionFailed) {
	h.once.Do(func() { close(h.failed) })
}

func (h *rejectedBeforeHook) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	var fe *kgo.ErrProducePartitionFailed
	if r == h.target.Load() && errors.As(err, &fe) && err == error(fe) {
		h.rejected.Store(true)
	}
}

// A record produced after kgo failed its partition, while the Producer knows
// nothing of the failure yet, goes to kgo on the lock-free path and is
// rejected with the failure. The Producer's hook only counts: it learns of
// the failure from the promises, which carry it, and kgo's promise goroutine
// is kept busy by another record's promise meanwhile, so that neither the
// failed record nor the rejected ones have come back when the latter are
// produced. The Producer collects the rejected record with the failed one, by
// the failure they carry, and produces it again after it, in order.
func TestRejectedBeforeHook(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []korder.Opt
	}{
		{"partition", nil},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 2)
			poison(c)
			ps := newPromises()
			k2 := rec(0, "k", 2)
			h := &rejectedBeforeHook{failed: make(chan struct{})}
			h.target.Store(k2)
			p := newProducer(t, c, []kgo.Opt{kgo.WithHooks(h)}, append([]korder.Opt{korder.WithPolicies(korder.Drop())}, mode.opts...)...)

			if err := produceSync(ctx, p, rec(0, "k", 0)); err != nil {
				t.Fatal(err)
			}
			// Hold kgo's promise goroutine in the promise of a record
			// of partition 1.
			blocking, unblock := make(chan struct{}), make(chan struct{})
			var unblockOnce sync.Once
			release := func() { unblockOnce.Do(func() { close(unblock) }) }
			t.Cleanup(release)
			x := rec(1, "x", 0)
			xp := ps.fn()
			p.Produce(ctx, x, func(r *kgo.Record, err error) {
				close(blocking)
				<-unblock
				xp(r, err)
			})
			waitClosed(ctx, t, blocking, "the blocking promise")

			k1 := rec(0, "k", 1)
			k1.Value = []byte("POISON")
			p.Produce(ctx, k1, ps.fn())
			waitClosed(ctx, t, h.failed, "the application's hook")
			p.Produce(ctx, k2, ps.fn())
			p.Produce(ctx, rec(0, "k", 3), ps.fn())
			release()
			ps.wait(ctx, t)

			if !h.rejected.Load() {
				t.Fatal("kgo did not reject the record produced after the failure; the test did not test that")
			}
			for r, err := range ps.check(t) {
				if r == k1 {
					if !errors.Is(err, korder.ErrDropped) || !errors.Is(err, kerr.InvalidRecord) {
						t.Errorf("poison record got %v", err)
					}
				} else if err != nil {
					t.Errorf("record %s: %v", r.Value, err)
				}
			}
			expectLog(ctx, t, c, topic, 0, []string{"k-0", "k-2", "k-3"})
			expectLog(ctx, t, c, topic, 1, []string{"x-0"})
		})
	}
}

// Close returns only after every promise has returned, including one that
// is running when Close is called: a record counts as in flight until its
// promise returns. Both paths a record can take to kgo are checked: the
// locked one (a topic's first record) and the lock-free one.
func TestCloseWaitsForPromises(t *testing.T) {
	for _, warm := range []bool{false, true} {
		t.Run(map[bool]string{false: "locked path", true: "lock-free path"}[warm], func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 1)
			p, err := korder.NewProducer([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)})
			if err != nil {
				t.Fatal(err)
			}
			if warm {
				if err := produceSync(ctx, p, rec(0, "k", 0)); err != nil {
					t.Fatal(err)
				}
			}
			entered, closed := make(chan struct{}), make(chan struct{})
			var early atomic.Bool
			p.Produce(ctx, rec(0, "k", 1), func(_ *kgo.Record, err error) {
				close(entered)
				// Close must not return while this runs. Nothing
				// can say that it has not, so give it the time it
				// took before Close waited for promises (it
				// returned at once).
				select {
				case <-closed:
					early.Store(true)
				case <-time.After(200 * time.Millisecond):
				}
			})
			waitClosed(ctx, t, entered, "the promise")
			go func() {
				p.Close()
				close(closed)
			}()
			waitClosed(ctx, t, closed, "Close")
			if early.Load() {
				t.Fatal("Close returned while a promise was running")
			}
		})
	}
}
