// Command isolation writes the data of the isolation chart (make chart): the
// records/s written to each partition over time, for raw kgo and for korder,
// while every produce to partition 0 fails with a retryable error for a few
// seconds.
//
// Each mode gets a fresh in-process kfake (two brokers, partition 0 led by a
// broker of its own, produce requests discarded) and two goroutines that
// produce keyed records at full speed through kgo's default partitioner.
// After a warm-up of -before, NOT_ENOUGH_REPLICAS is injected for every
// produce to partition 0 for -fault, then removed; the run goes on for
// -after. A sampler counts, every -step, the records each partition's
// promises reported written. The CSV has one row per mode, time and
// partition: mode,t_s,partition,records_per_s, and the fault window as
// comment lines (# fault_start_s=..., # fault_end_s=...).
//
// raw kgo is kgo as upstream ships it (no FailPartitionOnProduceFailure):
// kgo keeps partition 0's records and retries them, and they fill its
// MaxBufferedRecords, so Produce blocks for every partition. korder runs
// with its default kgo.MaxBufferedPartitionRecords(10000): partition 0's
// records past the bound come back to korder, which holds up to its default
// MaxHeld (10000) and produces them again once partition 0 drains, so the
// other partitions keep kgo's buffer; the rest fail with korder.ErrHeldFull
// (printed: failed records).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const topic = "isolation"

func main() {
	out := flag.String("out", "isolation.csv", "CSV file to write")
	partitions := flag.Int("partitions", 8, "partitions of the topic")
	before := flag.Duration("before", 1500*time.Millisecond, "time before the fault (after a 500 ms warm-up)")
	fault := flag.Duration("fault", 2*time.Second, "how long partition 0 fails")
	after := flag.Duration("after", 2*time.Second, "time after the fault")
	step := flag.Duration("step", 200*time.Millisecond, "sampling interval")
	flag.Parse()

	f, err := os.Create(*out)
	if err != nil {
		fail(err)
	}
	w := bufio.NewWriter(f)
	fmt.Fprintf(w, "# records/s written per partition; NOT_ENOUGH_REPLICAS on every produce to partition 0 during the fault\n")
	fmt.Fprintf(w, "# fault_start_s=%.3f\n# fault_end_s=%.3f\n", before.Seconds(), (*before + *fault).Seconds())
	fmt.Fprintln(w, "mode,t_s,partition,records_per_s")
	for _, mode := range []string{"raw kgo", "korder"} {
		fmt.Fprintf(os.Stderr, "isolation: %s...\n", mode)
		if err := run(w, mode, *partitions, *before, *fault, *after, *step); err != nil {
			fail(fmt.Errorf("%s: %w", mode, err))
		}
	}
	if err := w.Flush(); err != nil {
		fail(err)
	}
	if err := f.Close(); err != nil {
		fail(err)
	}
	fmt.Fprintf(os.Stderr, "isolation: wrote %s\n", *out)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "isolation:", err)
	os.Exit(1)
}

type producer interface {
	produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	flush(ctx context.Context) error
	close()
}

type rawKgo struct{ cl *kgo.Client }

func (p rawKgo) produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.cl.Produce(ctx, r, promise)
}
func (p rawKgo) flush(ctx context.Context) error { return p.cl.Flush(ctx) }
func (p rawKgo) close()                          { p.cl.Close() }

type korderProducer struct{ p *korder.Producer }

func (p korderProducer) produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.p.Produce(ctx, r, promise)
}
func (p korderProducer) flush(ctx context.Context) error { return p.p.Flush(ctx) }
func (p korderProducer) close()                          { p.p.Close() }

func run(w *bufio.Writer, mode string, partitions int, before, faultFor, after, step time.Duration) error {
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(int32(partitions), topic), kfake.BlackholeProduce())
	if err != nil {
		return err
	}
	defer c.Close()
	for part := range int32(partitions) { // partition 0 on broker 1, the rest on broker 0
		leader := int32(0)
		if part == 0 {
			leader = 1
		}
		if c.PartitionInfo(topic, part).Leader != leader {
			if err := c.MoveTopicPartition(topic, part, leader); err != nil {
				return err
			}
		}
	}
	kopts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordRetries(2)}
	var p producer
	if mode == "korder" {
		kp, err := korder.NewProducer(kopts, korder.WithPolicies(korder.Retry(1000, 10*time.Millisecond)))
		if err != nil {
			return err
		}
		p = korderProducer{kp}
	} else {
		cl, err := kgo.NewClient(kopts...)
		if err != nil {
			return err
		}
		p = rawKgo{cl}
	}
	defer p.close()

	written := make([]atomic.Int64, partitions)
	var failed atomic.Int64
	promise := func(r *kgo.Record, err error) {
		if err == nil {
			written[r.Partition].Add(1)
		} else {
			failed.Add(1)
		}
	}
	defer func() { fmt.Fprintf(os.Stderr, "isolation: %s: %d failed records\n", mode, failed.Load()) }()
	ctx := context.Background()
	var stop atomic.Bool
	var wg sync.WaitGroup
	value := make([]byte, 92)
	for g := range 2 {
		wg.Go(func() {
			keys := make([][]byte, 1024)
			for i := range keys {
				keys[i] = []byte(strconv.Itoa(g) + "-" + strconv.Itoa(100000+i))
			}
			for i := 0; !stop.Load(); i++ {
				p.produce(ctx, &kgo.Record{Topic: topic, Key: keys[i%len(keys)], Value: value}, promise)
			}
		})
	}
	time.Sleep(500 * time.Millisecond) // warm-up, not sampled

	prev := make([]int64, partitions)
	for i := range prev {
		prev[i] = written[i].Load()
	}
	start := time.Now()
	last := start
	var h *kfake.FaultHandle
	total := before + faultFor + after
	for t := step; t <= total; t += step {
		time.Sleep(time.Until(start.Add(t)))
		now := time.Now()
		el := now.Sub(start)
		if h == nil && el >= before && el < before+faultFor {
			h = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: -1})
		}
		if h != nil && el >= before+faultFor {
			h.Remove()
			h = nil
		}
		secs := now.Sub(last).Seconds()
		for part := range partitions {
			n := written[part].Load()
			fmt.Fprintf(w, "%s,%.3f,%d,%.0f\n", mode, el.Seconds(), part, float64(n-prev[part])/secs)
			prev[part] = n
		}
		last = now
	}
	if h != nil {
		h.Remove()
	}
	stop.Store(true)
	wg.Wait()
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return p.flush(fctx)
}
