package chaos_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const chaosTopic = "chaos"

// rec is one logical record: created once by a producer, handed to kgo once
// per attempt. All fields after the identity are guarded by run.mu.
type rec struct {
	id       int
	prod     int
	key      int
	part     int32
	keySeq   int // per (producer, key)
	partSeq  int // per (producer, partition)
	cancelOK bool

	attempts []*attempt
	hard     int // failures other than "partition failed" rejections
	state    recState
}

type recState int

const (
	recQueued   recState = iota // held back by the protocol, not handed to kgo
	recInflight                 // handed to kgo, promise not called
	recFailed                   // promise failed, waiting for the protocol
	recOK                       // written (per its promise)
	recDropped                  // given up on, and reported
)

func (r *rec) keyName() string { return fmt.Sprintf("p%d-k%d", r.prod, r.key) }

func (r *rec) value() []byte {
	return fmt.Appendf(nil, "%d/%d/%d/%d/%d", r.id, r.prod, r.key, r.keySeq, r.partSeq)
}

func (r *rec) String() string {
	return fmt.Sprintf("rec#%d(prod=%d key=%d part=%d keyseq=%d partseq=%d)", r.id, r.prod, r.key, r.part, r.keySeq, r.partSeq)
}

// attempt is one hand-off of a rec to kgo.
type attempt struct {
	id       int
	rec      *rec
	handoff  int64 // per-partition hand-off index
	epoch    int   // partition's recovery epoch at hand-off
	promised int
	err      error
	offset   int64
}

// partState is the protocol's view of one partition. Guarded by run.mu.
type partState struct {
	failed   bool
	inflight int
	epoch    int
	next     int64
	failures []*rec // failed records waiting to be produced again
	queue    []*rec // held back while failed, in produce order
}

// run is one seeded chaos run.
type run struct {
	rc    runConfig
	ch    chooser
	start time.Time

	c  *kfake.Cluster
	cl *kgo.Client

	mu          sync.Mutex
	parts       []*partState
	topicFailed bool
	recs        []*rec
	attempts    []*attempt
	unresolved  int
	outstanding int // attempts without a promise
	stopped     bool
	closing     bool
	allDone     chan struct{} // closed once stopped and every record resolved
	promisesIn  chan struct{} // signaled whenever outstanding drops to 0 while closing
	tokens      []chan struct{}
	recoveries  int
	rejected    int // promises failed with ErrProducePartitionFailed
	hardFails   int // promises failed with anything else
	hooks       atomic.Int64

	violMu sync.Mutex
	viol   []violation

	// cancelCtx is the context cancelable records are produced with; the
	// scheduler cancels it and swaps a new one in.
	cancelMu  sync.Mutex
	cancelCtx context.Context
	cancelFn  context.CancelFunc

	hookMu     sync.Mutex
	hookEvents []hookEvent
	wake       chan struct{} // coordinator wake-up, capacity 1

	gates gates
	hist  history
}

type hookEvent struct {
	topic     string
	partition int32
	err       error
}

// failHook is the HookProducePartitionFailed: it must not block, and may run
// inside Produce on a goroutine holding run.mu, so it only takes leaf locks
// and signals the coordinator.
type failHook struct{ r *run }

func (h *failHook) OnProducePartitionFailed(topic string, partition int32, err error) {
	r := h.r
	r.hooks.Add(1)
	r.hist.add(evHook, nil, nil, partition, fmt.Sprintf("OnProducePartitionFailed(%s, %d, %v)", topic, partition, err))
	r.hookMu.Lock()
	r.hookEvents = append(r.hookEvents, hookEvent{topic, partition, err})
	r.hookMu.Unlock()
	r.signal()
}

func (r *run) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// logger copies the client's warnings into the history.
type logger struct{ r *run }

func (logger) Level() kgo.LogLevel { return kgo.LogLevelWarn }
func (l logger) Log(level kgo.LogLevel, msg string, kvs ...any) {
	l.r.hist.add(evLog, nil, nil, -2, fmt.Sprintf("%s %s %v", level, msg, kvs))
}

// outcome is what a run reports.
type outcome struct {
	rc         runConfig
	records    int
	written    int // distinct records in the log
	duplicates int // extra copies in the log
	dropped    int // given up on and reported
	lost       int
	unfinished int // attempts whose promise never came
	recoveries int
	rejected   int // promises failed with ErrProducePartitionFailed
	hardFails  int // promises failed with another error
	hooks      int // HookProducePartitionFailed calls
	documented int // reorders of "maybe written" records (non-idempotent, documented)
	viol       []violation
	faults     []string
	elapsed    time.Duration
	hist       *history
}

const (
	maxAttempts  = 40
	drainTimeout = 30 * time.Second
	stepTimeout  = 15 * time.Second
)

// runChaos runs one configuration: it returns once everything it started is
// closed. faults draws the schedule (nil: from the seed).
func runChaos(rc runConfig, faults chooser) *outcome {
	g0 := runtime.NumGoroutine()
	if faults == nil {
		// A different stream than the configuration's.
		faults = newRNG(rc.seed*2654435761 + 1)
	}
	r := &run{
		rc:      rc,
		ch:      faults,
		start:   time.Now(),
		allDone: make(chan struct{}),
		wake:    make(chan struct{}, 1),
	}
	r.hist.start = r.start
	r.promisesIn = make(chan struct{}, 1)
	r.cancelCtx, r.cancelFn = context.WithCancel(context.Background())
	out := &outcome{rc: rc, hist: &r.hist}

	c, err := kfake.NewCluster(kfake.NumBrokers(rc.brokers), kfake.SeedTopics(int32(rc.partitions), chaosTopic))
	if err != nil {
		r.violate("setup", nil, "kfake.NewCluster: %v", err)
		out.viol = r.viol
		return out
	}
	r.c = c
	for range rc.partitions {
		r.parts = append(r.parts, &partState{})
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithLogger(logger{r}), kgo.Dialer(r.gates.dial)}, rc.clientOpts()...)
	if rc.mode == modeFailStop {
		opts = append(opts, failStopOpts(&failHook{r})...)
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		c.Close()
		r.violate("setup", nil, "kgo.NewClient: %v", err)
		out.viol = r.viol
		return out
	}
	r.cl = cl

	// Coordinator (fail-stop protocol only; the naive mode re-produces
	// from the promise).
	coordDone := make(chan struct{})
	coordQuit := make(chan struct{})
	go func() {
		defer close(coordDone)
		if rc.mode == modeFailStop {
			r.coordinate(coordQuit)
		} else {
			<-coordQuit
		}
	}()

	// Scheduler.
	s := newScheduler(r)
	schedQuit := make(chan struct{})
	schedDone := make(chan struct{})
	go func() { defer close(schedDone); s.loop(schedQuit) }()

	// Producers.
	prodQuit := make(chan struct{})
	var wg sync.WaitGroup
	for range rc.producers {
		r.tokens = append(r.tokens, make(chan struct{}, rc.tokens))
	}
	for p := range rc.producers {
		wg.Add(1)
		go func() { defer wg.Done(); r.produceLoop(p, prodQuit) }()
	}

	phase := time.NewTimer(rc.produceFor)
	<-phase.C
	close(prodQuit)
	wg.Wait()
	close(schedQuit)
	<-schedDone
	r.hist.add(evPhase, nil, nil, -2, "producers stopped, faults removed")

	r.mu.Lock()
	r.stopped = true
	r.maybeAllDoneLocked()
	r.mu.Unlock()
	// A failure just before the faults went away may be waiting for the
	// coordinator.
	r.signal()

	drain := time.NewTimer(drainTimeout)
	select {
	case <-r.allDone:
		r.hist.add(evPhase, nil, nil, -2, "every record resolved")
	case <-drain.C:
		r.mu.Lock()
		var stuck []string
		for _, rr := range r.recs {
			if rr.state != recOK && rr.state != recDropped && len(stuck) < 20 {
				stuck = append(stuck, fmt.Sprintf("%v state=%d attempts=%d", rr, rr.state, len(rr.attempts)))
			}
		}
		r.mu.Unlock()
		r.violate("stuck", nil, "records not resolved %v after producing stopped (failed partitions in kgo: %v): %v", drainTimeout, failedPartitions(cl), stuck)
	}
	drain.Stop()

	// Flush must return, with nothing left.
	fctx, fcancel := context.WithTimeout(context.Background(), stepTimeout)
	if err := cl.Flush(fctx); err != nil {
		r.violate("flush", nil, "Flush: %v", err)
	}
	fcancel()

	close(coordQuit)
	<-coordDone
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()

	closed := make(chan struct{})
	go func() { defer close(closed); cl.Close() }()
	if !waitFor(closed, stepTimeout) {
		r.violate("close", nil, "Close did not return within %v", stepTimeout)
	}
	// Close fails what is still buffered; those promises may run after it
	// returns.
	r.mu.Lock()
	pending := r.outstanding
	r.mu.Unlock()
	if pending > 0 && !waitFor(r.promisesIn, stepTimeout) {
		r.mu.Lock()
		pending = r.outstanding
		r.mu.Unlock()
	} else {
		pending = 0
	}
	out.unfinished = pending
	if pending > 0 {
		r.violate("promise", nil, "%d promises never called", pending)
	}

	logs := r.readBack()
	c.Close()
	r.cancelFn()

	r.check(logs, out)

	if !settleGoroutines(g0) {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		r.violate("leak", nil, "goroutines: %d before the run, %d after (stacks in the history file)", g0, runtime.NumGoroutine())
		r.hist.add(evPhase, nil, nil, -2, "goroutine dump:\n"+string(buf[:n]))
	}

	r.mu.Lock()
	out.recoveries = r.recoveries
	out.rejected, out.hardFails, out.hooks = r.rejected, r.hardFails, int(r.hooks.Load())
	r.mu.Unlock()
	r.violMu.Lock()
	out.viol = slices.Clone(r.viol)
	r.violMu.Unlock()
	out.faults = s.schedule
	out.elapsed = time.Since(r.start)
	return out
}

// produceLoop creates records for producer p until quit: every producer tick,
// a burst, each waiting for one of the producer's tokens (a token is held
// until its record is resolved, which bounds what is buffered).
func (r *run) produceLoop(p int, quit chan struct{}) {
	rc := r.rc
	rng := newRNG(rc.seed*31 + uint64(p) + 7)
	keySeq := make([]int, rc.keys)
	partSeq := make([]int, rc.partitions)
	tk := time.NewTicker(rc.prodTick)
	defer tk.Stop()
	for {
		select {
		case <-quit:
			return
		case <-tk.C:
		}
		for range rc.burst {
			select {
			case <-quit:
				return
			case r.tokens[p] <- struct{}{}:
			}
			k := rng.intn(rc.keys)
			rr := &rec{prod: p, key: k, keySeq: keySeq[k], cancelOK: rc.cancelPct > 0 && rng.intn(100) < rc.cancelPct}
			keySeq[k]++
			rr.part = partitionFor(rr.keyName(), rc.partitions)
			rr.partSeq = partSeq[rr.part]
			partSeq[rr.part]++
			r.submit(rr)
		}
	}
}

// submit registers a new record and hands it to kgo, or queues it if its
// partition (or the topic) is failed.
func (r *run) submit(rr *rec) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr.id = len(r.recs)
	r.recs = append(r.recs, rr)
	r.unresolved++
	ps := r.parts[rr.part]
	if r.rc.mode == modeFailStop && (r.topicFailed || ps.failed) {
		rr.state = recQueued
		ps.queue = append(ps.queue, rr)
		r.hist.add(evQueue, rr, nil, rr.part, "queued: partition failed")
		return
	}
	r.handoffLocked(rr)
}

// handoffLocked produces one attempt of rr. run.mu is held: this fixes the
// hand-off order per partition, and no promise can run inside Produce (they
// run on kgo's promise goroutine); the hook can, and takes only leaf locks.
// Produce never blocks here: the tokens keep the records in kgo far below
// MaxBufferedRecords.
func (r *run) handoffLocked(rr *rec) {
	ps := r.parts[rr.part]
	a := &attempt{id: len(r.attempts), rec: rr, handoff: ps.next, epoch: ps.epoch, offset: -1}
	ps.next++
	ps.inflight++
	r.outstanding++
	r.attempts = append(r.attempts, a)
	rr.attempts = append(rr.attempts, a)
	rr.state = recInflight
	ctx := context.Background()
	if rr.cancelOK && len(rr.attempts) == 1 {
		r.cancelMu.Lock()
		ctx = r.cancelCtx
		r.cancelMu.Unlock()
	}
	kr := &kgo.Record{Topic: chaosTopic, Partition: rr.part, Key: []byte(rr.keyName()), Value: rr.value()}
	r.hist.add(evProduce, rr, a, rr.part, fmt.Sprintf("handoff=%d epoch=%d", a.handoff, a.epoch))
	r.cl.Produce(ctx, kr, func(kr *kgo.Record, err error) { r.promise(a, kr, err) })
}

func (r *run) promise(a *attempt, kr *kgo.Record, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rr := a.rec
	a.promised++
	if a.promised > 1 {
		r.violate("promise", []*rec{rr}, "promise of attempt %d of %v called %d times (err %v)", a.id, rr, a.promised, err)
		return
	}
	r.outstanding--
	if r.closing && r.outstanding == 0 {
		select {
		case r.promisesIn <- struct{}{}:
		default:
		}
	}
	ps := r.parts[rr.part]
	ps.inflight--
	a.err = err
	if err == nil {
		a.offset = kr.Offset
		r.hist.add(evPromise, rr, a, rr.part, fmt.Sprintf("ok offset=%d", kr.Offset))
		rr.state = recOK
		r.resolveLocked(rr)
		r.maybeWakeLocked(ps)
		return
	}
	r.hist.add(evPromise, rr, a, rr.part, fmt.Sprintf("failed: %v", err))
	if isPartitionFailed(err) {
		r.rejected++
	} else {
		rr.hard++
		r.hardFails++
	}
	if r.closing {
		rr.state = recDropped
		r.resolveLocked(rr)
		return
	}
	rr.state = recFailed
	switch r.rc.mode {
	case modeNaive:
		// Produce it again right away.
		if r.giveUpLocked(rr) {
			return
		}
		r.handoffLocked(rr)
	case modeFailStop:
		// Stop the partition (the hook may not have been handled
		// yet); the coordinator produces it again once everything
		// in flight for the partition has finished.
		ps.failed = true
		ps.failures = append(ps.failures, rr)
		r.maybeWakeLocked(ps)
	}
}

// maybeWakeLocked wakes the coordinator if a promise may have made a failed
// partition (or the failed topic) ready to recover.
func (r *run) maybeWakeLocked(ps *partState) {
	if r.rc.mode == modeFailStop && (ps.failed && ps.inflight == 0 || r.topicFailed) {
		r.signal()
	}
}

// giveUpLocked drops rr if it failed too often, reporting it.
func (r *run) giveUpLocked(rr *rec) bool {
	if rr.hard < r.rc.maxHard && len(rr.attempts) < maxAttempts {
		return false
	}
	rr.state = recDropped
	r.hist.add(evDrop, rr, nil, rr.part, fmt.Sprintf("dropped and reported after %d attempts (%d hard failures)", len(rr.attempts), rr.hard))
	r.resolveLocked(rr)
	return true
}

func (r *run) resolveLocked(rr *rec) {
	r.unresolved--
	<-r.tokens[rr.prod]
	r.maybeAllDoneLocked()
}

func (r *run) maybeAllDoneLocked() {
	if r.stopped && r.unresolved == 0 {
		select {
		case <-r.allDone:
		default:
			close(r.allDone)
		}
	}
}

// coordinate is the fail-stop recovery protocol: for a failed partition whose
// records handed to kgo have all been promised, recover it in kgo, produce
// its failed records again in hand-off order (giving up on those that failed
// too often), then the records queued while it was failed. A failed topic
// (partition -1) stops every partition, and is recovered once nothing is in
// flight anywhere.
func (r *run) coordinate(quit chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case <-r.wake:
		}
		r.hookMu.Lock()
		evs := r.hookEvents
		r.hookEvents = nil
		r.hookMu.Unlock()

		r.mu.Lock()
		for _, ev := range evs {
			if ev.partition < 0 {
				r.topicFailed = true
			} else if int(ev.partition) < len(r.parts) {
				r.parts[ev.partition].failed = true
			}
		}
		if r.topicFailed {
			idle := true
			for _, ps := range r.parts {
				idle = idle && ps.inflight == 0
			}
			if idle {
				toRecover := []int32{-1}
				for i, ps := range r.parts {
					if ps.failed {
						toRecover = append(toRecover, int32(i))
					}
				}
				r.recoverLocked(toRecover)
				r.topicFailed = false
				for i := range r.parts {
					r.restartLocked(int32(i))
				}
			}
		} else {
			for i, ps := range r.parts {
				if ps.failed && ps.inflight == 0 {
					r.recoverLocked([]int32{int32(i)})
					r.restartLocked(int32(i))
				}
			}
		}
		r.mu.Unlock()
	}
}

func (r *run) recoverLocked(parts []int32) {
	r.recoveries++
	part := int32(-1)
	if len(parts) == 1 {
		part = parts[0]
	}
	r.hist.add(evRecover, nil, nil, part, fmt.Sprintf("RecoverProducePartitions(%s: %v)", chaosTopic, parts))
	recoverPartitions(r.cl, map[string][]int32{chaosTopic: parts})
}

func (r *run) restartLocked(p int32) {
	ps := r.parts[p]
	ps.failed = false
	ps.epoch++
	fails := ps.failures
	ps.failures = nil
	slices.SortFunc(fails, func(a, b *rec) int {
		return int(a.attempts[len(a.attempts)-1].handoff - b.attempts[len(b.attempts)-1].handoff)
	})
	for _, rr := range fails {
		if !r.giveUpLocked(rr) {
			r.handoffLocked(rr)
		}
	}
	q := ps.queue
	ps.queue = nil
	for _, rr := range q {
		r.handoffLocked(rr)
	}
}

// violate records a violation. It may be called with or without run.mu held:
// it takes only leaf locks.
func (r *run) violate(kind string, recs []*rec, format string, args ...any) {
	v := violation{kind: kind, msg: fmt.Sprintf(format, args...), part: -2}
	for _, rr := range recs {
		v.recs = append(v.recs, rr.id)
		v.part = rr.part
	}
	r.hist.add(evViolation, nil, nil, -2, kind+": "+v.msg)
	r.violMu.Lock()
	r.viol = append(r.viol, v)
	r.violMu.Unlock()
}

func waitFor(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// settleGoroutines waits, bounded, for the goroutine count to come back to
// what it was before the run: clients and kfake stop their goroutines
// asynchronously after Close.
func settleGoroutines(before int) bool {
	tk := time.NewTicker(10 * time.Millisecond)
	defer tk.Stop()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		if runtime.NumGoroutine() <= before {
			return true
		}
		select {
		case <-tk.C:
		case <-deadline.C:
			return runtime.NumGoroutine() <= before
		}
	}
}

// readBack reads every partition from the start with a separate client.
func (r *run) readBack() [][]*kgo.Record {
	logs := make([][]*kgo.Record, r.rc.partitions)
	want := make(map[int32]int64)
	offsets := make(map[int32]kgo.Offset)
	for p := range r.rc.partitions {
		hwm := r.c.PartitionInfo(chaosTopic, int32(p)).HighWatermark
		if hwm > 0 {
			want[int32(p)] = hwm
			offsets[int32(p)] = kgo.NewOffset().AtStart()
		}
	}
	if len(want) == 0 {
		return logs
	}
	cons, err := kgo.NewClient(
		kgo.SeedBrokers(r.c.ListenAddrs()...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{chaosTopic: offsets}),
		kgo.FetchMaxWait(50*time.Millisecond),
	)
	if err != nil {
		r.violate("readback", nil, "consumer: %v", err)
		return logs
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*stepTimeout)
	defer cancel()
	for len(want) > 0 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			r.violate("readback", nil, "reading the log back: %v (partitions left: %v)", ctx.Err(), want)
			return logs
		}
		fs.EachError(func(t string, p int32, err error) {
			r.hist.add(evLog, nil, nil, p, fmt.Sprintf("consumer error %s/%d: %v", t, p, err))
		})
		fs.EachRecord(func(kr *kgo.Record) {
			logs[kr.Partition] = append(logs[kr.Partition], kr)
			if hwm, ok := want[kr.Partition]; ok && kr.Offset >= hwm-1 {
				delete(want, kr.Partition)
			}
		})
	}
	return logs
}
