package korder_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// BenchmarkOverheadAlternating measures what korder costs over raw kgo with
// no failures, by the method of issue 15: one goroutine produces 100-byte
// keyed records over 8 partitions to an in-process kfake that discards
// them; raw kgo (FailPartitionOnProduceFailure off), raw kgo with the
// option on, and a Producer with the default policies live in one process,
// are warmed up with warmRecords records each, then take turns producing
// overheadRecords records (and flushing) for overheadRounds rounds, in an
// order that rotates every round. It reports the median over the rounds of
// korder's time over raw kgo's in the same round (korder/raw), and of the
// option on over off (on/raw); the -cpu metrics are the same ratios of the
// CPU time the process used (every goroutine, kfake's too), which other
// load on the machine disturbs less than elapsed time. Run it with
// -benchtime 1x.
func BenchmarkOverheadAlternating(b *testing.B) {
	for range b.N {
		overheadRun(b)
	}
}

const (
	overheadRounds  = 60
	overheadRecords = 50_000
)

func overheadRun(b *testing.B) {
	b.StopTimer()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, topic), kfake.BlackholeProduce())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	kopts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	raw, err := kgo.NewClient(kopts...)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	on, err := kgo.NewClient(append(slices.Clip(kopts), kgo.FailPartitionOnProduceFailure())...)
	if err != nil {
		b.Fatal(err)
	}
	defer on.Close()
	p, err := korder.NewProducer(kopts)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()

	type impl struct {
		produce func(context.Context, *kgo.Record, func(*kgo.Record, error))
		flush   func(context.Context) error
	}
	impls := []impl{{raw.Produce, raw.Flush}, {on.Produce, on.Flush}, {p.Produce, p.Flush}}
	ctx := context.Background()
	value := make([]byte, 100)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte{byte(i), byte(i >> 8), 'k'}
	}
	var failed atomic.Pointer[error]
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.CompareAndSwap(nil, &err)
		}
	}
	run := func(im impl, n int) (wall, cpu time.Duration) {
		start, startCPU := time.Now(), processCPU()
		for i := range n {
			im.produce(ctx, &kgo.Record{Topic: topic, Key: keys[i%len(keys)], Value: value}, promise)
		}
		if err := im.flush(ctx); err != nil {
			b.Fatal(err)
		}
		return time.Since(start), processCPU() - startCPU
	}
	for _, im := range impls {
		run(im, warmRecords)
	}
	var korderRatios, onRatios, korderCPU, onCPU []float64
	b.StartTimer()
	for round := range overheadRounds {
		var d, cpu [3]time.Duration
		for j := range impls {
			k := (round + j) % len(impls)
			d[k], cpu[k] = run(impls[k], overheadRecords)
		}
		korderRatios = append(korderRatios, float64(d[2])/float64(d[0]))
		onRatios = append(onRatios, float64(d[1])/float64(d[0]))
		if cpu[0] > 0 {
			korderCPU = append(korderCPU, float64(cpu[2])/float64(cpu[0]))
			onCPU = append(onCPU, float64(cpu[1])/float64(cpu[0]))
		}
	}
	b.StopTimer()
	if err := failed.Load(); err != nil {
		b.Fatal(*err)
	}
	median := func(xs []float64) float64 {
		slices.Sort(xs)
		return xs[len(xs)/2]
	}
	b.ReportMetric(median(korderRatios), "korder/raw")
	b.ReportMetric(median(onRatios), "on/raw")
	if len(korderCPU) > 0 {
		b.ReportMetric(median(korderCPU), "korder/raw-cpu")
		b.ReportMetric(median(onCPU), "on/raw-cpu")
	}
}
