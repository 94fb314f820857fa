package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	topic    = "demo"
	dlqTopic = "demo-dlq"
)

// config is the workload and the fault schedule. Every mode runs the same
// config against a fresh kfake cluster.
type config struct {
	seed       uint64
	records    int   // records produced, in one deterministic sequence
	keys       int   // key i goes to partition i % partitions
	partitions int32 // partitions of the demo topic
	burst      int   // records produced every tick...
	tick       time.Duration
	window     int // ... with at most this many records not yet settled

	poison  []int // records the broker always refuses (INVALID_RECORD for their batch)
	outages []int // records whose batch the broker refuses retryably, outageRefusals times

	recordRetries  int           // kgo.RecordRetries, for every mode
	outageRefusals int           // recordRetries+1: an outage exhausts the retries
	attempts       int           // produce attempts per record in the application's retries (modes 1 and 2; korder: Retry(attempts-1))
	backoff        time.Duration // between the application's attempts
	modeTimeout    time.Duration
}

func defaultConfig() config {
	c := config{
		seed:          1,
		records:       4000,
		keys:          200,
		partitions:    4,
		burst:         10,
		tick:          5 * time.Millisecond, // 2000 records/s: about 2 s of producing per mode
		window:        2000,
		recordRetries: 2,
		attempts:      4,
		backoff:       10 * time.Millisecond,
		modeTimeout:   15 * time.Second,
	}
	c.outageRefusals = c.recordRetries + 1
	for _, pct := range []int{15, 45, 75} {
		c.poison = append(c.poison, c.records*pct/100)
	}
	for _, pct := range []int{30, 60, 90} {
		c.outages = append(c.outages, c.records*pct/100)
	}
	return c
}

// workload is the records of a run, identical for every mode.
type workload struct {
	cfg    config
	key    [][]byte
	part   []int32
	seq    []int // per-key sequence number
	value  [][]byte
	poison []bool
}

// Value layout: "<id> <key> <seq>[ <marker>]", for example "001200 k017 0005 OUTAGE1".
func newWorkload(cfg config) *workload {
	rng := rand.New(rand.NewPCG(cfg.seed, cfg.seed^0x9e3779b97f4a7c15))
	w := &workload{cfg: cfg}
	next := make([]int, cfg.keys)
	markers := make(map[int]string)
	for _, id := range cfg.poison {
		markers[id] = "POISON"
	}
	for i, id := range cfg.outages {
		markers[id] = "OUTAGE" + strconv.Itoa(i+1)
	}
	for id := range cfg.records {
		k := rng.IntN(cfg.keys)
		key := fmt.Sprintf("k%03d", k)
		v := fmt.Sprintf("%06d %s %04d", id, key, next[k])
		if m := markers[id]; m != "" {
			v += " " + m
		}
		w.key = append(w.key, []byte(key))
		w.part = append(w.part, int32(k)%cfg.partitions)
		w.seq = append(w.seq, next[k])
		w.value = append(w.value, []byte(v))
		w.poison = append(w.poison, markers[id] == "POISON")
		next[k]++
	}
	return w
}

// record returns a new kgo.Record for record id (a new one per attempt: kgo
// sets fields of the records it is given).
func (w *workload) record(id int) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: w.part[id], Key: w.key[id], Value: w.value[id]}
}

// parse returns the id, key and sequence number of a record value.
func parse(v []byte) (id int, key string, seq int, ok bool) {
	f := bytes.Fields(v)
	if len(f) < 3 {
		return 0, "", 0, false
	}
	id, err1 := strconv.Atoi(string(f[0]))
	seq, err2 := strconv.Atoi(string(f[2]))
	return id, string(f[1]), seq, err1 == nil && err2 == nil
}

// newCluster starts a one-broker kfake cluster with the demo topics and the
// fault schedule:
//
//   - every produce request whose batch for a partition holds a POISON
//     record is answered INVALID_RECORD for that partition (a broker
//     refusing one bad record fails its whole batch);
//   - the first outageRefusals produce requests carrying an OUTAGEn record
//     are answered NOT_ENOUGH_REPLICAS for its partition: kgo retries, runs
//     out of RecordRetries, and fails the batch and everything buffered
//     behind it.
//
// The schedule is keyed by record, not by time, so each mode meets the same
// failures.
func newCluster(cfg config) (*kfake.Cluster, error) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(cfg.partitions, topic), kfake.SeedTopics(1, dlqTopic))
	if err != nil {
		return nil, err
	}
	ti := c.TopicInfo(topic)
	if ti == nil {
		c.Close()
		return nil, errors.New("kfake: the demo topic was not created")
	}
	mainID := ti.TopicID
	var outageMarkers [][]byte
	for i := range cfg.outages {
		outageMarkers = append(outageMarkers, []byte("OUTAGE"+strconv.Itoa(i+1)))
	}
	refused := make([]int, len(cfg.outages)) // only touched on the cluster goroutine
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		var invalid, outage []int32
		for _, t := range req.(*kmsg.ProduceRequest).Topics {
			if t.Topic != topic && t.TopicID != mainID {
				continue // the dead-letter topic holds copies of poison records
			}
			for _, p := range t.Partitions {
				if bytes.Contains(p.Records, []byte("POISON")) {
					invalid = append(invalid, p.Partition)
					continue
				}
				for i, m := range outageMarkers {
					if refused[i] < cfg.outageRefusals && bytes.Contains(p.Records, m) {
						refused[i]++
						outage = append(outage, p.Partition)
						break
					}
				}
			}
		}
		// One-shot faults for this very request: the control runs before
		// the cluster checks faults.
		if len(invalid) > 0 {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: invalid, Err: kerr.InvalidRecord, Count: 1})
		}
		if len(outage) > 0 {
			c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: outage, Err: kerr.NotEnoughReplicas, Count: 1})
		}
		return nil, nil, false // the cluster answers, applying the faults
	})
	return c, nil
}

// clientOpts are the kgo options every mode shares.
func clientOpts(cfg config, c *kfake.Cluster, hooks ...kgo.Hook) []kgo.Opt {
	return []kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), // key i -> partition i % partitions, set by the workload
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(5 * time.Millisecond),
		kgo.RecordRetries(cfg.recordRetries),
		kgo.RetryBackoffFn(func(int) time.Duration { return 10 * time.Millisecond }),
		kgo.MetadataMinAge(50 * time.Millisecond),
		kgo.WithHooks(hooks...),
	}
}

// outcome is how the application saw a record end.
type outcome uint8

const (
	pending      outcome = iota
	ok                   // its promise reported it written
	gaveUp               // the application gave up on it and knows
	deadLettered         // korder diverted it to the dead-letter topic
)

// recState is what the demo knows of one record, apart from the log.
type recState struct {
	kgoFailures int       // times kgo failed it (a failed batch, or a rejection by a failed partition)
	invalid     int       // of which with INVALID_RECORD
	rejected    int       // of which rejections by a failed partition (the failure itself)
	acked       bool      // kgo reported it written at least once
	ackAt       time.Time // first time kgo reported it written
	final       outcome
	settledAt   time.Time
}

// tracker sees every record kgo finishes (kgo.HookProduceRecordUnbuffered,
// the same in every mode, including under korder) and every outcome the
// application settles.
type tracker struct {
	w *workload

	mu      sync.Mutex
	recs    []recState
	errs    []error
	settled int
	done    chan struct{} // closed once every record is settled

	produced    atomic.Int64
	nSettled    atomic.Int64
	kgoFailures atomic.Int64
	sem         chan struct{} // the window: a token per record not yet settled
}

func newTracker(w *workload) *tracker {
	return &tracker{
		w:    w,
		recs: make([]recState, w.cfg.records),
		done: make(chan struct{}),
		sem:  make(chan struct{}, w.cfg.window),
	}
}

func (t *tracker) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if r.Topic != topic {
		return
	}
	id, _, _, parsed := parse(r.Value)
	if !parsed || id < 0 || id >= len(t.recs) {
		return
	}
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	rs := &t.recs[id]
	if err != nil {
		rs.kgoFailures++
		if errors.Is(err, kerr.InvalidRecord) {
			rs.invalid++
		}
		var f *kgo.ErrProducePartitionFailed
		if errors.As(err, &f) && err == error(f) {
			rs.rejected++
		}
		t.kgoFailures.Add(1)
	} else if !rs.acked {
		rs.acked, rs.ackAt = true, now
	}
}

// acquire takes a window token before a record is produced.
func (t *tracker) acquire(ctx context.Context) error {
	select {
	case t.sem <- struct{}{}:
		t.produced.Add(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// settle records the application's final view of record id.
func (t *tracker) settle(id int, o outcome) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	rs := &t.recs[id]
	if rs.final != pending {
		t.errs = append(t.errs, fmt.Errorf("record %d settled twice", id))
		return
	}
	rs.final, rs.settledAt = o, now
	<-t.sem
	t.settled++
	t.nSettled.Add(1)
	if t.settled == len(t.recs) {
		close(t.done)
	}
}

func (t *tracker) fail(err error) {
	t.mu.Lock()
	t.errs = append(t.errs, err)
	t.mu.Unlock()
}

// wait waits until every record is settled.
func (t *tracker) wait(ctx context.Context) error {
	select {
	case <-t.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%d of %d records settled: %w", t.nSettled.Load(), len(t.recs), ctx.Err())
	}
}

func (t *tracker) snapshot() ([]recState, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]recState(nil), t.recs...), errors.Join(t.errs...)
}

// produceAll produces the workload in order, at the configured pace, within
// the window, handing each record to submit.
func produceAll(ctx context.Context, w *workload, t *tracker, submit func(id int)) error {
	start := time.Now()
	for id := range w.cfg.records {
		if id%w.cfg.burst == 0 {
			if d := time.Until(start.Add(time.Duration(id/w.cfg.burst) * w.cfg.tick)); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
		if err := t.acquire(ctx); err != nil {
			return fmt.Errorf("producing record %d: %w", id, err)
		}
		submit(id)
	}
	return nil
}
