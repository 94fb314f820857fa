package korder

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Item 10: a record whose dead-letter copy is written gets ErrDeadLettered,
// even if the Producer is closed right after the copy was written, before
// the record is settled: it got ErrClosed while it sat in the dead-letter
// topic. Close is called (and has marked the Producer closed) between the
// policies' decision and the settling.
func TestCloseAfterDeadLetterWrite(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t", "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Err: kerr.InvalidRecord})
	p, err := NewProducer([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner())},
		WithPolicies(DeadLetter("dlq")))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	decide := p.decide // no worker runs yet
	p.decide = func(c *call) act {
		a := decide(c)
		if errors.Is(a.err, ErrDeadLettered) {
			go p.Close()
			<-p.closing
		}
		return a
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	errc := make(chan error, 1)
	p.Produce(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}, func(_ *kgo.Record, err error) { errc <- err })
	select {
	case err := <-errc:
		if !errors.Is(err, ErrDeadLettered) {
			t.Fatalf("a record written to the dead-letter topic got %v at Close, want ErrDeadLettered", err)
		}
	case <-ctx.Done():
		t.Fatal("the record's promise did not run")
	}
	if hw := c.PartitionInfo("dlq", 0).HighWatermark; hw != 1 {
		t.Fatalf("the dead-letter topic holds %d records, want 1", hw)
	}
}
