// Package e2e_test holds the end-to-end produce benchmarks of `make bench`
// (tests/bench/bench.sh): a real kgo client producing to an in-process kfake
// cluster. It has only test files, and builds three ways from the same
// source:
//
//   - against pristine franz-go v1.22.3 (go test -tags pristine, with the
//     go.work that `upstream/patchset.sh pristine` writes): BenchmarkProduce
//     only, since the fail-stop API does not exist there;
//   - against the patched tree (the repository's go.work) with the option
//     off: BenchmarkProduce, the same binary as below;
//   - against the patched tree with KGO_BENCH_FAIL_STOP=1 in the
//     environment, which adds kgo.FailPartitionOnProduceFailure() to
//     BenchmarkProduce's client (the same variable turns the option on in
//     kgo's own hot path benchmarks). BenchmarkRejected and
//     BenchmarkRecovery (failstop_bench_test.go) exist only here.
//
// shim_patched_test.go and shim_pristine_test.go hold the only code that
// differs between the builds.
package e2e_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "bench"

// failStopEnv is the environment variable that turns the option on, shared
// with pkg/kgo's produce_bench_test.go.
const failStopEnv = "KGO_BENCH_FAIL_STOP"

// optionOpts returns the client options that the option-on run adds: none
// unless KGO_BENCH_FAIL_STOP is set. On the pristine build, where the option
// does not exist, a set KGO_BENCH_FAIL_STOP fails the benchmark rather than
// silently measuring pristine twice.
func optionOpts(b *testing.B) []kgo.Opt {
	b.Helper()
	if os.Getenv(failStopEnv) == "" {
		return nil
	}
	if !failStopAvailable {
		b.Fatalf("%s is set, but this binary was built against pristine franz-go, which has no FailPartitionOnProduceFailure", failStopEnv)
	}
	return failStopOpt()
}

var codecs = []struct {
	name  string
	codec kgo.CompressionCodec
}{
	{"none", kgo.NoCompression()},
	{"lz4", kgo.Lz4Compression()},   // github.com/pierrec/lz4/v4
	{"zstd", kgo.ZstdCompression()}, // github.com/klauspost/compress/zstd
}

// The workload: keyed records spread over every partition by kgo's default
// partitioner. Keys and values are generated once, from a fixed seed, and
// shared by every record (kgo does not modify them), so the only per-record
// allocation of the benchmark itself is the *kgo.Record.
const (
	nKeys   = 1 << 14 // distinct keys: each partition of 1024 sees about 16
	nValues = 1 << 10
)

var keys, values = genWorkload()

// genWorkload returns the keys and values. A value is about 130 bytes of
// JSON-like text whose last 32 bytes are random hex: it compresses, as real
// payloads do, but not to nothing, so that the codecs have work to do.
func genWorkload() ([][]byte, [][]byte) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := make([][]byte, nKeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "customer-%06d", rng.IntN(1_000_000))
	}
	values := make([][]byte, nValues)
	for i := range values {
		values[i] = fmt.Appendf(nil, `{"event":"order_placed","seq":%d,"amount_cents":%d,"currency":"EUR","token":"%016x%016x"}`,
			i, rng.IntN(100_000), rng.Uint64(), rng.Uint64())
	}
	return keys, values
}

func benchRecord(i int) *kgo.Record {
	return &kgo.Record{Topic: topic, Key: keys[i%nKeys], Value: values[i%nValues]}
}

// newCluster starts a one-broker kfake cluster with topic seeded with
// nparts partitions. BlackholeProduce keeps the broker from storing what it
// is sent (it still validates sequence numbers and answers with offsets), so
// that broker-side storage does not dominate a client benchmark. The cluster
// runs in this process: its CPU time and allocations count in ns/op, B/op
// and allocs/op, identically on every side.
func newCluster(b *testing.B, nparts int32) *kfake.Cluster {
	b.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(nparts, topic), kfake.BlackholeProduce())
	if err != nil {
		b.Fatal(err)
	}
	return c
}

func newClient(b *testing.B, c *kfake.Cluster, opts ...kgo.Opt) *kgo.Client {
	b.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	return cl
}

// BenchmarkProduce measures end-to-end produce throughput: b.N keyed records
// produced with Produce from one goroutine, then Flush, timed from the first
// Produce until Flush returns (every promise has run), against an in-process
// kfake broker. The client is kgo's default producer (idempotent, acks=all,
// 10ms linger, default partitioner) plus the batch codec, and, when
// KGO_BENCH_FAIL_STOP is set, FailPartitionOnProduceFailure() (without a
// hook: the option alone). Each run makes a new client, and produces and
// flushes one record before the timer starts, so that metadata and the
// producer ID are loaded; the cluster is made once per sub-benchmark.
//
// ns/op is per record; records/s is b.N over the timed duration;
// allocs/record is allocs/op before rounding down (see readMallocs).
func BenchmarkProduce(b *testing.B) {
	extra := optionOpts(b)
	for _, nparts := range []int32{8, 1024} {
		b.Run(fmt.Sprintf("partitions=%d", nparts), func(b *testing.B) {
			for _, cc := range codecs {
				var c *kfake.Cluster
				b.Run("codec="+cc.name, func(b *testing.B) {
					if c == nil {
						c = newCluster(b, nparts)
					}
					opts := append([]kgo.Opt{kgo.ProducerBatchCompression(cc.codec)}, extra...)
					benchProduce(b, c, opts)
				})
				if c != nil {
					c.Close()
				}
			}
		})
	}
}

func benchProduce(b *testing.B, c *kfake.Cluster, opts []kgo.Opt) {
	ctx := context.Background()
	cl := newClient(b, c, opts...)
	defer cl.Close()

	if err := cl.ProduceSync(ctx, benchRecord(0)).FirstErr(); err != nil {
		b.Fatalf("warm-up produce: %v", err)
	}

	var failed atomic.Int64
	var firstErr atomic.Value
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			if failed.Add(1) == 1 {
				firstErr.Store(err)
			}
		}
	}

	b.ReportAllocs()
	mallocs := readMallocs()
	b.ResetTimer()
	for i := range b.N {
		cl.Produce(ctx, benchRecord(i), promise)
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	mallocs = readMallocs() - mallocs

	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d records failed, the first with: %v", n, b.N, firstErr.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "records/s")
	b.ReportMetric(float64(mallocs)/float64(b.N), "allocs/record")
}

// readMallocs returns the process's cumulative count of heap allocations.
// allocs/op is an integer division, which hides the per-batch allocations
// amortized over many records: allocs/record, the same count as a fraction,
// shows them. Like allocs/op, it includes the in-process broker's.
func readMallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}
