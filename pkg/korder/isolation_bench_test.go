package korder_test

import (
	"context"
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

// BenchmarkIsolation measures how well a partition's failure is isolated
// from the topic's healthy partitions with per-partition holds
// (ManualPartitioner). Two goroutines produce 100-byte keyed records at full
// speed, round-robin over 16 partitions, to an in-process kfake that
// discards them, with WithPolicies(Retry(1000, 10ms)) and RecordRetries(2).
// After a warm-up, the rate at which the 15 healthy partitions' records are
// written is measured for isolationWindow with no fault, then for
// isolationWindow while partition 0 fails every produce; healthy-ratio is
// the second rate over the first (1 is perfect isolation). Run it with
// -benchtime 1x: each iteration takes about three windows.
//
//   - fault=invalid: partition 0 fails with INVALID_RECORD, which kgo does
//     not retry: what is left is korder's hold of partition 0.
//   - fault=retryable: partition 0 fails with NOT_ENOUGH_REPLICAS, which
//     kgo retries (twice) before failing the batch. kgo backs off the
//     whole broker connection (sink) before each retry, and kfake has one
//     broker, so every partition waits: this measures kgo, not korder.
//   - held=defaults: korder's default bounds (MaxHeldBytes 64 MiB).
//   - held=MaxHeld10000: MaxHeld(10000), the former default: once
//     partition 0 holds 10000 records, Produce blocks, and with it the
//     goroutines' records for every other partition.
//   - held=reject: RejectWhenHeldFull with MaxHeld(10000): a record that
//     does not fit fails at once with ErrHeldFull.
func BenchmarkIsolation(b *testing.B) {
	for _, fault := range []struct {
		name string
		err  *kerr.Error
	}{
		{"invalid", kerr.InvalidRecord},
		{"retryable", kerr.NotEnoughReplicas},
	} {
		for _, held := range []struct {
			name string
			opts []korder.Opt
		}{
			{"defaults", nil},
			{"MaxHeld10000", []korder.Opt{korder.MaxHeld(10000)}},
			{"reject", []korder.Opt{korder.MaxHeld(10000), korder.RejectWhenHeldFull()}},
		} {
			b.Run("fault="+fault.name+"/held="+held.name, func(b *testing.B) {
				for range b.N {
					isolationRun(b, fault.err, held.opts)
				}
			})
		}
	}
}

const (
	isolationPartitions = 16
	isolationWindow     = 2 * time.Second
)

func isolationRun(b *testing.B, faultErr *kerr.Error, opts []korder.Opt) {
	b.StopTimer()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(isolationPartitions, topic), kfake.BlackholeProduce())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p, err := korder.NewProducer([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RecordRetries(2),
	}, append([]korder.Opt{korder.WithPolicies(korder.Retry(1000, 10*time.Millisecond))}, opts...)...)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()

	var healthy, failed atomic.Int64
	promise := func(r *kgo.Record, err error) {
		switch {
		case err != nil:
			failed.Add(1)
		case r.Partition != 0:
			healthy.Add(1)
		}
	}
	ctx := context.Background()
	value := make([]byte, 92)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 2 {
		wg.Go(func() {
			keys := make([][]byte, 1024)
			for i := range keys {
				keys[i] = []byte(strconv.Itoa(g) + "-" + strconv.Itoa(100000+i)) // 8 bytes
			}
			for i := 0; !stop.Load(); i++ {
				p.Produce(ctx, &kgo.Record{Topic: topic, Partition: int32(i % isolationPartitions), Key: keys[i%len(keys)], Value: value}, promise)
			}
		})
	}
	rate := func() float64 {
		start, n := time.Now(), healthy.Load()
		time.Sleep(isolationWindow)
		return float64(healthy.Load()-n) / time.Since(start).Seconds()
	}
	time.Sleep(isolationWindow / 4) // warm-up
	b.StartTimer()
	base := rate()
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: faultErr, Count: -1})
	faulted := rate()
	b.StopTimer()
	h.Remove()
	stop.Store(true)
	wg.Wait()
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		b.Fatal(err)
	}
	s := p.Stats()
	b.ReportMetric(faulted/base, "healthy-ratio")
	b.ReportMetric(base, "healthy-records/s")
	b.ReportMetric(float64(s.HoldTime[topic])/float64(time.Second), "hold-s")
	b.ReportMetric(float64(failed.Load()), "failed-records")
}
