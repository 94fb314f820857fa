// Command unknowntopic measures what happens to a keyed record produced to a
// topic that does not exist, and how long it takes to settle: through korder
// with its default options and with a few kgo and korder options, through
// kgo with FailPartitionOnProduceFailure, and through kgo as upstream ships
// it. Each run gets a fresh in-process kfake cluster (one broker, no
// automatic topic creation) and kgo's default options unless the case says
// otherwise.
//
// Per case and run, it prints the time from Produce to the promise and the
// promise's error (none: the record was written), then the same for a
// second record produced to the topic once the first has settled. With
// -create d, the topic is created d after the first Produce, as an operator
// or a deployment might create it meanwhile.
//
//	go run ./tests/bench/unknowntopic [-runs 3] [-create 1.5s] [-case prefix] [-log]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

const topic = "no-such-topic"

// producer is the little the cases need of kgo's client and of korder.
type producer interface {
	Produce(context.Context, *kgo.Record, func(*kgo.Record, error))
	Close()
}

type kcase struct {
	name string
	make func(seeds []string) (producer, error)
}

// logOpt is kgo's logger, with -log.
var logOpt []kgo.Opt

func kgoClient(opts ...kgo.Opt) func([]string) (producer, error) {
	return func(seeds []string) (producer, error) {
		return kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, logOpt...), opts...)...)
	}
}

func korderProducer(kopts []kgo.Opt, opts ...korder.Opt) func([]string) (producer, error) {
	return func(seeds []string) (producer, error) {
		return korder.NewProducer(append(append([]kgo.Opt{kgo.SeedBrokers(seeds...)}, logOpt...), kopts...), opts...)
	}
}

var (
	unknown0   = kgo.UnknownTopicRetries(0)
	minAge     = kgo.MetadataMinAge(250 * time.Millisecond)
	retry1s    = korder.WithPolicies(korder.Retry(3, time.Second), korder.Stop())
	stopPolicy = korder.WithPolicies(korder.Stop())
)

var cases = []kcase{
	{"korder, default options", korderProducer(nil)},
	{"korder, UnknownTopicRetries(0)", korderProducer([]kgo.Opt{unknown0})},
	{"korder, MetadataMinAge(250ms)", korderProducer([]kgo.Opt{minAge})},
	{"korder, both", korderProducer([]kgo.Opt{unknown0, minAge})},
	{"korder, WithPolicies(Stop())", korderProducer(nil, stopPolicy)},
	{"korder, UnknownTopicRetries(0), Retry(3, 1s)", korderProducer([]kgo.Opt{unknown0}, retry1s)},
	{"korder, both, Retry(3, 1s)", korderProducer([]kgo.Opt{unknown0, minAge}, retry1s)},
	{"kgo + FailPartitionOnProduceFailure", kgoClient(kgo.FailPartitionOnProduceFailure())},
	{"kgo as upstream ships it", kgoClient()},
}

func main() {
	runs := flag.Int("runs", 3, "runs per case")
	create := flag.Duration("create", 0, "create the topic this long after the first Produce (0: never)")
	only := flag.String("case", "", "run only the cases whose name starts with this")
	debug := flag.Bool("log", false, "print kgo's log (info level)")
	flag.Parse()
	if *debug {
		logOpt = []kgo.Opt{kgo.WithLogger(kgo.BasicLogger(os.Stderr, kgo.LogLevelInfo, func() string { return time.Now().Format("15:04:05.000 ") }))}
	}
	for _, c := range cases {
		if !strings.HasPrefix(c.name, *only) {
			continue
		}
		fmt.Println(c.name)
		for range *runs {
			if err := measure(c, *create); err != nil {
				fmt.Fprintf(os.Stderr, "unknowntopic: %s: %v\n", c.name, err)
				os.Exit(1)
			}
		}
	}
}

// measure produces a keyed record to the topic, then a second one once the
// first has settled, and prints how each ended and when.
func measure(c kcase, create time.Duration) error {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return err
	}
	defer cluster.Close()
	p, err := c.make(cluster.ListenAddrs())
	if err != nil {
		return err
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	created := make(chan error, 1)
	if create > 0 {
		time.AfterFunc(create, func() { created <- createTopic(ctx, cluster) })
	}
	first := produce(ctx, p, "k1")
	if first.timeout {
		return errors.New("no promise after 5 minutes")
	}
	second := produce(ctx, p, "k2")
	if second.timeout {
		return errors.New("no promise for the second record after 5 minutes")
	}
	fmt.Printf("  %6.2fs: %s; a second record: %.2fs: %s\n", first.d.Seconds(), first.outcome(), second.d.Seconds(), second.outcome())
	if create > 0 {
		select {
		case err := <-created:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

type result struct {
	d       time.Duration
	err     error
	timeout bool
}

func (r result) outcome() string {
	if r.err == nil {
		return "written"
	}
	return r.err.Error()
}

func produce(ctx context.Context, p producer, key string) result {
	done := make(chan error, 1)
	start := time.Now()
	p.Produce(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte("v")}, func(_ *kgo.Record, err error) { done <- err })
	select {
	case err := <-done:
		return result{d: time.Since(start), err: err}
	case <-ctx.Done():
		return result{timeout: true}
	}
}

// createTopic creates the topic, with one partition, through a client of
// its own.
func createTopic(ctx context.Context, c *kfake.Cluster) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic, t.NumPartitions, t.ReplicationFactor = topic, 1, 1
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Topics[0].ErrorCode)
}
