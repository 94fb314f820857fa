//go:build !pristine

package e2e_test

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The benchmarks of the fail-stop paths, which exist only on the patched
// tree, with the option on. Both use partition 0 of an 8-partition topic,
// records placed with the ManualPartitioner, and a non-retryable
// INVALID_RECORD injected with a kfake fault.

// failPartition0 makes kfake answer the next produce request that carries
// partition 0 of topic with INVALID_RECORD for that partition. at, if not
// nil, is set to the time at which kfake decided to fail it (on the cluster
// goroutine, before it builds and writes the response).
func failPartition0(c *kfake.Cluster, at *atomic.Int64) {
	c.Fault(kfake.Fault{
		Keys:       []kmsg.Key{kmsg.Produce},
		Partitions: []int32{0},
		Err:        kerr.InvalidRecord,
		Count:      1,
		When: func(kmsg.Request) bool {
			if at != nil {
				at.Store(time.Now().UnixNano())
			}
			return true
		},
	})
}

// failEvent is one OnProducePartitionFailed call.
type failEvent struct {
	f      *kgo.ErrProducePartitionFailed
	at     int64 // when the hook was called, unix ns
	readAt int64 // when the last produce response was read, unix ns
}

// benchHook is a kgo.HookProducePartitionFailed that timestamps each call
// and passes it on, and a kgo.HookBrokerRead that timestamps the reading of
// each produce response.
type benchHook struct {
	lastProduceRead atomic.Int64
	failed          chan failEvent
}

func newBenchHook() *benchHook { return &benchHook{failed: make(chan failEvent, 64)} }

func (h *benchHook) OnBrokerRead(_ kgo.BrokerMetadata, key int16, _ int, _, _ time.Duration, err error) {
	if key == int16(kmsg.Produce) && err == nil {
		h.lastProduceRead.Store(time.Now().UnixNano())
	}
}

// OnProducePartitionFailed must not block: it hands the failure over.
func (h *benchHook) OnProducePartitionFailed(f *kgo.ErrProducePartitionFailed) {
	ev := failEvent{f: f, at: time.Now().UnixNano(), readAt: h.lastProduceRead.Load()}
	select {
	case h.failed <- ev:
	default:
	}
}

func (h *benchHook) wait(b *testing.B) failEvent {
	b.Helper()
	select {
	case ev := <-h.failed:
		if ev.f.Partition != 0 || !errors.Is(ev.f.Err, kerr.InvalidRecord) {
			b.Fatalf("OnProducePartitionFailed(%d, %v), want partition 0 failed with INVALID_RECORD", ev.f.Partition, ev.f.Err)
		}
		return ev
	case <-time.After(10 * time.Second):
		b.Fatal("OnProducePartitionFailed was not called within 10s")
		return failEvent{}
	}
}

func newFailStopClient(b *testing.B, c *kfake.Cluster, h *benchHook) *kgo.Client {
	b.Helper()
	// Linger 0: a lone record is sent at once, so that the latencies
	// below are the client's and the broker's, not a linger timer's.
	return newClient(b, c,
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.FailPartitionOnProduceFailure(),
		kgo.WithHooks(h),
	)
}

func rec0() *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: 0, Key: keys[0], Value: values[0]}
}

// produceWait produces r and waits for its promise, returning the time at
// which the promise was called and its error.
func produceWait(ctx context.Context, cl *kgo.Client, r *kgo.Record) (time.Time, error) {
	type done struct {
		at  time.Time
		err error
	}
	ch := make(chan done, 1)
	cl.Produce(ctx, r, func(_ *kgo.Record, err error) { ch <- done{time.Now(), err} })
	d := <-ch
	return d.at, d.err
}

// recoverWait recovers f, partition 0's failure, with r, its one failed
// record, and waits for r's promise. It returns when the accepted call
// started (calls refused with ErrRecoveryPending, while r's promise was
// returning, are made again at once and not timed), when r's promise was
// called, and its error.
func recoverWait(cl *kgo.Client, f *kgo.ErrProducePartitionFailed, r *kgo.Record) (start, at time.Time, err error) {
	type done struct {
		at  time.Time
		err error
	}
	ch := make(chan done, 1)
	for deadline := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		start = time.Now()
		err = cl.RecoverProducePartition(f, func(_ *kgo.Record, err error) { ch <- done{time.Now(), err} }, r)
		if !errors.Is(err, kgo.ErrRecoveryPending) || start.After(deadline) {
			break
		}
	}
	if err != nil {
		return start, time.Time{}, err
	}
	d := <-ch
	return start, d.at, d.err
}

// warmFailStop returns a cluster with 8 partitions and a client with the
// option and h, warmed up with one record to partition 0.
func warmFailStop(ctx context.Context, b *testing.B) (*kfake.Cluster, *benchHook, *kgo.Client) {
	b.Helper()
	c := newCluster(b, 8)
	h := newBenchHook()
	cl := newFailStopClient(b, c, h)
	if _, err := produceWait(ctx, cl, rec0()); err != nil {
		b.Fatalf("warm-up produce: %v", err)
	}
	return c, h, cl
}

// BenchmarkRejected measures the rejection path while a partition is
// failed, through a connected client: Produce of a record to the failed
// partition, until its promise has been called with the partition's
// failure (a *kgo.ErrProducePartitionFailed). ns/op is per record, from the
// first Produce to the last promise. (pkg/kgo's BenchmarkProduceRejected measures the same
// path inside kgo, with no broker.)
func BenchmarkRejected(b *testing.B) {
	ctx := context.Background()
	c, h, cl := warmFailStop(ctx, b)
	defer c.Close()
	defer cl.Close()
	failPartition0(c, nil)
	if _, err := produceWait(ctx, cl, rec0()); !errors.Is(err, kerr.InvalidRecord) {
		b.Fatalf("the failing produce finished with %v, want INVALID_RECORD", err)
	}
	f := h.wait(b).f

	var n, bad atomic.Int64
	done := make(chan struct{})
	promise := func(_ *kgo.Record, err error) {
		if err != error(f) { // rejected: the failure itself
			bad.Add(1)
		}
		if n.Add(1) == int64(b.N) {
			close(done)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		cl.Produce(ctx, rec0(), promise)
	}
	<-done
	b.StopTimer()
	if bad.Load() > 0 {
		b.Fatalf("%d of %d records to the failed partition were not rejected with the partition's failure", bad.Load(), b.N)
	}
}

// BenchmarkRecovery measures how long failing and recovering a partition
// takes. Each iteration, on partition 0 of a connected client with
// FailPartitionOnProduceFailure and linger 0:
//
//  1. produces one record and waits for its promise: the time from Produce
//     to the promise is reported as produce-rtt, the baseline for (3);
//  2. makes kfake fail the next produce of the partition with
//     INVALID_RECORD, produces one record, and waits for the
//     OnProducePartitionFailed hook and the record's promise;
//  3. calls RecoverProducePartition with the hook's failure and the failed
//     record (again at once while refused with ErrRecoveryPending: its
//     promise is returning), which buffers it again, and waits for its
//     promise.
//
// Reported, as means over the iterations (sec/... in benchstat):
//
//   - ns/read-to-hook: from the moment kgo finished reading the failing
//     produce response off the connection (its HookBrokerRead call, which
//     kgo makes on the response goroutine right before it decodes and
//     handles the response) to the OnProducePartitionFailed call. This is
//     the "hook called within 100 us of the failing response being
//     handled" target: it covers decoding the response, failing the batch,
//     entering the failed state and dispatching the hook. ns/read-to-hook-p99
//     is its 99th percentile (the maximum below 100 iterations).
//   - ns/fault-to-hook: from the moment kfake decided to fail the partition
//     (the fault's When, on the cluster goroutine) to the hook call: the
//     above plus kfake building and writing the response and the loopback
//     hop.
//   - ns/recover-to-written: from the accepted call to RecoverProducePartition
//     to the promise of the record it buffered (written, with no error). It
//     includes a produce round trip; compare it with ns/produce-rtt, the
//     same round trip on a healthy partition.
//   - ns/op: the whole iteration (three produce round trips and the waits).
func BenchmarkRecovery(b *testing.B) {
	ctx := context.Background()
	c, h, cl := warmFailStop(ctx, b)
	defer c.Close()
	defer cl.Close()

	var faultAt atomic.Int64
	readToHook := make([]time.Duration, 0, b.N)
	var faultToHook, recoverToWritten, rtt time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		at, err := produceWait(ctx, cl, rec0())
		if err != nil {
			b.Fatalf("produce to the healthy partition: %v", err)
		}
		rtt += at.Sub(start)

		faultAt.Store(0)
		failPartition0(c, &faultAt)
		failed := rec0()
		_, ferr := produceWait(ctx, cl, failed)
		ev := h.wait(b)
		var fe *kgo.ErrProducePartitionFailed
		if !errors.Is(ferr, kerr.InvalidRecord) || !errors.As(ferr, &fe) || fe != ev.f {
			b.Fatalf("the failing produce finished with %v, want INVALID_RECORD carrying the hook's failure", ferr)
		}
		if ev.readAt == 0 || faultAt.Load() == 0 || ev.readAt < faultAt.Load() || ev.at < ev.readAt {
			b.Fatalf("inconsistent timestamps: fault %d, response read %d, hook %d", faultAt.Load(), ev.readAt, ev.at)
		}
		readToHook = append(readToHook, time.Duration(ev.at-ev.readAt))
		faultToHook += time.Duration(ev.at - faultAt.Load())

		start, at, err = recoverWait(cl, ev.f, failed)
		if err != nil {
			b.Fatalf("the recovered record: %v", err)
		}
		recoverToWritten += at.Sub(start)
	}
	b.StopTimer()

	n := float64(b.N)
	var sum time.Duration
	for _, d := range readToHook {
		sum += d
	}
	slices.Sort(readToHook)
	b.ReportMetric(float64(sum.Nanoseconds())/n, "ns/read-to-hook")
	p99 := (99*len(readToHook)+99)/100 - 1 // nearest rank
	b.ReportMetric(float64(readToHook[p99].Nanoseconds()), "ns/read-to-hook-p99")
	b.ReportMetric(float64(faultToHook.Nanoseconds())/n, "ns/fault-to-hook")
	b.ReportMetric(float64(recoverToWritten.Nanoseconds())/n, "ns/recover-to-written")
	b.ReportMetric(float64(rtt.Nanoseconds())/n, "ns/produce-rtt")
}
