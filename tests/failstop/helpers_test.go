package failstop_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Helpers shared by every test, built with and without the pristine tag: they
// use no API that only the patched franz-go has (see the shim files).

const topic = "t"

// testCtx bounds a test: 20s, or less if the test binary's deadline is
// closer.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	d := 20 * time.Second
	if dl, ok := t.Deadline(); ok {
		if left := time.Until(dl) - 2*time.Second; left < d {
			d = max(left, time.Second)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newCluster(t *testing.T, partitions int32, topics ...string) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...))
	if err != nil {
		t.Fatalf("kfake.NewCluster: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func newClient(t *testing.T, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// producerConfig is one of the two configurations every scenario runs in.
type producerConfig struct {
	name string
	opts []kgo.Opt
}

var producerConfigs = []producerConfig{
	{"idempotent", nil},
	{"non-idempotent", []kgo.Opt{kgo.DisableIdempotentWrite()}}, // default 1 request in flight
}

func eachConfig(t *testing.T, fn func(t *testing.T, opts []kgo.Opt)) {
	for _, pc := range producerConfigs {
		t.Run(pc.name, func(t *testing.T) { fn(t, pc.opts) })
	}
}

// failHook records the failures kgo reports to HookProducePartitionFailed
// (the shim makes it implement the hook on the patched tree; on pristine
// franz-go it is never registered). onFail, if set, runs inline, where kgo
// calls the hook: on the goroutine that failed the partition, with the
// partition's lock held, so it must not block, produce or recover (a
// recovery from there is refused with errRecoveryPending).
type failHook struct {
	mu     sync.Mutex
	events []*failure
	ch     chan *failure
	onFail func(*failure)
}

func newFailHook() *failHook { return &failHook{ch: make(chan *failure, 64)} }

// failed is the hook's body (see the shim).
func (h *failHook) failed(f *failure) {
	h.mu.Lock()
	h.events = append(h.events, f)
	h.mu.Unlock()
	if h.onFail != nil {
		h.onFail(f)
	}
	select {
	case h.ch <- f:
	default:
	}
}

// wait returns the next failure the hook was called with, failing the test
// if none comes in time.
func (h *failHook) wait(ctx context.Context, t *testing.T) *failure {
	t.Helper()
	select {
	case f := <-h.ch:
		return f
	case <-ctx.Done():
		t.Fatalf("OnProducePartitionFailed was not called: %v", ctx.Err())
		return nil
	}
}

func (h *failHook) snapshot() []*failure {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.events)
}

// checkEvent checks a failure against the expected topic, partition and
// cause.
func checkEvent(t *testing.T, f *failure, topic string, partition int32, cause error) {
	t.Helper()
	if f.Topic != topic || f.Partition != partition || !errors.Is(f.Err, cause) {
		t.Fatalf("OnProducePartitionFailed(%q, %d, %v), want (%q, %d, an error wrapping %v)",
			f.Topic, f.Partition, f.Err, topic, partition, cause)
	}
}

// rec builds a record whose value is its sequence number.
func rec(topic string, partition int32, seq int) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Value: []byte(strconv.Itoa(seq))}
}

func recs(topic string, partition int32, from, to int) []*kgo.Record {
	var rs []*kgo.Record
	for seq := from; seq < to; seq++ {
		rs = append(rs, rec(topic, partition, seq))
	}
	return rs
}

func seqRange(from, to int) []int {
	var s []int
	for seq := from; seq < to; seq++ {
		s = append(s, seq)
	}
	return s
}

func seqOf(t *testing.T, r *kgo.Record) int {
	t.Helper()
	seq, err := strconv.Atoi(string(r.Value))
	if err != nil {
		t.Fatalf("record value %q is not a sequence number", r.Value)
	}
	return seq
}

// result is a finished promise.
type result struct {
	r   *kgo.Record
	err error
}

// produceAsync produces rs in order, each with its own promise channel.
func produceAsync(ctx context.Context, cl *kgo.Client, rs ...*kgo.Record) []chan result {
	chs := make([]chan result, len(rs))
	for i, r := range rs {
		ch := make(chan result, 1)
		chs[i] = ch
		cl.Produce(ctx, r, func(r *kgo.Record, err error) { ch <- result{r, err} })
	}
	return chs
}

// await waits for the promises, bounded by ctx.
func await(ctx context.Context, t *testing.T, chs []chan result) []result {
	t.Helper()
	out := make([]result, len(chs))
	for i, ch := range chs {
		select {
		case out[i] = <-ch:
		case <-ctx.Done():
			t.Fatalf("promise %d of %d was not called: %v", i, len(chs), ctx.Err())
		}
	}
	return out
}

// produceOK produces rs in order and requires every one to succeed.
func produceOK(ctx context.Context, t *testing.T, cl *kgo.Client, rs ...*kgo.Record) []result {
	t.Helper()
	res := await(ctx, t, produceAsync(ctx, cl, rs...))
	for _, r := range res {
		if r.err != nil {
			t.Fatalf("producing seq %s to %s/%d: %v", r.r.Value, r.r.Topic, r.r.Partition, r.err)
		}
	}
	return res
}

// checkWave checks the records produced while the partition failed: a
// non-empty prefix of them fails with the original cause (they were buffered
// when the partition failed), the rest, produced once it had failed, are
// rejected. With the patched API, every one of them carries the same
// failure, which it returns (nil on pristine franz-go).
func checkWave(t *testing.T, wave []result, cause error) *failure {
	t.Helper()
	f := failureOf(wave[0].err)
	if failStopAvailable && f == nil {
		t.Fatalf("first failing record (seq %s) failed with %v, which carries no *kgo.ErrProducePartitionFailed", wave[0].r.Value, wave[0].err)
	}
	rejecting := false
	for i, w := range wave {
		switch {
		case w.err == nil:
			t.Fatalf("wave record %d (seq %s) succeeded at offset %d, want it failed with %v", i, w.r.Value, w.r.Offset, cause)
		case failureOf(w.err) != f:
			t.Fatalf("wave record %d (seq %s) failed with %v, which carries another failure than the first record's (%v)", i, w.r.Value, w.err, wave[0].err)
		case isRejected(w.err):
			if i == 0 {
				t.Fatalf("first failing record (seq %s) was rejected as partition-failed (%v), want its own error %v", w.r.Value, w.err, cause)
			}
			rejecting = true
		case rejecting:
			t.Fatalf("wave record %d (seq %s) failed with %v after an earlier one was rejected as partition-failed", i, w.r.Value, w.err)
		case !errors.Is(w.err, cause):
			t.Fatalf("wave record %d (seq %s) failed with %v, want an error wrapping %v", i, w.r.Value, w.err, cause)
		}
	}
	return f
}

// checkRejected checks that records produced to a failed partition were
// rejected with the failure f itself, which wraps cause.
func checkRejected(t *testing.T, rs []result, f *failure, cause error) {
	t.Helper()
	for _, r := range rs {
		if r.err == nil {
			t.Fatalf("seq %s, produced to failed %s/%d, succeeded at offset %d", r.r.Value, r.r.Topic, r.r.Partition, r.r.Offset)
		}
		if f == nil || r.err != error(f) || !errors.Is(r.err, cause) {
			t.Fatalf("seq %s failed with %v, want the failure itself (%v), wrapping %v", r.r.Value, r.err, f, cause)
		}
	}
}

// readLog reads topic/partition from the start until it sees the record at
// offset last (which must exist), and returns every record it saw.
func readLog(ctx context.Context, t *testing.T, c *kfake.Cluster, topic string, partition int32, level kgo.IsolationLevel, last int64) []*kgo.Record {
	t.Helper()
	if last < 0 {
		return nil
	}
	cons, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {partition: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(level),
		kgo.FetchMaxWait(100*time.Millisecond),
	)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	defer cons.Close()
	var out []*kgo.Record
	for {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s/%d up to offset %d: %v (read %d records)", topic, partition, last, ctx.Err(), len(out))
		}
		for _, fe := range fs.Errors() {
			t.Fatalf("reading %s/%d: %v", fe.Topic, fe.Partition, fe.Err)
		}
		done := false
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			done = done || r.Offset >= last
		})
		if done {
			return out
		}
	}
}

// checkLog checks that topic/partition holds exactly want, in order, at
// offsets 0, 1, ... (no transactions).
func checkLog(ctx context.Context, t *testing.T, c *kfake.Cluster, topic string, partition int32, want []int) {
	t.Helper()
	hwm := c.PartitionInfo(topic, partition).HighWatermark
	got := readLog(ctx, t, c, topic, partition, kgo.ReadUncommitted(), hwm-1)
	var seqs []int
	for i, r := range got {
		if r.Offset != int64(i) {
			t.Fatalf("%s/%d: record %d is at offset %d", topic, partition, i, r.Offset)
		}
		seqs = append(seqs, seqOf(t, r))
	}
	if hwm != int64(len(want)) || !slices.Equal(seqs, want) {
		t.Fatalf("%s/%d log holds sequence %v (high watermark %d), want %v", topic, partition, seqs, hwm, want)
	}
}

// recoverWhenReturned recovers f with rs, calling again while the recovery
// is refused with errRecoveryPending: the failure's last promise has been
// called (the caller saw it) but is still returning. It returns the first
// other answer.
func recoverWhenReturned(ctx context.Context, t *testing.T, cl *kgo.Client, f *failure, promise func(*kgo.Record, error), rs ...*kgo.Record) error {
	t.Helper()
	for {
		err := recoverPartition(cl, f, promise, rs...)
		if !errors.Is(err, errRecoveryPending) {
			return err
		}
		select {
		case <-time.After(time.Millisecond):
		case <-ctx.Done():
			t.Fatalf("recovering %s/%d: still %v: %v", f.Topic, f.Partition, err, ctx.Err())
		}
	}
}

// checkPending checks that a recovery was refused because a promise of the
// failure has not returned.
func checkPending(t *testing.T, err error) {
	t.Helper()
	if !errors.Is(err, errRecoveryPending) {
		t.Fatalf("recovery returned %v, want a refusal wrapping ErrRecoveryPending", err)
	}
}

// recoverOK recovers f's partition (or topic) with rs, once every promise
// of f has returned, and requires every record of rs to be written.
func recoverOK(ctx context.Context, t *testing.T, cl *kgo.Client, f *failure, rs ...*kgo.Record) []result {
	t.Helper()
	chs := make(chan result, len(rs))
	if err := recoverWhenReturned(ctx, t, cl, f, func(r *kgo.Record, err error) { chs <- result{r, err} }, rs...); err != nil {
		t.Fatalf("recovering %s/%d: %v", f.Topic, f.Partition, err)
	}
	out := make([]result, 0, len(rs))
	for range rs {
		select {
		case r := <-chs:
			if r.err != nil {
				t.Fatalf("recovered record seq %s: %v", r.r.Value, r.err)
			}
			out = append(out, r)
		case <-ctx.Done():
			t.Fatalf("%d of %d recovered records promised: %v", len(out), len(rs), ctx.Err())
		}
	}
	return out
}

// tryFlush returns try, which TryProduces records and returns their results'
// channels, and flushOK, which flushes and fails the test if any of them
// failed.
func tryFlush(ctx context.Context, t *testing.T, cl *kgo.Client) (func(...*kgo.Record) []chan result, func([]chan result)) {
	try := func(rs ...*kgo.Record) []chan result {
		chs := make([]chan result, len(rs))
		for i, r := range rs {
			ch := make(chan result, 1)
			chs[i] = ch
			cl.TryProduce(ctx, r, func(r *kgo.Record, err error) { ch <- result{r, err} })
		}
		return chs
	}
	flushOK := func(chs []chan result) {
		t.Helper()
		if err := cl.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
		for _, r := range await(ctx, t, chs) {
			if r.err != nil {
				t.Fatalf("record %s: %v", r.r.Value, r.err)
			}
		}
	}
	return try, flushOK
}
