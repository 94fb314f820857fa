//go:build !pristine

package failstop_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestInvariantCauses: the invariant (see runInvariant) with the other
// ways a partition fails: the retryable NOT_ENOUGH_REPLICAS until
// RecordRetries, or RecordDeliveryTimeout, runs out, and a record larger
// than ProducerBatchMaxBytes, which fails in Produce on the producing
// goroutine and is produced again at a size that fits.
func TestInvariantCauses(t *testing.T) {
	for _, tc := range []struct {
		name string
		sc   failScenario
	}{
		{"retries", failScenario{
			// Retries wait for a metadata refresh: do not wait out
			// the default 5s MetadataMinAge.
			opts:  []kgo.Opt{kgo.RecordRetries(2), kgo.MetadataMinAge(10 * time.Millisecond)},
			cause: kerr.NotEnoughReplicas,
			arm:   faultProduce(kerr.NotEnoughReplicas, -1),
		}},
		{"delivery-timeout", failScenario{
			opts:  []kgo.Opt{kgo.RecordDeliveryTimeout(time.Second), kgo.MetadataMinAge(10 * time.Millisecond)},
			cause: kgo.ErrRecordTimeout,
			arm:   faultProduce(kerr.NotEnoughReplicas, -1),
		}},
		{"too-large", failScenario{
			opts:  []kgo.Opt{kgo.ProducerBatchMaxBytes(512)},
			cause: kerr.MessageTooLarge,
			arm:   func(*kfake.Cluster) func() { return func() {} },
			waveRec: func(seq int) *kgo.Record {
				r := rec(topic, 0, seq)
				if seq == nPrefix {
					r.Headers = []kgo.RecordHeader{{Key: "pad", Value: make([]byte, 1024)}}
				}
				return r
			},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachConfig(t, func(t *testing.T, opts []kgo.Opt) { runInvariant(t, opts, tc.sc) })
		})
	}
}

// produceWrites signals every produce request kgo writes to a broker.
type produceWrites chan struct{}

func (w produceWrites) OnBrokerWrite(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.Produce) && err == nil {
		w <- struct{}{}
	}
}

// TestInvariantPipelined: the idempotent producer has a second produce
// request in flight behind the one that fails with INVALID_RECORD (answered
// once); the broker would accept nothing of it (sequence gap), and nothing
// produced after the failure is written either. (Non-idempotent, 1 in
// flight, never sends the second request before the failure.)
func TestInvariantPipelined(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	h := newFailHook()
	writes := make(produceWrites, 64)
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.WithHooks(writes),
	}, failStopOpts(h)...)...)

	produceOK(ctx, t, cl, recs(topic, 0, 0, 3)...) // also lets the idempotent producer pipeline
	for len(writes) > 0 {
		<-writes
	}

	held, doRelease := holdFirstProduce(t, c)
	faultProduce(kerr.InvalidRecord, 0)(c)

	waveCh := produceAsync(ctx, cl, rec(topic, 0, 3))
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("the failing request never reached the broker")
	}
	waveCh = append(waveCh, produceAsync(ctx, cl, recs(topic, 0, 4, 7)...)...)
	for range 2 { // the failing request and the pipelined one
		select {
		case <-writes:
		case <-ctx.Done():
			t.Fatal("produce request not written")
		}
	}
	doRelease()

	f := checkWave(t, await(ctx, t, waveCh), kerr.InvalidRecord)
	checkHooked(ctx, t, h, f, topic, 0, kerr.InvalidRecord)
	checkRejected(t, await(ctx, t, produceAsync(ctx, cl, recs(topic, 0, 7, 10)...)), f, kerr.InvalidRecord)
	checkLog(ctx, t, c, topic, 0, seqRange(0, 3))

	recoverAndReproduce(ctx, t, cl, c, h, f, 3, 10)
}

// TestCanceledContext: records sit buffered behind a produce request the
// broker holds; their context is canceled before they are sent, so they fail
// with context.Canceled and fail the partition.
func TestCanceledContext(t *testing.T) {
	eachConfig(t, func(t *testing.T, opts []kgo.Opt) {
		ctx := testCtx(t)
		c := newCluster(t, 1, topic)

		// Hold the first produce request (seq 0) until release.
		held, doRelease := holdFirstProduce(t, c)

		h := newFailHook()
		cl := newClient(t, c, append(append([]kgo.Opt{
			kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		}, opts...), failStopOpts(h)...)...)

		ch0 := produceAsync(ctx, cl, rec(topic, 0, 0))
		select {
		case <-held:
		case <-ctx.Done():
			t.Fatal("first produce request never reached the broker")
		}
		// With one request in flight, these wait in the buffer.
		cctx, ccancel := context.WithCancel(ctx)
		waveCh := produceAsync(cctx, cl, recs(topic, 0, 1, 4)...)
		ccancel()
		doRelease()

		if r := await(ctx, t, ch0)[0]; r.err != nil || r.r.Offset != 0 {
			t.Fatalf("seq 0: offset %d, err %v; want offset 0", r.r.Offset, r.err)
		}
		f := checkWave(t, await(ctx, t, waveCh), context.Canceled)
		checkHooked(ctx, t, h, f, topic, 0, context.Canceled)

		checkRejected(t, await(ctx, t, produceAsync(ctx, cl, recs(topic, 0, 4, 6)...)), f, context.Canceled)
		checkLog(ctx, t, c, topic, 0, []int{0})

		recoverAndReproduce(ctx, t, cl, c, h, f, 1, 6)
	})
}

// TestBlockedProduceCanceled: Produce blocks on MaxBufferedRecords (the
// buffered record's request is held by the broker) and its context is
// canceled: the record fails before partitioning, failing the topic (-1),
// synchronously in Produce. The held record is still written. (The
// failure is before buffering: the producer configuration plays no part.)
func TestBlockedProduceCanceled(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	h := newFailHook()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1),
	}, failStopOpts(h)...)...)
	produceOK(ctx, t, cl, rec(topic, 0, 0)) // metadata

	held, doRelease := holdFirstProduce(t, c)

	ch1 := produceAsync(ctx, cl, rec(topic, 0, 1))
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("produce request never reached the broker")
	}
	// The buffer is full: this Produce blocks until its context is
	// done, which it already is.
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	ch2 := produceAsync(cctx, cl, rec(topic, 0, 2))
	if evs := h.snapshot(); len(evs) != 1 {
		t.Fatalf("after the blocked Produce returned, hook calls = %v, want one", evs)
	}
	// ManualPartitioner and loaded metadata: the record's partition
	// is known, so only it fails, not the topic.
	f := checkWave(t, await(ctx, t, ch2), context.Canceled)
	checkHooked(ctx, t, h, f, topic, 0, context.Canceled)
	doRelease()
	if r := await(ctx, t, ch1)[0]; r.err != nil {
		t.Fatalf("seq 1, buffered before the failure: %v", r.err)
	}

	checkRejected(t, await(ctx, t, produceAsync(ctx, cl, recs(topic, 0, 3, 5)...)), f, context.Canceled)
	checkLog(ctx, t, c, topic, 0, []int{0, 1})
	recoverAndReproduce(ctx, t, cl, c, h, f, 2, 5)
}

// TestMaxBufferedFailsTopic: TryProduce over MaxBufferedRecords (with
// ManualFlushing, so the buffer stays full) fails before buffering,
// synchronously in TryProduce.
//
// metadata-loaded: with ManualPartitioner the record's partition is known,
// so only partition 0 fails; the records buffered before the failure are
// written. before-metadata: the partition is not known (the cluster holds
// metadata requests until the failure), so the whole topic fails (partition
// -1); the records produced before the failure, still waiting for the
// topic's metadata, are written all the same.
func TestMaxBufferedFailsTopic(t *testing.T) {
	for _, warm := range []bool{true, false} {
		name := "metadata-loaded"
		if !warm {
			name = "before-metadata"
		}
		t.Run(name, func(t *testing.T) { testMaxBuffered(t, warm) })
	}
}

func testMaxBuffered(t *testing.T, warm bool) {
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	release := make(chan struct{})
	if warm {
		close(release)
	} else {
		c.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			c.SleepControl(func() { <-release })
			return nil, nil, false
		})
	}
	h := newFailHook()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ManualFlushing(), kgo.MaxBufferedRecords(2),
	}, failStopOpts(h)...)...)
	try, flushOK := tryFlush(ctx, t, cl)

	var written []int // the log's expected content
	next := 0
	if warm {
		flushOK(try(rec(topic, 0, 0)))
		written, next = append(written, 0), 1
	}
	buffered := try(recs(topic, 0, next, next+2)...)
	failSeq := next + 2
	over := try(rec(topic, 0, failSeq))
	// The hook ran on this goroutine, inside TryProduce.
	if evs := h.snapshot(); len(evs) != 1 {
		t.Fatalf("after TryProduce returned ErrMaxBuffered, hook calls = %v, want one", evs)
	}
	failed := int32(-1)
	if warm {
		failed = 0
	}
	f := checkWave(t, await(ctx, t, over), kgo.ErrMaxBuffered)
	checkHooked(ctx, t, h, f, topic, failed, kgo.ErrMaxBuffered)
	if !warm {
		close(release)
	}

	// What was buffered (and partitioned) before the failure is written.
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	for i, r := range await(ctx, t, buffered) {
		if r.err != nil {
			t.Fatalf("seq %d, produced before the failing seq %d: %v, want written", next+i, failSeq, r.err)
		}
		written = append(written, next+i)
	}
	after := try(recs(topic, 0, failSeq+1, failSeq+3)...)
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	checkRejected(t, await(ctx, t, after), f, kgo.ErrMaxBuffered)
	checkLog(ctx, t, c, topic, 0, written)

	// The recovered records bypass MaxBufferedRecords; with ManualFlushing
	// they wait for a Flush.
	redo := recs(topic, 0, failSeq, failSeq+3)
	redone := make(chan result, len(redo))
	if err := recoverWhenReturned(ctx, t, cl, f, func(r *kgo.Record, err error) { redone <- result{r, err} }, redo...); err != nil {
		t.Fatal(err)
	}
	chs := make([]chan result, len(redo))
	for i := range chs {
		chs[i] = redone
	}
	flushOK(chs)
	checkLog(ctx, t, c, topic, 0, seqRange(0, failSeq+3))
	checkHookOnce(t, h)
}

// TestUnknownTopicFailsTopic: records for a topic that does not exist fail
// once UnknownTopicRetries, or RecordDeliveryTimeout, runs out, failing the
// topic (partition -1). After the topic is created its records are still
// rejected, until the topic is recovered.
func TestUnknownTopicFailsTopic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []kgo.Opt
		cause error
	}{
		{"retries", []kgo.Opt{kgo.UnknownTopicRetries(1)}, kerr.UnknownTopicOrPartition},
		{"delivery-timeout", []kgo.Opt{kgo.UnknownTopicRetries(-1), kgo.RecordDeliveryTimeout(time.Second)}, kgo.ErrRecordTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) { testUnknownTopic(t, tc.opts, tc.cause) })
	}
}

func testUnknownTopic(t *testing.T, opts []kgo.Opt, cause error) {
	const u = "unknown"
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	h := newFailHook()
	cl := newClient(t, c, append(append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.MetadataMinAge(10 * time.Millisecond),
	}, opts...), failStopOpts(h)...)...)

	f := checkWave(t, await(ctx, t, produceAsync(ctx, cl, recs(u, 0, 0, 3)...)), cause)
	checkHooked(ctx, t, h, f, u, -1, cause)
	checkRejected(t, await(ctx, t, produceAsync(ctx, cl, recs(u, 0, 3, 5)...)), f, cause)

	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = u, 1, 1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil && len(resp.Topics) == 1 {
		err = kerr.ErrorForCode(resp.Topics[0].ErrorCode)
	}
	if err != nil {
		t.Fatalf("creating %s: %v", u, err)
	}

	// The topic exists now, but stays failed until recovered.
	checkRejected(t, await(ctx, t, produceAsync(ctx, cl, recs(u, 0, 5, 7)...)), f, cause)
	if hwm := c.PartitionInfo(u, 0).HighWatermark; hwm != 0 {
		t.Fatalf("%s/0 high watermark %d while failed, want 0", u, hwm)
	}

	recoverAndReproduce(ctx, t, cl, c, h, f, 0, 7)
}

// TestTransaction: a partition fails inside a transaction; TryCommit is
// refused (the partition stays failed), TryAbort succeeds and recovers it, read_committed sees
// nothing of the aborted transaction, and a new transaction producing
// everything again commits it in order.
func TestTransaction(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2, topic)
	h := newFailHook()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.TransactionalID("failstop-txn"),
	}, failStopOpts(h)...)...)

	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produceOK(ctx, t, cl, recs(topic, 0, 0, 3)...)
	fix := faultProduce(kerr.InvalidRecord, -1)(c)
	f := checkWave(t, await(ctx, t, produceAsync(ctx, cl, recs(topic, 0, 3, 6)...)), kerr.InvalidRecord)
	checkHooked(ctx, t, h, f, topic, 0, kerr.InvalidRecord)
	fix()
	checkRejected(t, await(ctx, t, produceAsync(ctx, cl, recs(topic, 0, 6, 8)...)), f, kerr.InvalidRecord)

	err := cl.EndTransaction(ctx, kgo.TryCommit)
	if !errors.Is(err, kerr.TransactionAbortable) {
		t.Fatalf("EndTransaction(TryCommit) = %v, want an error wrapping TRANSACTION_ABORTABLE", err)
	}
	checkRejected(t, await(ctx, t, produceAsync(ctx, cl, rec(topic, 0, 8))), f, kerr.InvalidRecord)
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatalf("EndTransaction(TryAbort): %v", err)
	}
	// The abort recovered the partition: recovering it is refused (not
	// failed), and the new transaction below writes.
	if err := recoverWhenReturned(ctx, t, cl, f, nil); err == nil || failureOf(err) != nil {
		t.Fatalf("recovering the failure after the abort: %v, want a refusal (not failed)", err)
	}

	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	res := produceOK(ctx, t, cl, recs(topic, 0, 0, 8)...)
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatalf("EndTransaction(TryCommit) of the new transaction: %v", err)
	}
	last := res[len(res)-1].r.Offset

	seqs := func(rs []*kgo.Record) []int {
		var s []int
		for _, r := range rs {
			s = append(s, seqOf(t, r))
		}
		return s
	}
	// read_committed: the committed transaction, in order, nothing aborted.
	if got := seqs(readLog(ctx, t, c, topic, 0, kgo.ReadCommitted(), last)); !slices.Equal(got, seqRange(0, 8)) {
		t.Fatalf("read_committed sees %v, want %v", got, seqRange(0, 8))
	}
	// read_uncommitted: the aborted transaction wrote only the prefix
	// before the failure.
	if got, want := seqs(readLog(ctx, t, c, topic, 0, kgo.ReadUncommitted(), last)), append(seqRange(0, 3), seqRange(0, 8)...); !slices.Equal(got, want) {
		t.Fatalf("read_uncommitted sees %v, want %v", got, want)
	}
	checkHookOnce(t, h)
}

// failLogger closes ch when a produce batch fails; kgo logs this under the
// partition's lock just before it fails the batch's records.
type failLogger struct {
	once sync.Once
	ch   chan struct{}
}

func (*failLogger) Level() kgo.LogLevel { return kgo.LogLevelInfo }
func (l *failLogger) Log(_ kgo.LogLevel, msg string, _ ...any) {
	if msg == "batch in a produce request failed" {
		l.once.Do(func() { close(l.ch) })
	}
}

// TestOptionOffKeepsReorderBug documents today's behaviour, unchanged with
// the option off: r1 fails with INVALID_RECORD, and r2, produced after the
// failure was processed but before r1's promise ran, is written (offset 0),
// ahead of r1 if r1 is produced again. The hook is not called.
func TestOptionOffKeepsReorderBug(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 2, topic)
	lg := &failLogger{ch: make(chan struct{})}
	h := newFailHook()
	cl := newClient(t, c,
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0),
		kgo.WithLogger(lg), kgo.WithHooks(h),
	)

	produceOK(ctx, t, cl, rec(topic, 1, 0)) // metadata
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord})

	// Hold the single promise goroutine in a promise.
	entered, gate := make(chan struct{}), make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(gate) }) }
	t.Cleanup(openGate)
	cl.Produce(ctx, rec(topic, 1, 1), func(*kgo.Record, error) { close(entered); <-gate })
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("gate promise never ran")
	}

	p1 := produceAsync(ctx, cl, rec(topic, 0, 1))
	select {
	case <-lg.ch:
	case <-ctx.Done():
		t.Fatal("r1's batch never failed")
	}
	p2 := produceAsync(ctx, cl, rec(topic, 0, 2))
	openGate()

	r1, r2 := await(ctx, t, p1)[0], await(ctx, t, p2)[0]
	if !errors.Is(r1.err, kerr.InvalidRecord) {
		t.Fatalf("r1: %v, want INVALID_RECORD", r1.err)
	}
	if r2.err != nil || r2.r.Offset != 0 {
		t.Fatalf("r2: offset %d, err %v; want today's bug: r2 written at offset 0", r2.r.Offset, r2.err)
	}
	checkLog(ctx, t, c, topic, 0, []int{2})
	if evs := h.snapshot(); len(evs) != 0 {
		t.Fatalf("hook called with the option off: %v", evs)
	}
}

// rrManual puts keyed records in their Record.Partition, consistently (like
// ManualPartitioner), and unkeyed records round robin, free to move.
type rrManual struct{}

func (rrManual) ForTopic(string) kgo.TopicPartitioner {
	return &rrManualTopic{kgo.RoundRobinPartitioner().ForTopic("")}
}

type rrManualTopic struct{ rr kgo.TopicPartitioner }

func (*rrManualTopic) RequiresConsistency(r *kgo.Record) bool { return r.Key != nil }

func (p *rrManualTopic) Partition(r *kgo.Record, n int) int {
	if r.Key != nil {
		return int(r.Partition)
	}
	return p.rr.Partition(r, n)
}

// TestUnkeyedRoutedAround: on a 3-partition topic, once partition 0 fails,
// unkeyed records go to the other partitions and succeed, while keyed
// records for partition 0 are rejected. default-partitioner: kgo's default
// (sticky, adaptive) with a key that hashes to 0 and large unkeyed records so
// that it picks many partitions; round-robin: a partitioner that picks 0 for
// every third unkeyed record, and places keyed records manually.
func TestUnkeyedRoutedAround(t *testing.T) {
	const nParts = 3
	// A key the default partitioner (murmur2, as in Kafka) puts in 0.
	hasher := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	var key0 []byte
	for i := 0; key0 == nil; i++ {
		if k := []byte("key-" + strings.Repeat("x", i)); hasher.Partition(&kgo.Record{Key: k}, nParts) == 0 {
			key0 = k
		}
	}
	for _, tc := range []struct {
		name    string
		opts    []kgo.Opt
		valSize int
	}{
		{"default-partitioner", nil, 40 << 10},
		{"round-robin", []kgo.Opt{kgo.RecordPartitioner(rrManual{})}, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, nParts, topic)
			h := newFailHook()
			cl := newClient(t, c, append(append([]kgo.Opt{kgo.ProducerLinger(0)}, tc.opts...), failStopOpts(h)...)...)
			keyed := func(from, to int) []*kgo.Record {
				rs := recs(topic, 0, from, to)
				for _, r := range rs {
					r.Key = key0
				}
				return rs
			}

			fix := faultProduce(kerr.InvalidRecord, -1)(c)
			wave := await(ctx, t, produceAsync(ctx, cl, keyed(0, 3)...))
			for _, w := range wave {
				if w.r.Partition != 0 {
					t.Fatalf("keyed record went to partition %d, want 0", w.r.Partition)
				}
			}
			f := checkWave(t, wave, kerr.InvalidRecord)
			checkHooked(ctx, t, h, f, topic, 0, kerr.InvalidRecord)
			fix()

			var unkeyed []*kgo.Record
			for range 60 {
				unkeyed = append(unkeyed, &kgo.Record{Topic: topic, Value: make([]byte, tc.valSize)})
			}
			perPart := make([]int, nParts)
			for _, r := range produceOK(ctx, t, cl, unkeyed...) {
				perPart[r.r.Partition]++
			}
			if perPart[0] != 0 {
				t.Fatalf("unkeyed records per partition %v: some went to failed partition 0", perPart)
			}
			t.Logf("unkeyed records per partition: %v", perPart)
			checkRejected(t, await(ctx, t, produceAsync(ctx, cl, keyed(3, 5)...)), f, kerr.InvalidRecord)
			checkLog(ctx, t, c, topic, 0, nil)

			recoverOK(ctx, t, cl, f, keyed(0, 5)...)
			checkLog(ctx, t, c, topic, 0, seqRange(0, 5))
		})
	}
}

// TestNewClientRejectsUnsafe: the option cannot keep order with more than one
// non-idempotent request in flight, nor with acks=0; idempotent produce
// cancellation is allowed (a record that may be written fails with
// ErrPossiblyWritten).
func TestNewClientRejectsUnsafe(t *testing.T) {
	c := newCluster(t, 1, topic)
	for _, tc := range []struct {
		name   string
		opts   []kgo.Opt
		reject bool
	}{
		{"non-idempotent-inflight-2", []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(2)}, true},
		{"acks-0", []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.NoAck())}, true},
		{"idempotent-produce-cancellation", []kgo.Opt{kgo.AllowIdempotentProduceCancellation()}, false},
		{"non-idempotent-inflight-1", []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(1)}, false},
		{"non-idempotent-acks-1", []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck())}, false},
		{"idempotent", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mk := func(opts ...kgo.Opt) error {
				cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
				if cl != nil {
					cl.Close()
				}
				return err
			}
			if err := mk(tc.opts...); err != nil {
				t.Fatalf("without the option: %v", err)
			}
			err := mk(append(tc.opts, kgo.FailPartitionOnProduceFailure())...)
			switch {
			case !tc.reject && err != nil:
				t.Fatalf("with the option: %v", err)
			case tc.reject && (err == nil || !strings.Contains(err.Error(), "FailPartitionOnProduceFailure")):
				t.Fatalf("with the option: err = %v, want an error mentioning FailPartitionOnProduceFailure", err)
			}
		})
	}
}

// recoverAndReproduce recovers f's partition (or topic) with the records
// [from, to) of partition 0, every one of which failed or was rejected, and
// checks that the log then holds [0, to) and that the hook ran exactly once.
func recoverAndReproduce(ctx context.Context, t *testing.T, cl *kgo.Client, c *kfake.Cluster, h *failHook, f *failure, from, to int) {
	t.Helper()
	recoverOK(ctx, t, cl, f, recs(f.Topic, 0, from, to)...)
	checkLog(ctx, t, c, f.Topic, 0, seqRange(0, to))
	checkHookOnce(t, h)
}

// checkHooked checks that the hook's next call was with f, a failure of
// topic/partition wrapping cause (f is what the failed records carry, see
// checkWave).
func checkHooked(ctx context.Context, t *testing.T, h *failHook, f *failure, topic string, partition int32, cause error) {
	t.Helper()
	if ev := h.wait(ctx, t); ev != f {
		t.Fatalf("the hook was called with %v, the failed records carry %v: want one failure", ev, f)
	}
	checkEvent(t, f, topic, partition, cause)
}

func checkHookOnce(t *testing.T, h *failHook) {
	t.Helper()
	if evs := h.snapshot(); len(evs) != 1 {
		t.Fatalf("hook called %d times (%v), want once", len(evs), evs)
	}
}

// holdFirstProduce holds the next produce request the cluster receives
// until the returned release is called (at the latest, at cleanup); held is
// closed once the request is held. Later requests are answered normally.
func holdFirstProduce(t *testing.T, c *kfake.Cluster) (held <-chan struct{}, release func()) {
	t.Helper()
	return holdFirst(t, c, kmsg.Produce, func(kmsg.Request) bool { return true })
}

// holdFirst holds the first request of key that match accepts until the
// returned release is called (at the latest, at cleanup); held is closed
// once the request is held. Other requests are answered normally.
func holdFirst(t *testing.T, c *kfake.Cluster, key kmsg.Key, match func(kmsg.Request) bool) (held <-chan struct{}, release func()) {
	t.Helper()
	heldc, releasec := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(releasec) }) }
	t.Cleanup(release)
	first := true
	c.ControlKey(int16(key), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if !first {
			c.DropControl()
			return nil, nil, false
		}
		if !match(req) {
			c.KeepControl()
			return nil, nil, false
		}
		first = false // control functions run serially
		close(heldc)
		c.SleepControl(func() { <-releasec })
		return nil, nil, false // then answer normally
	})
	return heldc, release
}
