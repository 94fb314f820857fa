package korder_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// The policy matrix: every scenario below runs under every policy set, with
// per-partition holds (the Producer's default with the ManualPartitioner
// that newProducer sets), with per-partition holds learned from kgo (kgo's
// default partitioner, keyed records), and every run is checked record by
// record against the guarantee (checkRun).

type matrixMode struct {
	name         string
	opts         []korder.Opt
	kopts        []kgo.Opt
	perPartition bool
	learned      bool // kgo's default partitioner: records are keyed to their partition
}

var (
	partitionHolds = matrixMode{name: "partition", perPartition: true}
	learnedHolds   = matrixMode{name: "learned", kopts: []kgo.Opt{defaultPartitioner()}, perPartition: true, learned: true}
	matrixModes    = []matrixMode{partitionHolds, learnedHolds}
)

type matrixPolicy struct {
	name     string
	mode     matrixMode
	policies []korder.Policy
	// poisonFate is the sentinel the promise of a record that always
	// fails (INVALID_RECORD) must wrap.
	poisonFate error
	// stops is whether a failure that the policies do not absorb stops
	// the topic, failing every later record.
	stops bool
	// quarantines is whether later records with the poison record's key
	// are diverted too.
	quarantines bool
}

var matrixPolicies = []matrixPolicy{
	{name: "Retry", policies: []korder.Policy{korder.Retry(5, 2*time.Millisecond), korder.Stop()}, poisonFate: korder.ErrStopped, stops: true},
	{name: "Isolate+DeadLetter", policies: []korder.Policy{korder.Isolate(), korder.DeadLetter(dlq)}, poisonFate: korder.ErrDeadLettered},
	{name: "Isolate+DeadLetter.QuarantineKeys", policies: []korder.Policy{korder.Isolate(), korder.DeadLetter(dlq).QuarantineKeys()}, poisonFate: korder.ErrDeadLettered, quarantines: true},
	{name: "Isolate+Drop", policies: []korder.Policy{korder.Isolate(), korder.Drop()}, poisonFate: korder.ErrDropped},
	{name: "Retry+Isolate+DeadLetter", policies: []korder.Policy{korder.Retry(5, 2*time.Millisecond), korder.Isolate(), korder.DeadLetter(dlq)}, poisonFate: korder.ErrDeadLettered},
	{name: "Stop", policies: []korder.Policy{korder.Stop()}, poisonFate: korder.ErrStopped, stops: true},
}

func forEachPolicy(t *testing.T, run func(t *testing.T, pol matrixPolicy)) {
	forEachPolicyIn(t, matrixModes, run)
}

func forEachPolicyIn(t *testing.T, modes []matrixMode, run func(t *testing.T, pol matrixPolicy)) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			for _, pol := range matrixPolicies {
				pol.mode = mode
				t.Run(pol.name, func(t *testing.T) { run(t, pol) })
			}
		})
	}
}

// matrixRun tracks what a scenario produced, per goroutine, in Produce
// order. Values are "g<goroutine>-<i>"; keys are "g<goroutine>k<i%keys>".
type matrixRun struct {
	t  *testing.T
	c  *kfake.Cluster
	p  *korder.Producer
	ps *promises

	perPartition bool // holds are per partition
	learned      bool // kgo's default partitioner (see rec)

	mu       sync.Mutex
	produced [][]*kgo.Record // per goroutine

	failedOnce chan struct{} // closed by the user hook on the first failure
	onFailure  func()        // run (once) by the user hook, before the Producer's
}

const matrixPartitions = 3

func newMatrixRun(t *testing.T, pol matrixPolicy, goroutines int, kopts []kgo.Opt, opts ...korder.Opt) *matrixRun {
	return newMatrixRunOn(t, newCluster(t, matrixPartitions), pol, goroutines, kopts, opts...)
}

func newMatrixRunOn(t *testing.T, c *kfake.Cluster, pol matrixPolicy, goroutines int, kopts []kgo.Opt, opts ...korder.Opt) *matrixRun {
	m := &matrixRun{t: t, c: c, ps: newPromises(), produced: make([][]*kgo.Record, goroutines), failedOnce: make(chan struct{}), perPartition: pol.mode.perPartition, learned: pol.mode.learned}
	var once sync.Once
	hook := userHook(func() {
		once.Do(func() {
			if m.onFailure != nil {
				m.onFailure()
			}
			close(m.failedOnce)
		})
	})
	// A retryable error makes kgo refresh metadata before retrying, at
	// most once per MetadataMinAge (5s by default).
	kopts = append(append([]kgo.Opt{kgo.RecordRetries(1), kgo.MetadataMinAge(10 * time.Millisecond), kgo.WithHooks(hook)}, pol.mode.kopts...), kopts...)
	opts = append(append([]korder.Opt{korder.WithPolicies(pol.policies...)}, pol.mode.opts...), opts...)
	m.p = newProducer(t, m.c, kopts, opts...)
	return m
}

// userHook is the application's own failure hook; kgo calls it before the
// Producer's, which is registered last, inline where the partition fails,
// with the partition's lock held: it must not block, produce or recover.
type userHook func()

func (h userHook) OnProducePartitionFailed(*kgo.ErrProducePartitionFailed) { h() }

// rec is goroutine g's record i, for partition i%matrixPartitions. With
// the default partitioner (learned), its key is one that hashes to that
// partition, and its Partition field is only a note (kgo overwrites it).
func (m *matrixRun) rec(g, i int) *kgo.Record {
	part := int32(i % matrixPartitions)
	key := "g" + strconv.Itoa(g) + "k" + strconv.Itoa(i%4)
	if m.learned {
		key = matrixKey(key, part)
	}
	return &kgo.Record{
		Topic:     topic,
		Partition: part,
		Key:       []byte(key),
		Value:     []byte("g" + strconv.Itoa(g) + "-" + strconv.Itoa(i)),
	}
}

var matrixKeys sync.Map // "key/partition" -> key for the default partitioner

func matrixKey(key string, part int32) string {
	id := key + "/" + strconv.Itoa(int(part))
	if k, ok := matrixKeys.Load(id); ok {
		return k.(string)
	}
	k := keyFor(key, part, matrixPartitions)
	matrixKeys.Store(id, k)
	return k
}

// produce produces r as goroutine g's next record.
func (m *matrixRun) produce(ctx context.Context, g int, r *kgo.Record) {
	m.mu.Lock()
	m.produced[g] = append(m.produced[g], r)
	m.mu.Unlock()
	m.p.Produce(ctx, r, m.ps.fn())
}

func (m *matrixRun) waitFailure(ctx context.Context) {
	m.t.Helper()
	select {
	case <-m.failedOnce:
	case <-ctx.Done():
		m.t.Fatal("no produce failure was reported")
	}
}

// checkRun waits for every promise and checks the guarantee record by
// record: every promise ran exactly once, with nil or an error wrapping a
// korder sentinel or a context error; each partition holds exactly the
// records whose promise got nil, each once, in Produce order per producing
// goroutine; and the dead-letter topic holds exactly the records whose
// promise got ErrDeadLettered, in Produce order per goroutine and key (with
// per-partition holds, per goroutine, key and original partition), with
// their coordinates. It returns each record's error.
func (m *matrixRun) checkRun(ctx context.Context) map[*kgo.Record]error {
	t := m.t
	t.Helper()
	m.ps.wait(ctx, t)
	if t.Failed() {
		t.Logf("stats: %+v; kgo buffers %d records", m.p.Stats(), m.p.Client().BufferedProduceRecords())
	}
	errs := m.ps.check(t)

	m.mu.Lock()
	defer m.mu.Unlock()
	// value -> in the topic (true) or the dead-letter topic (false); a
	// record that failed with ErrClosed may or may not have been written
	// (maybe), as its request may have been in flight at Close.
	want, maybe := map[string]bool{}, map[string]bool{}
	for _, rs := range m.produced {
		for _, r := range rs {
			err, ok := errs[r]
			switch {
			case !ok:
				t.Errorf("record %s: promise not called", r.Value)
			case err == nil:
				want[string(r.Value)] = true
			case errors.Is(err, korder.ErrDeadLettered):
				want[string(r.Value)] = false
			case errors.Is(err, korder.ErrClosed):
				maybe[string(r.Value)] = true
			case errors.Is(err, korder.ErrDropped), errors.Is(err, korder.ErrStopped),
				errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			default:
				t.Errorf("record %s: error %v wraps no korder sentinel", r.Value, err)
			}
		}
	}

	check := func(tp string, p int32, inTopic bool) {
		seen := map[string]bool{}
		// Order is per producing goroutine, in the topic's partitions;
		// in the dead-letter topic, which mixes partitions, it is per
		// goroutine and key (what QuarantineKeys keeps in order), and
		// with per-partition holds, per original partition too (each
		// partition recovers, and quarantines keys, on its own).
		last := map[string]int{}
		for _, r := range readAll(ctx, t, m.c, tp, p) {
			v := string(r.Value)
			g, rest, _ := strings.Cut(v, "-")
			i, _, _ := strings.Cut(rest, "-")
			n, _ := strconv.Atoi(i)
			if !inTopic {
				g += "/" + string(r.Key)
				if m.perPartition {
					g += "/" + strconv.Itoa(n%matrixPartitions)
				}
			}
			where, ok := want[v]
			switch {
			case seen[v]:
				t.Errorf("%s/%d: %s written twice", tp, p, v)
			case maybe[v]:
			case !ok || where != inTopic:
				t.Errorf("%s/%d: %s written, but its promise says otherwise (%v)", tp, p, v, errsByValue(errs, v))
			case n <= last[g] && seen[g+"*"]:
				t.Errorf("%s/%d: %s written after %s-%d: out of order", tp, p, v, g, last[g])
			}
			seen[v], seen[g+"*"], last[g] = true, true, n
			delete(want, v)
			if !inTopic {
				h := map[string]string{}
				for _, hd := range r.Headers {
					h[hd.Key] = string(hd.Value)
				}
				if h[korder.HeaderTopic] != topic || h[korder.HeaderCause] == "" || h[korder.HeaderPartition] != strconv.Itoa(n%matrixPartitions) {
					t.Errorf("dead-lettered %s has headers %v", v, h)
				}
			}
		}
	}
	for p := range int32(matrixPartitions) {
		check(topic, p, true)
		check(dlq, p, false)
	}
	for v, inTopic := range want {
		t.Errorf("%s: promise says written (to the topic: %v), but it is not", v, inTopic)
	}
	return errs
}

func errsByValue(errs map[*kgo.Record]error, v string) error {
	for r, err := range errs {
		if string(r.Value) == v {
			return err
		}
	}
	return errors.New("no such record")
}

// checkPoison checks the fate of the poison record and that the records
// the policy does not hold back were written. mayFail, if not nil, says
// which records the scenario's other failure may have failed; the poison
// record may be one of them, if that failure reached it first, but its fate
// is the policy's all the same.
func (m *matrixRun) checkPoison(pol matrixPolicy, errs map[*kgo.Record]error, poisoned *kgo.Record, mayFail func(*kgo.Record) bool) {
	t := m.t
	t.Helper()
	err := errs[poisoned]
	switch {
	case pol.quarantines && errors.Is(err, korder.ErrDeadLettered):
		// Diverted, possibly because its key was quarantined by an
		// earlier record that failed otherwise.
	case errors.Is(err, pol.poisonFate) && errors.Is(err, kerr.InvalidRecord):
	case errors.Is(err, pol.poisonFate) && mayFail != nil && mayFail(poisoned):
	default:
		t.Errorf("poison record %s got %v, expected %v wrapping INVALID_RECORD", poisoned.Value, err, pol.poisonFate)
	}
	if pol.stops {
		return
	}
	for r, err := range errs {
		if r == poisoned || err == nil || (mayFail != nil && mayFail(r)) {
			continue
		}
		if pol.quarantines && string(r.Key) == string(poisoned.Key) && errors.Is(err, korder.ErrDeadLettered) {
			continue
		}
		t.Errorf("record %s: %v, expected it written", r.Value, err)
	}
}

// retriesRanOut is whether err is the failure of a record whose retries ran
// out on the retryable NOT_ENOUGH_REPLICAS the matrix injects. kgo reports
// that either as the broker's error, when the failing response finds the
// batch out of retries, or as ErrRecordRetries, when the batch is found out
// of retries as the next request is built; which one is a matter of timing.
func retriesRanOut(err error) bool {
	return errors.Is(err, kerr.NotEnoughReplicas) || errors.Is(err, kgo.ErrRecordRetries)
}

// poisonValue makes r a record that every produce of it fails with
// INVALID_RECORD (see poison).
func poisonValue(r *kgo.Record) *kgo.Record {
	r.Value = append(r.Value, []byte("-POISON")...)
	return r
}

// Records failing mid-stream on one partition while the others flow, with
// several producing goroutines: a poison record on partition 1, and a
// retryable error that exhausts RecordRetries on partition 2.
func TestMatrixMidStream(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, pol matrixPolicy) {
		ctx := testCtx(t)
		const goroutines, n = 3, 45
		m := newMatrixRun(t, pol, goroutines, nil)
		poison(m.c)
		var poisoned *kgo.Record
		var wg sync.WaitGroup
		for g := range goroutines {
			wg.Go(func() {
				for i := range n {
					r := m.rec(g, i)
					switch {
					case g == 0 && i == 22: // partition 1
						poisoned = poisonValue(r)
					case g == 1 && i == 14: // partition 2
						m.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{2}, Err: kerr.NotEnoughReplicas, Count: 2})
					}
					m.produce(ctx, g, r)
				}
			})
		}
		wg.Wait()
		errs := m.checkRun(ctx)
		// Without Retry, the records that failed with the retryable
		// error are diverted or dropped like the poison record.
		retries := strings.HasPrefix(pol.name, "Retry")
		m.checkPoison(pol, errs, poisoned, func(r *kgo.Record) bool {
			// (QuarantineKeys then diverts their keys.)
			return !retries && (errors.Is(errs[r], korder.ErrDeadLettered) || errors.Is(errs[r], korder.ErrDropped)) && retriesRanOut(errs[r])
		})
		if pol.stops {
			m.p.Resume(topic)
			if err := produceSync(ctx, m.p, rec(0, "after", 0)); err != nil {
				t.Errorf("after Resume: %v", err)
			}
		}
	})
}

// A poison record in the middle of a batch: with Isolate, every other
// record of the batch is written, in order.
func TestMatrixPoisonMidBatch(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, pol matrixPolicy) {
		ctx := testCtx(t)
		m := newMatrixRun(t, pol, 1, nil)
		poison(m.c)
		// While the first produce request is held, the next records of
		// partition 0 gather in one batch, with the poison record in
		// its middle.
		held, release := m.holdFirstProduce()
		m.produce(ctx, 0, m.rec(0, 0))
		select {
		case <-held:
		case <-ctx.Done():
			t.Fatal("the first produce request was not held")
		}
		var poisoned *kgo.Record
		for i := 3; i < 60; i += matrixPartitions {
			r := m.rec(0, i)
			if i == 30 {
				poisoned = poisonValue(r)
			}
			m.produce(ctx, 0, r)
		}
		release()
		errs := m.checkRun(ctx)
		m.checkPoison(pol, errs, poisoned, nil)
		if strings.Contains(pol.name, "Isolate") && m.p.Stats().Isolations == 0 {
			t.Errorf("no isolation: the poison record did not share a batch (stats %+v)", m.p.Stats())
		}
	})
}

// A broker that answers every produce request with a retryable error for
// long enough that the client's retries run out, then comes back.
func TestMatrixBrokerDownThenBack(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, pol matrixPolicy) {
		ctx := testCtx(t)
		m := newMatrixRun(t, pol, 2, nil)
		down := m.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: -1})
		// The broker comes back as the first failure is reported: the
		// Producer's recovery finds it up.
		m.onFailure = down.Remove
		var wg sync.WaitGroup
		for g := range 2 {
			wg.Go(func() {
				for i := range 30 {
					m.produce(ctx, g, m.rec(g, i))
				}
			})
		}
		wg.Wait()
		m.waitFailure(ctx)
		errs := m.checkRun(ctx)
		if strings.HasPrefix(pol.name, "Retry") {
			for r, err := range errs {
				if err != nil {
					t.Errorf("record %s: %v, expected Retry to write it once the broker is back", r.Value, err)
				}
			}
		}
	})
}

// An outage during the recovery: as the first failure is reported, two
// more produce requests fail, which hits the records the recovery produces
// again.
func TestMatrixOutageDuringRecovery(t *testing.T) {
	forEachPolicy(t, func(t *testing.T, pol matrixPolicy) {
		ctx := testCtx(t)
		m := newMatrixRun(t, pol, 1, nil)
		poisoned := poison(m.c)
		outage := make(chan *kfake.FaultHandle, 1)
		m.onFailure = func() {
			// The first fault that matches answers: the outage
			// goes before the poison.
			poisoned.Remove()
			outage <- m.c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Err: kerr.NotEnoughReplicas, Count: 2})
			poison(m.c)
		}
		var poisonRec *kgo.Record
		for i := range 40 {
			r := m.rec(0, i)
			if i == 10 {
				poisonRec = poisonValue(r)
			}
			m.produce(ctx, 0, r)
		}
		m.waitFailure(ctx)
		if pol.name != "Stop" { // Stop produces nothing again
			if err := (<-outage).Wait(ctx, 2); err != nil {
				t.Fatalf("the outage did not hit: %v", err)
			}
		}
		errs := m.checkRun(ctx)
		retries := strings.HasPrefix(pol.name, "Retry")
		m.checkPoison(pol, errs, poisonRec, func(r *kgo.Record) bool {
			return !retries && retriesRanOut(errs[r])
		})
	})
}

// holdFirstProduce holds the first produce request until release is
// called; held is closed once it is held.
func (m *matrixRun) holdFirstProduce() (held <-chan struct{}, release func()) {
	heldc, releasec := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(releasec) }) }
	m.t.Cleanup(release)
	first := true
	m.c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !first {
			m.c.DropControl()
			return nil, nil, false
		}
		first = false // control functions run serially
		close(heldc)
		m.c.SleepControl(func() { <-releasec })
		return nil, nil, false // then answer normally
	})
	return heldc, release
}

// holdInFlight produces a record to partition 0 of a two-broker cluster
// and holds its produce request until release is called, then fails a
// poison record on partition 1, led by the other broker: the Producer holds
// the topic until the record in flight finishes, whatever the policy.
func (m *matrixRun) holdInFlight(ctx context.Context) (release func()) {
	t := m.t
	t.Helper()
	releasec, heldc := make(chan struct{}), make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(releasec) }) }
	t.Cleanup(release)
	matched := false
	m.c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		m.c.KeepControl()
		if matched {
			return nil, nil, false
		}
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			for _, p := range tp.Partitions {
				// Requests name topics by ID: the first one with
				// a partition 0 is the first record's.
				if p.Partition == 0 {
					matched = true // control functions run serially
					close(heldc)
					m.c.SleepControl(func() { <-releasec })
					return nil, nil, false
				}
			}
		}
		return nil, nil, false
	})
	m.produce(ctx, 0, m.rec(0, 0))
	select {
	case <-heldc:
	case <-ctx.Done():
		t.Fatalf("the produce request was not held; partitions %+v %+v", *m.c.PartitionInfo(topic, 0), *m.c.PartitionInfo(topic, 1))
	}
	m.produce(ctx, 0, poisonValue(m.rec(0, 1)))
	m.waitFailure(ctx)
	// The user hook runs just before the Producer's: wait for the latter.
	for m.p.Stats().Failures == 0 {
		select {
		case <-ctx.Done():
			t.Fatal("the Producer saw no failure")
		case <-time.After(time.Millisecond):
		}
	}
	return release
}

func twoBrokerCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(2), kfake.SeedTopics(matrixPartitions, topic, dlq))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	l0, l1 := c.PartitionInfo(topic, 0).Leader, c.PartitionInfo(topic, 1).Leader
	if l0 == l1 { // brokers are nodes 0 and 1
		if err := c.MoveTopicPartition(topic, 1, 1-l0); err != nil {
			t.Fatal(err)
		}
	}
	return c
}
