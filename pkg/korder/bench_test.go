package korder_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// BenchmarkProduce compares the Producer's throughput with raw
// kgo.Client.Produce, against an in-process kfake that discards what it is
// sent (BlackholeProduce), with keyed records over 8 partitions and kgo's
// default producer settings. Compare the two with `benchstat -col /impl`
// (`make bench` does).
//
// b.N records are produced from one goroutine, then flushed; the time runs
// from the first Produce until Flush returns. records/s is b.N over that
// time, and allocs/record is allocs/op unrounded. Each run makes a new
// client (or Producer) and, before the timer starts, warms it up with one
// record, then with warmRecords more: the benchmark measures the steady
// state, not a new client growing its buffers (and korder its carrier
// rings) to the load.
//
//   - impl=kgo is raw kgo as an application uses it without this
//     repository: FailPartitionOnProduceFailure off, so a failed record is
//     only reported to its promise and the partition carries on.
//   - impl=kgo+closure is raw kgo with each promise wrapped in a closure
//     that only calls it: the least any wrapper that sees each record's
//     outcome can cost, as a floor for impl=korder.
//   - impl=korder is a Producer (the option on, and its hook) with
//     WithPolicies(Retry(10, 0)): a failed record is produced again, in
//     order, at once. Backoff 0 because the injected failures are transient
//     and the benchmark measures korder's recovery work, not a sleep.
//
// failures=1% makes kfake answer every 100th partition batch it is sent
// (the batches of each produce request counted in order, retries included)
// with INVALID_RECORD, which is not retryable: 1% of the batches, and so
// about 1% of the records, fail. With failures=0% nothing is injected.
// failed/op is the fraction of records whose promise got an error: 0 for
// korder, which writes every record, and for kgo the records of the failed
// batches. A batch holds on the order of a thousand records here (10ms
// linger), so a run needs about a million records to see a handful of
// failed batches (use -benchtime 1000000x or more), and kgo's failed/op
// varies from run to run with the size of the batches that fail.
func BenchmarkProduce(b *testing.B) {
	for _, f := range []struct {
		name string
		nth  int // fail every nth batch; 0: none
	}{
		{"0%", 0},
		{"1%", 100},
	} {
		b.Run("failures="+f.name, func(b *testing.B) {
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, topic), kfake.BlackholeProduce())
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if f.nth > 0 {
				injectBatchFailures(c, f.nth)
			}
			kopts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}

			b.Run("impl=kgo", func(b *testing.B) {
				cl, err := kgo.NewClient(kopts...)
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				benchRun(b, cl.Produce, cl.Flush, true)
			})
			b.Run("impl=kgo+closure", func(b *testing.B) {
				cl, err := kgo.NewClient(kopts...)
				if err != nil {
					b.Fatal(err)
				}
				defer cl.Close()
				produce := func(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
					cl.Produce(ctx, r, func(r *kgo.Record, err error) { promise(r, err) })
				}
				benchRun(b, produce, cl.Flush, true)
			})
			b.Run("impl=korder", func(b *testing.B) {
				p, err := korder.NewProducer(kopts, korder.WithPolicies(korder.Retry(10, 0)))
				if err != nil {
					b.Fatal(err)
				}
				defer p.Close()
				benchRun(b, p.Produce, p.Flush, false)
			})
		})
	}
}

// injectBatchFailures makes kfake answer every nth partition batch it is
// sent, counting the batches of every produce request in order, with
// INVALID_RECORD. A control function that only observes (it never handles
// the request) counts the batches of each request and installs a
// one-request fault for the partitions whose turn it is; the cluster checks
// faults after its control functions, so the fault answers this very
// request. Both run on the cluster goroutine, the only user of seen.
func injectBatchFailures(c *kfake.Cluster, nth int) {
	var seen int
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		for _, t := range req.(*kmsg.ProduceRequest).Topics {
			var fail []int32
			for _, p := range t.Partitions {
				if seen++; seen%nth == 0 {
					fail = append(fail, p.Partition)
				}
			}
			if len(fail) > 0 {
				c.Fault(kfake.Fault{
					Keys:       []kmsg.Key{kmsg.Produce},
					Topic:      t.Topic,   // "" (all) from produce v13, which names topics by ID
					TopicID:    t.TopicID, // zero (all) before v13
					Partitions: fail,
					Err:        kerr.InvalidRecord,
					Count:      1,
				})
			}
		}
		return nil, nil, false
	})
}

// warmRecords is how many records benchRun produces before it starts the
// timer, once the first one is through.
const warmRecords = 200_000

// benchRun produces b.N records through produce and flushes. If
// allowInjected, records failed with the injected INVALID_RECORD are
// counted, not errors.
func benchRun(b *testing.B, produce func(context.Context, *kgo.Record, func(*kgo.Record, error)), flush func(context.Context) error, allowInjected bool) {
	ctx := context.Background()
	value := make([]byte, 100)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte{byte(i), byte(i >> 8), 'k'}
	}

	// Warm up metadata and the producer ID. With failures injected the
	// warm-up record may itself fail; that is fine.
	warm := make(chan error, 1)
	produce(ctx, &kgo.Record{Topic: topic, Key: keys[0], Value: value}, func(_ *kgo.Record, err error) { warm <- err })
	if err := flush(ctx); err != nil {
		b.Fatal(err)
	}
	if err := <-warm; err != nil && !(allowInjected && errors.Is(err, kerr.InvalidRecord)) {
		b.Fatalf("warm-up produce: %v", err)
	}
	// Then reach the steady state: kgo's pools and buffers, and korder's
	// carrier rings, grow to what this load needs while the first
	// records are in flight, and a run should measure neither.
	for i := range warmRecords {
		produce(ctx, &kgo.Record{Topic: topic, Key: keys[i%len(keys)], Value: value}, func(*kgo.Record, error) {})
	}
	if err := flush(ctx); err != nil {
		b.Fatal(err)
	}

	var failed, unexpected atomic.Int64
	var firstErr atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err == nil {
			return
		}
		failed.Add(1)
		if allowInjected && errors.Is(err, kerr.InvalidRecord) {
			return
		}
		if unexpected.Add(1) == 1 {
			first := err // declared here, so that only this path allocates
			firstErr.Store(&first)
		}
	}

	b.ReportAllocs()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mallocs := ms.Mallocs
	b.ResetTimer()
	for i := range b.N {
		produce(ctx, &kgo.Record{Topic: topic, Key: keys[i%len(keys)], Value: value}, promise)
	}
	if err := flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	runtime.ReadMemStats(&ms)
	mallocs = ms.Mallocs - mallocs

	if n := unexpected.Load(); n > 0 {
		b.Fatalf("%d of %d records failed unexpectedly, the first with: %v", n, b.N, *firstErr.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(failed.Load())/float64(b.N), "failed/op")
	// allocs/op before its rounding down to an integer, which hides the
	// allocations amortized over many records. Like allocs/op, it counts
	// the in-process broker's too.
	b.ReportMetric(float64(mallocs)/float64(b.N), "allocs/record")
}
