package korder_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// A Producer replaces a kgo.Client for producing: only the constructor
// changes. Here the broker fails the first produce request to the topic;
// Retry produces the records again, in order.
func Example() {
	c, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "events"))
	defer c.Close()
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "events", Err: kerr.NotEnoughReplicas})

	p, err := korder.NewProducer(
		[]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordRetries(0)},
		korder.WithPolicies(korder.Retry(3, 10*time.Millisecond), korder.Stop()),
	)
	if err != nil {
		panic(err)
	}
	defer p.Close()

	ctx := context.Background()
	for i := range 3 {
		p.Produce(ctx, &kgo.Record{Topic: "events", Value: fmt.Appendf(nil, "e%d", i)}, func(r *kgo.Record, err error) {
			fmt.Printf("%s: %v\n", r.Value, err)
		})
	}
	if err := p.Flush(ctx); err != nil {
		panic(err)
	}
	fmt.Println("high watermark:", c.PartitionInfo("events", 0).HighWatermark)

	// Output:
	// e0: <nil>
	// e1: <nil>
	// e2: <nil>
	// high watermark: 3
}

// Dead-lettering with key quarantine: a record the broker rejects goes to
// the dead-letter topic, and later records with its key follow it there
// instead of overtaking it.
func ExampleDeadLetter() {
	c, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders", "orders-dlq"))
	defer c.Close()
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "orders", Err: kerr.PolicyViolation})

	p, err := korder.NewProducer(
		[]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)},
		korder.WithPolicies(korder.Isolate(), korder.DeadLetter("orders-dlq").QuarantineKeys()),
	)
	if err != nil {
		panic(err)
	}
	defer p.Close()

	ctx := context.Background()
	produce := func(key, value string) {
		done := make(chan struct{})
		p.Produce(ctx, &kgo.Record{Topic: "orders", Key: []byte(key), Value: []byte(value)}, func(r *kgo.Record, err error) {
			fmt.Printf("%s/%s dead-lettered: %v\n", r.Key, r.Value, errors.Is(err, korder.ErrDeadLettered))
			close(done)
		})
		<-done
	}
	produce("alice", "order-1") // rejected by the broker: dead-lettered
	h.Remove()
	produce("alice", "order-2") // alice is quarantined
	produce("bob", "order-3")   // other keys continue
	fmt.Println("quarantined:", string(p.Quarantined("orders")[0]))

	// Output:
	// alice/order-1 dead-lettered: true
	// alice/order-2 dead-lettered: true
	// bob/order-3 dead-lettered: false
	// quarantined: alice
}

// A topic that does not exist: kgo fails it after kgo.UnknownTopicRetries (4)
// more unknown answers, asking at most once per kgo.MetadataMinAge (5 s), so
// with the default policies such a record is dropped about a minute after
// Produce. With these options it is stopped after 3 s, or written if the
// topic is created meanwhile; the policies then also handle the
// UNKNOWN_TOPIC_OR_PARTITION answers brokers give just after a creation.
func ExampleWithPolicies_unknownTopic() {
	p, err := korder.NewProducer(
		[]kgo.Opt{kgo.SeedBrokers("localhost:9092"), kgo.UnknownTopicRetries(0), kgo.MetadataMinAge(250 * time.Millisecond)},
		korder.WithPolicies(korder.Retry(3, time.Second), korder.Stop()),
	)
	if err != nil {
		panic(err)
	}
	defer p.Close()
	p.Produce(context.Background(), &kgo.Record{Topic: "created-soon", Value: []byte("v")}, func(r *kgo.Record, err error) {
		if errors.Is(err, korder.ErrStopped) {
			p.Resume(r.Topic) // produce to it again once it exists
		}
	})
}
