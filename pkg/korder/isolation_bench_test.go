package korder_test

import (
	"context"
	"os"
	"runtime/pprof"
	"slices"
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
// isolationWindow while partition 0 fails; healthy-ratio is the second rate
// over the first (1 is perfect isolation). Client, broker and the benchmark
// share the machine's cores, so anything that costs CPU during the fault,
// in korder, kgo or kfake, shows in the ratio. Run it with -benchtime 1x:
// each iteration takes about three windows.
//
//   - brokers=2: partition 0's leader is broker 1, the healthy
//     partitions' broker 0; brokers=1: one broker leads them all.
//   - fault=hold: partition 0 fails once (INVALID_RECORD), and broker 1
//     keeps the recovery's produce request until the window ends: partition
//     0 holds every record produced to it meanwhile, and nothing else
//     fails. This is korder's hold alone.
//   - fault=invalid: every produce to partition 0 fails with
//     INVALID_RECORD, which kgo does not retry; Retry produces the failed
//     records again every 10ms.
//   - fault=retryable: every produce to partition 0 fails with
//     NOT_ENOUGH_REPLICAS, which kgo retries itself; kgo backs off the
//     whole broker connection (sink) before each retry, so with brokers=1
//     every partition waits: that measures kgo, not korder. kgo retries
//     only after a metadata refresh, at most every MetadataMinAge (5s), so
//     it fails nothing within the window: with raw kgo
//     (BenchmarkIsolationRaw), partition 0's records fill kgo's
//     MaxBufferedRecords, and Produce blocks for every partition; korder's
//     default kgo.MaxBufferedPartitionRecords(10000) hands them back.
//   - fault=retryablefail: fault=retryable with MetadataMinAge(100ms), so
//     that kgo fails partition 0's records after RecordRetries(2) within
//     the window (the korder issue's "retryable error that kgo fails
//     after RecordRetries(2)").
//   - held=defaults: korder's default bounds (MaxHeldBytes 64 MiB per
//     partition, no MaxHeld); held=MaxHeld10000: MaxHeld(10000), which
//     fails what partition 0 cannot keep with ErrHeldFull (failed-records).
func BenchmarkIsolation(b *testing.B) {
	helds := []struct {
		name string
		opts []korder.Opt
	}{
		{"defaults", nil},
		{"MaxHeld10000", []korder.Opt{korder.MaxHeld(10000)}},
	}
	for _, brokers := range []int{2, 1} {
		for _, fault := range []string{"hold", "invalid", "retryable", "retryablefail"} {
			if brokers == 1 && fault == "hold" {
				continue // holding broker 1's request would hold every partition
			}
			for _, held := range helds {
				b.Run("brokers="+strconv.Itoa(brokers)+"/fault="+fault+"/held="+held.name, func(b *testing.B) {
					for range b.N {
						isolationRun(b, brokers, fault, true, held.opts)
					}
				})
			}
		}
	}
}

const (
	isolationPartitions = 16
	isolationWindow     = 2 * time.Second
)

// BenchmarkIsolationDefaultPartitioner is BenchmarkIsolation with kgo's
// default partitioner: the records are keyed and carry no partition, so
// each goes to the partition its key hashes to; keys are chosen so that the
// 16 partitions get about as many records each. The fault is on partition
// 0, led by broker 1 (brokers=2), with held=defaults.
func BenchmarkIsolationDefaultPartitioner(b *testing.B) {
	for _, fault := range []string{"hold", "invalid", "retryable", "retryablefail"} {
		b.Run("brokers=2/fault="+fault, func(b *testing.B) {
			for range b.N {
				isolationRun(b, 2, fault, false, nil)
			}
		})
	}
}

// BenchmarkIsolationRaw is BenchmarkIsolationDefaultPartitioner with raw
// kgo (no korder, no FailPartitionOnProduceFailure): the reference.
func BenchmarkIsolationRaw(b *testing.B) {
	for _, fault := range []string{"invalid", "retryable", "retryablefail"} {
		b.Run("brokers=2/fault="+fault, func(b *testing.B) {
			for range b.N {
				isolationRunRaw(b, fault)
			}
		})
	}
}

// isolationProducer is what isolationRun produces through: a korder
// Producer, or raw kgo.
type isolationProducer interface {
	Produce(context.Context, *kgo.Record, func(*kgo.Record, error))
	Flush(context.Context) error
	Close()
}

type rawProducer struct{ *kgo.Client }

func (r rawProducer) Close() { r.Client.Close() }

func isolationRunRaw(b *testing.B, fault string) {
	isolationRunWith(b, 2, fault, false, nil, true, true)
}

func isolationRun(b *testing.B, brokers int, fault string, manual bool, opts []korder.Opt) {
	isolationRunWith(b, brokers, fault, manual, opts, false, true)
}

// BenchmarkIsolationAlternating measures the isolation figure of the korder
// issue by alternation: raw kgo, korder with kgo's default partitioner and
// korder with ManualPartitioner (brokers=2, held=defaults) take turns, in an
// order that rotates every round, for isolationRounds rounds per fault; it
// reports each one's median healthy-ratio (raw-ratio, korder-ratio,
// manual-ratio). policies=retry is Retry(1000, 10ms), which keeps every
// record of partition 0 for the whole fault; policies=default is the
// Producer's default, Retry(3, 100ms) then Drop, which drops the failed
// records (for INVALID_RECORD, each once it failed alone) and produces the
// rest again. Run it with
// -benchtime 1x; it takes about 60 s per fault and policies.
func BenchmarkIsolationAlternating(b *testing.B) {
	for _, fault := range []string{"invalid", "retryablefail", "retryable"} {
		for _, policies := range []string{"retry", "default"} {
			var opts []korder.Opt
			if policies == "default" {
				opts = []korder.Opt{korder.WithPolicies(korder.Retry(3, 100*time.Millisecond), korder.Drop())}
			}
			b.Run("fault="+fault+"/policies="+policies, func(b *testing.B) {
				isolationAlternate(b, fault, opts)
			})
		}
	}
}

func isolationAlternate(b *testing.B, fault string, opts []korder.Opt) {
	for range b.N {
		var ratios, cpuRatios [3][]float64
		for round := range isolationRounds {
			for k := range 3 {
				i := (round + k) % 3
				r, c := isolationRunWith(b, 2, fault, i == 2, opts, i == 0, false)
				ratios[i], cpuRatios[i] = append(ratios[i], r), append(cpuRatios[i], c)
			}
		}
		for i, unit := range []string{"raw", "korder", "manual"} {
			slices.Sort(ratios[i])
			slices.Sort(cpuRatios[i])
			b.ReportMetric(ratios[i][len(ratios[i])/2], unit+"-ratio")
			b.ReportMetric(cpuRatios[i][len(cpuRatios[i])/2], unit+"-cpu-ratio")
		}
	}
}

const isolationRounds = 5

func isolationRunWith(b *testing.B, brokers int, fault string, manual bool, opts []korder.Opt, raw, report bool) (ratio, cpuRatio float64) {
	b.StopTimer()
	c, err := kfake.NewCluster(kfake.NumBrokers(brokers), kfake.SeedTopics(isolationPartitions, topic), kfake.BlackholeProduce())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if brokers == 2 { // brokers are nodes 0 and 1
		for part := range int32(isolationPartitions) {
			leader := int32(0)
			if part == 0 {
				leader = 1
			}
			if c.PartitionInfo(topic, part).Leader != leader {
				if err := c.MoveTopicPartition(topic, part, leader); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	// fault=hold: once holding is set, the first produce request with
	// records for partition 0 fails them (a one-request fault), and the
	// next one, the recovery's, is kept until release is closed.
	var holding atomic.Bool
	seen := 0 // control functions run serially
	release := make(chan struct{})
	defer func() {
		if holding.Load() {
			select {
			case <-release:
			default:
				close(release)
			}
		}
	}()
	if fault == "hold" {
		c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
			c.KeepControl()
			if !holding.Load() {
				return nil, nil, false
			}
			for _, tp := range req.(*kmsg.ProduceRequest).Topics {
				for _, pp := range tp.Partitions {
					if pp.Partition == 0 {
						if seen++; seen == 2 {
							c.SleepControl(func() { <-release })
						}
						return nil, nil, false
					}
				}
			}
			return nil, nil, false
		})
	}
	kopts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordRetries(2)}
	if manual {
		kopts = append(kopts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	if fault == "retryablefail" {
		// kgo retries NOT_ENOUGH_REPLICAS after a metadata refresh,
		// at most every MetadataMinAge (5s by default, longer than
		// the window): with 100ms, it fails partition 0's records
		// after RecordRetries(2) within the window.
		kopts = append(kopts, kgo.MetadataMinAge(100*time.Millisecond))
	}
	var p isolationProducer
	var kp *korder.Producer
	if raw {
		cl, err := kgo.NewClient(kopts...)
		if err != nil {
			b.Fatal(err)
		}
		p = rawProducer{cl}
	} else {
		var err error
		kp, err = korder.NewProducer(kopts, append([]korder.Opt{korder.WithPolicies(korder.Retry(1000, 10*time.Millisecond))}, opts...)...)
		if err != nil {
			b.Fatal(err)
		}
		p = kp
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
				r := &kgo.Record{Topic: topic, Key: keys[i%len(keys)], Value: value}
				if manual {
					r.Partition = int32(i % isolationPartitions)
				}
				p.Produce(ctx, r, promise)
			}
		})
	}
	// rate returns the healthy records written per second in a window,
	// and per second of the process's CPU time: CPU time that the machine
	// took from the process (steal) does not count in the second.
	rate := func() (perSec, perCPU float64) {
		start, n, cpu := time.Now(), healthy.Load(), processCPU()
		time.Sleep(isolationWindow)
		h := float64(healthy.Load() - n)
		return h / time.Since(start).Seconds(), h / max(processCPU()-cpu, 1).Seconds()
	}
	time.Sleep(isolationWindow / 4) // warm-up
	b.StartTimer()
	prof := os.Getenv("KORDER_ISOLATION_PROFILE") // FILE: FILE.base and FILE.fault, the windows' CPU profiles
	profile := func(suffix string) func() {
		if prof == "" {
			return func() {}
		}
		f, err := os.Create(prof + suffix)
		if err != nil {
			b.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
		return func() { pprof.StopCPUProfile(); f.Close() }
	}
	stopProfile := profile(".base")
	base, baseCPU := rate()
	stopProfile()
	var h *kfake.FaultHandle
	switch fault {
	case "hold":
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: 1})
		holding.Store(true)
	case "invalid":
		h = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: -1})
	case "retryable", "retryablefail":
		h = c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.NotEnoughReplicas, Count: -1})
	}
	stopProfile = profile(".fault")
	faulted, faultedCPU := rate()
	stopProfile()
	b.StopTimer()
	if h != nil {
		h.Remove()
	} else {
		holding.Store(false)
		close(release)
	}
	stop.Store(true)
	wg.Wait()
	fctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := p.Flush(fctx); err != nil {
		b.Fatal(err)
	}
	ratio, cpuRatio = faulted/base, faultedCPU/baseCPU
	if !report {
		return ratio, cpuRatio
	}
	b.ReportMetric(ratio, "healthy-ratio")
	b.ReportMetric(cpuRatio, "healthy-cpu-ratio")
	b.ReportMetric(base, "healthy-records/s")
	b.ReportMetric(float64(failed.Load()), "failed-records")
	if raw {
		return ratio, cpuRatio
	}
	s := kp.Stats()
	var hold time.Duration
	for _, d := range s.PartitionHoldTime[topic] {
		hold += d
	}
	b.ReportMetric(float64(hold)/float64(time.Second), "hold-s")
	if !manual {
		// The time the whole topic held: the gates (see korder's
		// learned holds).
		b.ReportMetric(float64(s.PartitionHoldTime[topic][-1])/float64(time.Second), "topic-hold-s")
	}
	return ratio, cpuRatio
}
