package korder_test

import (
	"bytes"
	"context"
	"errors"
	"runtime"
	"strconv"
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

// holdProduceContaining holds the nth produce request (counting from 1)
// whose records contain value, until release is called; held is closed
// once it is held. The request is then answered as usual (faults apply).
func holdProduceContaining(t *testing.T, c *kfake.Cluster, value string, nth int) (held <-chan struct{}, release func()) {
	heldc, releasec := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(releasec) }) }
	t.Cleanup(release)
	seen := 0
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				if !bytes.Contains(p.Records, []byte(value)) {
					continue
				}
				seen++ // control functions run serially
				if seen == nth {
					c.DropControl()
					close(heldc)
					c.SleepControl(func() { <-releasec })
				}
				return nil, nil, false
			}
		}
		return nil, nil, false
	})
	return heldc, release
}

func waitClosed(ctx context.Context, t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
	}
}

// With ManualPartitioner, holds are per partition: while the recovery of a
// poison record on partition 0 is held up (its produce request again is
// kept by the broker), partition 0 holds new records, and records produced
// to partition 1 meanwhile are written before the hold ends. The partitions
// have different leaders, so holding partition 0's request does not hold
// partition 1's.
func TestPartitionHolds(t *testing.T) {
	ctx := testCtx(t)
	c := twoBrokerCluster(t)
	poison(c)
	// The first produce request with the poison record fails it; the
	// second is Retry producing it again, which the broker keeps.
	retrying, release := holdProduceContaining(t, c, "POISON", 2)
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Retry(1, 0), korder.DeadLetter(dlq)))

	if err := produceSync(ctx, p, rec(0, "a", 0)); err != nil {
		t.Fatal(err)
	}
	if err := produceSync(ctx, p, rec(1, "b", 0)); err != nil {
		t.Fatal(err)
	}
	ps := newPromises()
	bad := &kgo.Record{Topic: topic, Partition: 0, Key: []byte("a"), Value: []byte("POISON")}
	p.Produce(ctx, bad, ps.fn())
	waitClosed(ctx, t, retrying, "the recovery to produce the poison record again")

	// Partition 0 recovers: its new records are held.
	exp0 := []string{"a-0"}
	held := map[*kgo.Record]bool{}
	for i := 1; i <= 3; i++ {
		r := rec(0, "a", i)
		held[r] = true
		exp0 = append(exp0, string(r.Value))
		p.Produce(ctx, r, ps.fn())
	}
	// Partition 1 flows: its records are written during the hold.
	exp1 := []string{"b-0"}
	for i := 1; i <= 5; i++ {
		r := rec(1, "b", i)
		exp1 = append(exp1, string(r.Value))
		if err := produceSync(ctx, p, r); err != nil {
			t.Fatalf("partition 1 during partition 0's hold: %v", err)
		}
	}
	expectLog(ctx, t, c, topic, 1, exp1)
	// Partition 0's new records wait behind its round (in kgo, since the
	// recovery buffered the round at the partition's front).
	s := p.Stats()
	if s.PartitionHoldTime[topic][0] <= 0 {
		t.Errorf("no hold time for partition 0 during its hold: %+v", s.PartitionHoldTime)
	}
	ps.mu.Lock()
	for r := range held {
		if errs, ok := ps.calls[r]; ok {
			t.Errorf("held record %s finished during the hold: %v", r.Value, errs)
		}
	}
	ps.mu.Unlock()

	release()
	ps.wait(ctx, t)
	checkPoisonDeadLettered(t, ps, bad)
	expectLog(ctx, t, c, topic, 0, exp0)
	expectLog(ctx, t, c, topic, 1, exp1)
	expectLog(ctx, t, c, dlq, 0, []string{"POISON"})
	s = p.Stats()
	if s.Held != 0 || s.PartitionHoldTime[topic][0] <= 0 || s.PartitionHoldTime[topic][1] != 0 {
		t.Errorf("stats after the hold: held %d, hold time per partition %v", s.Held, s.PartitionHoldTime)
	}
}

// With per-partition holds, Stop stops only the failed partition; Resume
// resumes it.
func TestStopPartition(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: -1})
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Stop()))

	if err := produceSync(ctx, p, rec(0, "a", 0)); !errors.Is(err, korder.ErrStopped) || !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("got %v, expected ErrStopped wrapping INVALID_RECORD", err)
	}
	if err := produceSync(ctx, p, rec(0, "a", 1)); !errors.Is(err, korder.ErrStopped) {
		t.Fatalf("partition 0 after the stop: %v", err)
	}
	if err := produceSync(ctx, p, rec(1, "b", 0)); err != nil {
		t.Fatalf("partition 1 after partition 0 stopped: %v", err)
	}
	h.Remove()
	p.Resume(topic)
	if err := produceSync(ctx, p, rec(0, "a", 2)); err != nil {
		t.Fatalf("partition 0 after Resume: %v", err)
	}
	expectLog(ctx, t, c, topic, 0, []string{"a-2"})
	expectLog(ctx, t, c, topic, 1, []string{"b-0"})
	if s := p.Stats(); s.Stopped != 2 {
		t.Errorf("stats %+v: expected the record the stop failed and the one produced while stopped", s)
	}
}

// Resume while the whole topic is failed, with per-partition holds:
// partition 0 is stopped (Stop, a poison record); then the topic fails as a
// whole while partition 1 has a record in flight; Resume(topic) comes while
// the topic is still failed. Nothing may be written out of order, every
// promise runs once, and once the record in flight finishes, every record
// produced after the Resume is written.
func TestResumeWhileTopicFailed(t *testing.T) {
	ctx := testCtx(t)
	pol := matrixPolicy{name: "Stop", policies: []korder.Policy{korder.Stop()}, poisonFate: korder.ErrStopped, stops: true, mode: partitionHolds}
	// Partitions 0 and 1 on different brokers: the held request to
	// partition 1 does not delay partition 0's.
	m := newMatrixRunOn(t, twoBrokerCluster(t), pol, 1, []kgo.Opt{kgo.MaxBufferedBytes(64 << 10)})
	poison(m.c)
	inFlight, release := holdProduceContaining(t, m.c, "g0-1", 1)
	m.produce(ctx, 0, m.rec(0, 1)) // partition 1, held by the cluster
	waitClosed(ctx, t, inFlight, "the produce request to be held")

	poisoned := poisonValue(m.rec(0, 3)) // partition 0
	m.produce(ctx, 0, poisoned)
	m.waitFailure(ctx)
	for m.p.Stats().Stopped == 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("partition 0 did not stop: %+v", m.p.Stats())
		case <-time.After(time.Millisecond):
		}
	}

	big := m.rec(0, 5) // partition 2; fails the whole topic before partitioning
	big.Value = append(big.Value, bytes.Repeat([]byte("x"), 100<<10)...)
	m.produce(ctx, 0, big)
	// Held; the failure of big is partition 2's own, so Stop stops
	// partition 2 once the topic recovers, and this record with it.
	stopped := m.rec(0, 8)
	m.produce(ctx, 0, stopped)
	m.produce(ctx, 0, m.rec(0, 4)) // partition 1: held

	m.p.Resume(topic)
	after := []*kgo.Record{m.rec(0, 6), m.rec(0, 9), m.rec(0, 7)} // partitions 0, 0, 1
	for _, r := range after {
		m.produce(ctx, 0, r)
	}
	release()
	errs := m.checkRun(ctx)
	if err := errs[poisoned]; !errors.Is(err, korder.ErrStopped) || !errors.Is(err, kerr.InvalidRecord) {
		t.Errorf("poison record got %v, expected ErrStopped wrapping INVALID_RECORD", err)
	}
	if err := errs[big]; !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("the record larger than MaxBufferedBytes got %v", err)
	}
	if err := errs[stopped]; !errors.Is(err, korder.ErrStopped) || !errors.Is(err, kerr.MessageTooLarge) {
		t.Errorf("record %s behind big got %v, expected ErrStopped wrapping MESSAGE_TOO_LARGE", stopped.Value, err)
	}
	for r, err := range errs {
		if r != poisoned && r != big && r != stopped && err != nil {
			t.Errorf("record %s of partition %d: %v, expected it written", r.Value, r.Partition, err)
		}
	}
}

// A failure of the whole topic before its records are partitioned: the first
// record of a topic kgo has no metadata for yet is larger than
// MaxBufferedBytes and keyed, so kgo fails the topic (partition -1) and
// rejects the records produced after it. Drop drops the big record; the
// others are produced again through the topic's recovery, in order.
func TestTopicFailureBeforePartitioning(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	hook, failed := failedHook()
	p := newProducer(t, c, []kgo.Opt{hook, defaultPartitioner(), kgo.MaxBufferedBytes(64 << 10)}, korder.WithPolicies(korder.Drop()))
	ps := newPromises()
	k := keyFor("k", 0, 2)
	big := &kgo.Record{Topic: topic, Key: []byte(k), Value: bytes.Repeat([]byte("x"), 100<<10)}
	p.Produce(ctx, big, ps.fn())
	waitOn(ctx, t, failed, "the topic's failure")
	var exp []string
	for i := range 5 {
		r := &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte("r-" + strconv.Itoa(i))}
		exp = append(exp, string(r.Value))
		p.Produce(ctx, r, ps.fn())
	}
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if r == big {
			if !errors.Is(err, korder.ErrDropped) || !errors.Is(err, kerr.MessageTooLarge) {
				t.Errorf("big: %v", err)
			}
		} else if err != nil {
			t.Errorf("%s: %v", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, exp)
	if s := p.Stats(); s.PartitionHoldTime[topic][-1] <= 0 {
		t.Errorf("no topic hold time: %+v", s)
	}
}

// bufferedHook is a kgo.HookProduceRecordBuffered.
type bufferedHook func(*kgo.Record)

func (h bufferedHook) OnProduceRecordBuffered(r *kgo.Record) { h(r) }

// A record produced while the topic's recovery buffers the kept records is
// rejected, and kgo keeps the topic failed (the recovery returns the failure
// itself): no record of its own comes for the Producer to wait for, so the
// late record follows the others, past the policies. The Producer waited for
// one for ever.
//
// r-0 and r-1 must be rejected before the topic is recovered: they are
// produced from big's promise, which Drop calls from the topic's worker before
// it recovers the topic. (Holding kgo's promise goroutine, as this test did,
// now blocks them: kgo counts big, larger than MaxBufferedBytes, as buffered
// until its promise returns.)
func TestTopicKeptFailedByItsRecovery(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	hook, failed := failedHook()
	var p *korder.Producer
	ps := newPromises()
	k := keyFor("k", 0, 2)
	rs := []*kgo.Record{{Topic: topic, Key: []byte(k), Value: []byte("r-0")}, {Topic: topic, Key: []byte(k), Value: []byte("r-1")}}
	late := &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte("late")}
	var buffered atomic.Int32
	onBuffered := bufferedHook(func(r *kgo.Record) {
		if r == rs[0] && buffered.Add(1) == 2 { // by the recovery (no lock held for a topic's)
			p.Produce(ctx, late, ps.fn())
		}
	})
	p = newProducer(t, c, []kgo.Opt{hook, kgo.WithHooks(onBuffered), defaultPartitioner(), kgo.MaxBufferedBytes(64 << 10)}, korder.WithPolicies(korder.Drop()))
	big := &kgo.Record{Topic: topic, Key: []byte(k), Value: bytes.Repeat([]byte("x"), 100<<10)}
	bigDone := ps.fn()
	p.Produce(ctx, big, func(r *kgo.Record, err error) {
		defer bigDone(r, err)
		// kgo has the topic failed: r-0 and r-1 are rejected once
		// Produce returns, and the recovery waits for their promises.
		produced := make(chan struct{})
		go func() {
			for _, r := range rs {
				p.Produce(ctx, r, ps.fn())
			}
			close(produced)
		}()
		<-produced
	})
	waitOn(ctx, t, failed, "the topic's failure")
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if r != big && err != nil {
			t.Errorf("%s: %v", r.Value, err)
		}
	}
	if buffered.Load() < 2 {
		t.Fatal("r-0 was not rejected, then produced again by the topic's recovery: the test did not test that")
	}
	expectLog(ctx, t, c, topic, 0, []string{"r-0", "r-1", "late"})
}

// A partition whose broker keeps answering a retryable error, with kgo's
// MaxBufferedPartitionRecords: once it retries its first batch, the records
// past the bound come back to the Producer, which holds them, so the other partition keeps being written
// although the buffer that both share (MaxBufferedRecords) is smaller than
// what is produced to the stalled one. Once the stall ends, everything is
// written, in order, exactly once.
func TestStalledPartitionHandsBackPastBound(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	p := newProducer(t, c, []kgo.Opt{kgo.MaxBufferedPartitionRecords(4), kgo.MaxBufferedRecords(8), kgo.MetadataMinAge(100 * time.Millisecond)})
	if err := produceSync(ctx, p, rec(1, "b", -1)); err != nil { // the topic is known
		t.Fatal(err)
	}

	stall := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: -1})
	stalled, healthy := newPromises(), newPromises()
	exp0, exp1 := []string{}, []string{"b--1"}
	for i := range 20 {
		if i == 4 {
			// Stalled (the bound applies) once kgo handled two
			// answers to the first batch: with up to four batches,
			// answers may be the others', so the sixth comes after.
			if err := stall.Wait(ctx, 6); err != nil {
				t.Fatal(err)
			}
		}
		r0 := rec(0, "a", i)
		p.Produce(ctx, r0, stalled.fn())
		exp0 = append(exp0, string(r0.Value))
		if i >= 4 {
			r1 := rec(1, "b", i)
			p.Produce(ctx, r1, healthy.fn())
			exp1 = append(exp1, string(r1.Value))
		}
	}
	healthy.wait(ctx, t) // while partition 0 is still stalled
	for r, err := range healthy.check(t) {
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	// kgo fails the partition at the bound (its hook, counted in
	// Failures, is called as for any failure), and the Producer holds what
	// kgo rejects: no policy runs (no retry, nothing stopped).
	if s := p.Stats(); s.Held == 0 || s.Failures == 0 || s.Retries != 0 || s.Stopped != 0 {
		t.Errorf("during the stall: held %d, failures %d, retries %d, stopped %d; expected records held, the bound's failure, and no policy run", s.Held, s.Failures, s.Retries, s.Stopped)
	}

	stall.Remove()
	stalled.wait(ctx, t)
	for r, err := range stalled.check(t) {
		if err != nil {
			t.Errorf("record %s: %v", r.Value, err)
		}
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	expectLog(ctx, t, c, topic, 0, exp0)
	expectLog(ctx, t, c, topic, 1, exp1)
}

// partHook is a kgo.HookProducePartitionFailed.
type partHook func(*kgo.ErrProducePartitionFailed)

func (h partHook) OnProducePartitionFailed(f *kgo.ErrProducePartitionFailed) { h(f) }

// A record that kgo's failure of its whole topic (-1) failed goes to the
// topic's state machine, by the failure it carries, although its Partition
// (kgo did not partition it) names a partition that has one, stopped. With
// kgo's former API the Producer placed it by its Partition: counted there, it
// left the topic's recovery refused for ever, and Flush hung.
//
// kgo fails a topic only while its partitions are not known (a load error
// with the partitions known fails the record's partition): the client forgets
// the topic (PurgeTopicsFromClient), whose metadata then fails for good.
func TestTopicFailureCountsItsOwnRecords(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	poison(c)
	minus := make(chan struct{}, 1)
	hook := kgo.WithHooks(partHook(func(f *kgo.ErrProducePartitionFailed) {
		if f.Partition == -1 {
			select {
			case minus <- struct{}{}:
			default: // a hook must not block
			}
		}
	}))
	p := newProducer(t, c, []kgo.Opt{hook}, korder.WithPolicies(korder.Stop()))
	if err := produceSync(ctx, p, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("POISON")}); !errors.Is(err, korder.ErrStopped) {
		t.Fatalf("POISON got %v, expected ErrStopped", err)
	}

	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: topic, Err: kerr.TopicAuthorizationFailed, Count: -1})
	p.Client().PurgeTopicsFromClient(topic)
	done := make(chan error, 1)
	p.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("x")}, func(_ *kgo.Record, err error) { done <- err })
	waitOn(ctx, t, minus, "the topic's failure")
	select {
	case err := <-done:
		if !errors.Is(err, korder.ErrStopped) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
			t.Fatalf("x: %v, expected ErrStopped wrapping TOPIC_AUTHORIZATION_FAILED", err)
		}
	case <-ctx.Done():
		t.Fatalf("x, which failed the topic, was not settled; stats %+v", p.Stats())
	}
	h.Remove()
	p.Client().ForceMetadataRefresh()
	p.Resume(topic)
	ps := newPromises()
	y := &kgo.Record{Topic: topic, Partition: 1, Value: []byte("y")}
	p.Produce(ctx, y, ps.fn())
	fctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		t.Fatalf("Flush: %v; stats %+v", err, p.Stats())
	}
	if err := ps.check(t)[y]; err != nil {
		t.Errorf("y, produced after Resume: %v", err)
	}
}

// hintPartitioner puts a record on its Partition, and requires consistency
// only for keyed records, as kgo's default partitioners do.
type hintPartitioner struct{}

func (hintPartitioner) ForTopic(string) kgo.TopicPartitioner   { return hintPartitioner{} }
func (hintPartitioner) RequiresConsistency(r *kgo.Record) bool { return r.Key != nil }
func (hintPartitioner) Partition(r *kgo.Record, _ int) int     { return int(r.Partition) }

// An unkeyed record that fails alone, before it is buffered, in a failed
// partition counts in kgo's failure as in the partition's state machine: it
// was counted by the state machine only, which recovered the partition while
// a later keyed record's rejection was still on its way back; that record
// then got kgo's rejection error, never written. kgo's promise goroutine is
// held so that the rejection comes back after the recovery, which is seen
// by its buffering big again; with the fix, the recovery waits for the
// rejection instead, which nothing can observe, hence the one-second bound.
func TestUnkeyedFailureInAFailedPartition(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2)
	poison(c)
	hook, failed := failedHook()
	rebuffered := make(chan struct{}, 10)
	var big *kgo.Record
	onBuffered := bufferedHook(func(r *kgo.Record) {
		if r == big {
			rebuffered <- struct{}{}
		}
	})
	var logs syncBuffer
	p := newProducer(t, c, []kgo.Opt{hook, kgo.WithHooks(onBuffered), kgo.RecordPartitioner(hintPartitioner{}), kgo.MaxBufferedBytes(64 << 10),
		kgo.WithLogger(kgo.BasicLogger(&logs, kgo.LogLevelInfo, nil))}, korder.WithPolicies(korder.Drop()))
	ps := newPromises()
	release := holdPromises(ctx, t, p, &kgo.Record{Topic: dlq, Value: []byte("h")}, ps.fn())
	p.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("k"), Value: []byte("POISON")}, ps.fn())
	waitOn(ctx, t, failed, "partition 0's failure")
	big = &kgo.Record{Topic: topic, Partition: 0, Value: bytes.Repeat([]byte("x"), 100<<10)} // unkeyed, over MaxBufferedBytes
	p.Produce(ctx, big, ps.fn())
	<-rebuffered // kgo's buffered hook runs before the size check
	gate, fn := make(chan struct{}), ps.fn()
	p.Produce(ctx, &kgo.Record{Value: []byte("no topic")}, func(r *kgo.Record, err error) { <-gate; fn(r, err) })
	r := &kgo.Record{Topic: topic, Partition: 0, Key: []byte("k"), Value: []byte("r")}
	p.Produce(ctx, r, ps.fn()) // rejected: partition 0 is failed
	close(release)
	select {
	case <-rebuffered: // recovered without r
	case <-time.After(time.Second):
	}
	close(gate)
	ps.wait(ctx, t)
	if err := ps.check(t)[r]; err != nil {
		t.Errorf("r, produced after the failure: %v\n%s", err, logs.String())
	}
}

// syncBuffer is a bytes.Buffer for a logger called from many goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A record of a new failure comes back while the worker is in the no-record
// recovery that ends the last one: the worker must not forget the partition
// as it ends, or the record starts a second worker for it, which takes a
// healthy record that fails with the next poison record for its culprit.
func TestArrivalDuringLastRecoveryKeepsPartition(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	p := newProducer(t, c, nil, korder.WithPolicies(korder.Isolate(), korder.Drop()))
	inCall, parked := make(chan struct{}), make(chan struct{})
	var callOnce sync.Once
	korder.SetTestHooks(p, func(n int, keep, accepted bool) {
		if n == 0 && !keep && accepted { // the recovery that ends the failure
			callOnce.Do(func() {
				close(inCall)
				// Until the next failure's record waits for it.
				for korder.Parked(p, topic, 0) == 0 && ctx.Err() == nil {
					runtime.Gosched()
				}
				close(parked)
			})
		}
	})
	ps := newPromises()
	p.Produce(ctx, rec(0, "a", 0), ps.fn())
	p.Produce(ctx, poisonValue(rec(0, "a", 1)), ps.fn())
	select {
	case <-inCall:
	case <-ctx.Done():
		t.Fatal("no recovery ended the first failure")
	}
	poisoned := poisonValue(rec(0, "b", 0))
	p.Produce(ctx, poisoned, ps.fn())
	select {
	case <-parked:
	case <-ctx.Done():
		t.Fatal("the second failure's record did not come back during the recovery")
	}
	var bs []*kgo.Record
	for i := 1; i <= 20; i++ {
		bs = append(bs, rec(0, "b", i))
		p.Produce(ctx, bs[len(bs)-1], ps.fn())
	}
	ps.wait(ctx, t)
	errs := ps.check(t)
	if !errors.Is(errs[poisoned], korder.ErrDropped) {
		t.Errorf("poison record: %v, expected ErrDropped", errs[poisoned])
	}
	var last int64 = -1
	for _, r := range bs {
		if err := errs[r]; err != nil {
			t.Errorf("%s: %v, expected written", r.Value, err)
		} else if r.Offset <= last {
			t.Errorf("%s written at offset %d, after offset %d", r.Value, r.Offset, last)
		} else {
			last = r.Offset
		}
	}
}
