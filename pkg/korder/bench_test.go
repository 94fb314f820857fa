package korder_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// BenchmarkProduce compares the Producer's throughput with raw
// kgo.Client.Produce with no failures, against an in-process kfake that
// discards what it is sent, with keyed records over 8 partitions. Compare
// the two with `benchstat -col /impl`.
func BenchmarkProduce(b *testing.B) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(8, topic), kfake.BlackholeProduce())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	kopts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.FailPartitionOnProduceFailure()}

	value := make([]byte, 100)
	keys := make([][]byte, 1024)
	for i := range keys {
		keys[i] = []byte{byte(i), byte(i >> 8), 'k'}
	}
	run := func(b *testing.B, produce func(context.Context, *kgo.Record, func(*kgo.Record, error)), flush func(context.Context) error) {
		ctx := context.Background()
		promise := func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		}
		// Warm up metadata and the producer ID.
		produce(ctx, &kgo.Record{Topic: topic, Key: keys[0], Value: value}, promise)
		if err := flush(ctx); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		var i int
		for b.Loop() {
			produce(ctx, &kgo.Record{Topic: topic, Key: keys[i%len(keys)], Value: value}, promise)
			i++
		}
		if err := flush(ctx); err != nil {
			b.Fatal(err)
		}
	}

	b.Run("impl=kgo", func(b *testing.B) {
		cl, err := kgo.NewClient(kopts...)
		if err != nil {
			b.Fatal(err)
		}
		defer cl.Close()
		run(b, cl.Produce, cl.Flush)
	})
	b.Run("impl=korder", func(b *testing.B) {
		p, err := korder.NewProducer(kopts)
		if err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		run(b, p.Produce, p.Flush)
	})
}
