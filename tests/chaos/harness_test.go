package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	chaosTopic = "chaos"
	dlqTopic   = "chaos-dlq" // korder's dead-letter topic
	endKey     = "END"       // key of the end-of-log markers of transactional runs
)

// rec is one logical record: created once by a producer, handed to kgo (or
// korder) once per attempt. All fields after the identity are guarded by
// run.mu.
type rec struct {
	id       int
	prod     int
	key      int
	part     int32
	keySeq   int // per (producer, key)
	partSeq  int // per (producer, partition)
	cancelOK bool
	jumbo    bool // too large for a batch: fails every attempt

	attempts []*attempt
	hard     int // failures other than "partition failed" rejections
	state    recState
	txnMark  int     // last transaction the record was handed off in
	kgoErrs  []error // korder: what kgo failed the record with, attempt by attempt
	outcome  string  // korder: how korder settled it for good (dropped, dead-lettered, ...)
	settled  string  // korder: how korder settled it in the open transaction
}

type recState int

const (
	recQueued   recState = iota // held back by the protocol, not handed off
	recInflight                 // handed off, promise not called
	recFailed                   // promise failed, waiting for the protocol
	recPending                  // written in a transaction that has not ended
	recSettled                  // korder settled it with an error in a transaction that has not ended
	recOK                       // written (per its promise; committed, in a transaction)
	recDropped                  // given up on, and reported
)

func (r *rec) keyName() string { return fmt.Sprintf("p%d-k%d", r.prod, r.key) }

func (r *rec) value() []byte {
	return fmt.Appendf(nil, "%d/%d/%d/%d/%d", r.id, r.prod, r.key, r.keySeq, r.partSeq)
}

// record is a fresh kgo.Record for attempt att of r. Its attHeader names
// the attempt, and stampHook counts its Produce calls in bufHeader, so that
// the checker can tell from a copy in the log who wrote it.
func (r *rec) record(att int) *kgo.Record {
	kr := &kgo.Record{Topic: chaosTopic, Partition: r.part, Key: []byte(r.keyName()), Value: r.value()}
	kr.Headers = []kgo.RecordHeader{{Key: attHeader, Value: strconv.AppendInt(nil, int64(att), 10)}}
	if r.jumbo {
		kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: "pad", Value: make([]byte, jumboPad)})
	}
	return kr
}

const (
	attHeader = "chaos-att" // the harness attempt that handed the record off
	bufHeader = "chaos-buf" // how many times it was given to kgo's Produce
)

// stampHook counts, in a record's bufHeader, the Produce calls it went
// through: 1 for the harness's hand-off (directly, or through korder), more
// when korder produced the same record again. kgo's own resends do not go
// through Produce, so two copies with the same attempt and count were
// written by one Produce call.
type stampHook struct{}

func (stampHook) OnProduceRecordBuffered(kr *kgo.Record) {
	if kr.Topic != chaosTopic {
		return
	}
	for i, h := range kr.Headers {
		if h.Key == bufHeader {
			n, _ := strconv.Atoi(string(h.Value))
			kr.Headers[i].Value = strconv.AppendInt(nil, int64(n+1), 10)
			return
		}
	}
	kr.Headers = append(kr.Headers, kgo.RecordHeader{Key: bufHeader, Value: []byte("1")})
}

// stamp returns a copy's attempt and Produce count (-1 if missing).
func stamp(kr *kgo.Record) (att, buf int) {
	att, buf = -1, -1
	for _, h := range kr.Headers {
		switch h.Key {
		case attHeader:
			att, _ = strconv.Atoi(string(h.Value))
		case bufHeader:
			buf, _ = strconv.Atoi(string(h.Value))
		}
	}
	return att, buf
}

func (r *rec) String() string {
	j := ""
	if r.jumbo {
		j = " jumbo"
	}
	return fmt.Sprintf("rec#%d(prod=%d key=%d part=%d keyseq=%d partseq=%d%s)", r.id, r.prod, r.key, r.part, r.keySeq, r.partSeq, j)
}

// attempt is one hand-off of a rec to kgo (or korder).
type attempt struct {
	id        int
	rec       *rec
	handoff   int64 // per-partition hand-off index
	epoch     int   // partition's recovery epoch at hand-off
	txn       int   // transaction it was handed off in, 0 if none
	committed bool  // its transaction committed
	// unconfirmed: its transaction's commit failed with an unknown outcome
	// (kgo's EndTransaction doc): the abort that followed returns nil
	// even if the commit had completed.
	unconfirmed bool
	ctx         context.Context
	promised    int
	err         error
	offset      int64
	at          int64 // run.order at hand-off (korder: before Produce is called)
	ret         int64 // korder: run.order once Produce returned
}

// call is a call to korder, in run.order: at is taken before the call, ret
// once it returned.
type call struct{ at, ret int64 }

// acked reports whether a's promise said it was written, and (in a
// transaction) the transaction committed.
func (a *attempt) acked() bool { return a.promised == 1 && a.err == nil && (a.txn == 0 || a.committed) }

// partState is the protocol's view of one partition. Guarded by run.mu.
type partState struct {
	failed   bool
	failure  *failure // kgo's failure of the partition, to recover (nil: none known)
	inflight int
	epoch    int
	next     int64
	failures []*rec     // failed records waiting to be produced again
	queue    []*rec     // held back while failed, in produce order
	stops    []*attempt // korder: the attempts that got ErrStopped
}

// run is one seeded chaos run.
type run struct {
	rc    runConfig
	ch    chooser
	start time.Time

	c  *kfake.Cluster
	cl *kgo.Client
	kp orderedProducer // modeKorder: the korder.Producer around cl

	mu          sync.Mutex
	parts       []*partState
	topicFailed bool
	recs        []*rec
	attempts    []*attempt
	order       int64   // orders hand-offs, korder Produce returns and Resumes
	resumes     []*call // korder: the Resume calls
	unresolved  int
	outstanding int // attempts without a promise
	stopped     bool
	closing     bool
	allDone     chan struct{} // closed once stopped and every record resolved
	promisesIn  chan struct{} // signaled whenever outstanding drops to 0 while closing
	tokens      []chan struct{}
	recoveries  int
	rejected    int // promises rejected by a failed partition or topic
	hardFails   int // promises failed with anything else
	hooks       atomic.Int64

	topicFailure *failure // kgo's failure of the topic (partition -1), to recover

	// Transactions (kindTxn), guarded by mu except txnDoomed.
	txnOpen   bool          // records may be handed off
	txnSeq    int           // the current transaction, from 1
	txnRecs   []*rec        // records handed off in the current transaction, in order
	txnAtts   []*attempt    // attempts of the current transaction
	txnQueue  []*rec        // records held while the transaction ends, in order
	txnDoomed atomic.Bool   // a partition failed in it: hand off nothing more, end it now
	txnFailed bool          // a record of the current transaction failed in kgo: it must not commit
	txnWake   chan struct{} // wakes the transaction loop, capacity 1
	idle      chan struct{} // signaled when outstanding drops to 0 while the transaction is closed
	commits   int
	aborts    int

	resumeCh chan struct{} // korder: a topic was stopped, capacity 1

	jumboNext atomic.Bool // the next record created is a jumbo one

	violMu sync.Mutex
	viol   []violation

	// cancelCtx is the context cancelable records are produced with; the
	// scheduler cancels it and swaps a new one in.
	cancelMu  sync.Mutex
	cancelCtx context.Context
	cancelFn  context.CancelFunc

	hookMu      sync.Mutex
	hookEvents  []hookEvent
	txnFailures []*failure    // kgo failures in the current transaction
	wake        chan struct{} // coordinator wake-up, capacity 1

	gates gates
	hist  history
}

// orderedProducer is the part of *korder.Producer the harness uses (see
// korder_patched_test.go; pristine franz-go cannot build korder).
type orderedProducer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
	Close()
	Resume(topic string)
}

type hookEvent struct {
	partition int32
	f         *failure
}

// failHook is the HookProducePartitionFailed (see the shim): it must not
// block, and runs with the partition's lock held, possibly inside Produce on
// a goroutine holding run.mu, so it only takes leaf locks and signals the
// coordinator (or, in a transaction, dooms it). In modeKorder, korder has
// its own hook; this one only records the call.
type failHook struct{ r *run }

// failed is the hook's body: f failed topic's partition (-1: the topic).
func (h *failHook) failed(topic string, partition int32, err error, f *failure) {
	r := h.r
	r.hooks.Add(1)
	r.hist.add(evHook, nil, nil, partition, fmt.Sprintf("OnProducePartitionFailed(%s, %d, %v)", topic, partition, err))
	if r.rc.txn() {
		r.hookMu.Lock()
		r.txnFailures = append(r.txnFailures, f)
		r.hookMu.Unlock()
		r.doomTxn()
		return
	}
	if r.rc.mode != modeFailStop || topic != chaosTopic {
		return
	}
	r.hookMu.Lock()
	r.hookEvents = append(r.hookEvents, hookEvent{partition, f})
	r.hookMu.Unlock()
	r.signal()
}

// noteFailureLocked records kgo's failure f of partition (-1: the topic),
// from the hook or a promise, as the one to recover, and stops the
// partition or the topic. run.mu is held.
func (r *run) noteFailureLocked(partition int32, f *failure) {
	switch {
	case f == nil:
	case partition < 0:
		r.topicFailed, r.topicFailure = true, f
	case int(partition) < len(r.parts):
		ps := r.parts[partition]
		ps.failed, ps.failure = true, f
	}
}

// failuresLocked describes the kgo failures the coordinator has not
// recovered yet. run.mu is held.
func (r *run) failuresLocked() string {
	var b strings.Builder
	if r.topicFailure != nil {
		fmt.Fprintf(&b, "[topic: %v]", r.topicFailure)
	}
	for i, ps := range r.parts {
		if ps.failure != nil {
			fmt.Fprintf(&b, "[%d: %v]", i, ps.failure)
		}
	}
	return b.String()
}

// unbufferedHook (modeKorder) records what kgo failed each record with, for
// the checker's "maybe written" rule: korder produces records again itself.
type unbufferedHook struct{ r *run }

func (h unbufferedHook) OnProduceRecordUnbuffered(kr *kgo.Record, err error) {
	if err == nil || kr.Topic != chaosTopic {
		return
	}
	r := h.r
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.decode(kr); ok {
		rr := r.recs[id]
		rr.kgoErrs = append(rr.kgoErrs, err)
		if a := rr.attempts[len(rr.attempts)-1]; r.rc.txn() && a.promised == 0 && a.txn == r.txnSeq && countsInTxn(err) {
			r.txnFailed = true
		}
		r.hist.add(evLog, rr, nil, rr.part, fmt.Sprintf("kgo failed it: %v", err))
	}
}

// commitUnconfirmed reports whether EndTransaction(TryCommit) failed with an
// error that leaves the commit's outcome unknown, as kgo documents: a
// transport error or UNKNOWN_SERVER_ERROR (anything but another broker
// error, conservatively). The transaction may have committed although the
// abort that follows succeeds.
func commitUnconfirmed(err error) bool {
	var ke *kerr.Error
	return err != nil && (!errors.As(err, &ke) || ke == kerr.UnknownServerError)
}

// failsNoPartition reports whether err is one that kgo fails records with
// without failing their partition, in a transaction: a fatal producer ID
// error (every buffered record fails with it), or an abort. korder passes
// such failures to the promise as they are.
func failsNoPartition(err error) bool {
	for _, e := range []error{kerr.OutOfOrderSequenceNumber, kerr.UnknownProducerID, kerr.InvalidProducerIDMapping, kerr.InvalidProducerEpoch, kerr.ProducerFenced, kerr.TransactionAbortable, kgo.ErrAborting} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// doomTxn marks the current transaction as unable to commit and wakes the
// transaction loop. It takes no lock.
func (r *run) doomTxn() {
	if !r.txnDoomed.Swap(true) {
		select {
		case r.txnWake <- struct{}{}:
		default:
		}
	}
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
	dropped    int // given up on and reported (korder: dropped, dead-lettered, stopped)
	lost       int
	unfinished int // attempts whose promise never came
	recoveries int
	rejected   int // promises rejected by a failed partition or topic
	hardFails  int // promises failed with another error
	hooks      int // HookProducePartitionFailed calls
	documented int // reorders and duplicates the option documents (see maybeWrittenLocked, nonRetryableAfterUnsureLocked)
	commits    int // transactions committed
	aborts     int // transactions aborted
	korder     string
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
		rc:       rc,
		ch:       faults,
		start:    time.Now(),
		allDone:  make(chan struct{}),
		wake:     make(chan struct{}, 1),
		txnWake:  make(chan struct{}, 1),
		idle:     make(chan struct{}, 1),
		resumeCh: make(chan struct{}, 1),
	}
	r.hist.start = r.start
	r.promisesIn = make(chan struct{}, 1)
	r.cancelCtx, r.cancelFn = context.WithCancel(context.Background())
	out := &outcome{rc: rc, hist: &r.hist}

	c, err := kfake.NewCluster(kfake.NumBrokers(rc.brokers), kfake.SeedTopics(int32(rc.partitions), chaosTopic), kfake.SeedTopics(1, dlqTopic))
	if err != nil {
		r.violate("setup", nil, "kfake.NewCluster: %v", err)
		out.viol = r.viol
		return out
	}
	r.c = c
	for range rc.partitions {
		r.parts = append(r.parts, &partState{})
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.WithLogger(logger{r}), kgo.Dialer(r.gates.dial), kgo.WithHooks(stampHook{})}, rc.clientOpts()...)
	switch rc.mode {
	case modeFailStop:
		opts = append(opts, failStopOpts(&failHook{r})...)
		r.cl, err = kgo.NewClient(opts...)
	case modeKorder:
		opts = append(opts, kgo.WithHooks(&failHook{r}, unbufferedHook{r}))
		r.kp, r.cl, err = newOrderedProducer(rc, opts)
	default:
		r.cl, err = kgo.NewClient(opts...)
	}
	if err == nil && rc.txn() {
		if err = r.cl.BeginTransaction(); err != nil {
			r.closeClient()
		}
		r.txnOpen, r.txnSeq = true, 1
	}
	if err != nil {
		c.Close()
		r.violate("setup", nil, "client: %v", err)
		out.viol = r.viol
		return out
	}
	// Coordinator (fail-stop protocol outside transactions only; the
	// naive mode re-produces from the promise, korder recovers itself).
	coordDone := make(chan struct{})
	coordQuit := make(chan struct{})
	go func() {
		defer close(coordDone)
		if rc.mode == modeFailStop && !rc.txn() {
			r.coordinate(coordQuit)
		} else {
			<-coordQuit
		}
	}()
	// Transaction loop.
	txnDone := make(chan struct{})
	txnQuit := make(chan struct{})
	go func() {
		defer close(txnDone)
		if rc.txn() {
			r.txnLoop(txnQuit)
		} else {
			<-txnQuit
		}
	}()
	// korder: resume a stopped topic (outside transactions; the
	// transaction loop resumes it when a new transaction begins).
	resumeDone := make(chan struct{})
	resumeQuit := make(chan struct{})
	go func() {
		defer close(resumeDone)
		for {
			select {
			case <-resumeQuit:
				return
			case <-r.resumeCh:
				r.mu.Lock()
				r.order++
				c := &call{at: r.order}
				r.resumes = append(r.resumes, c)
				r.mu.Unlock()
				r.korderResume()
				r.mu.Lock()
				r.order++
				c.ret = r.order
				r.mu.Unlock()
				r.hist.add(evRecover, nil, nil, -1, fmt.Sprintf("korder Resume(%s) order=%d-%d", chaosTopic, c.at, c.ret))
			}
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
	// Faults end with the phase, before the producers are waited for: a
	// producer blocked in Produce (korder's, at MaxBufferedRecords) waits
	// for records that faults injected at every tick (a dropped connection
	// each, which an idempotent producer retries) could keep unwritten.
	close(schedQuit)
	<-schedDone
	wg.Wait()
	r.hist.add(evPhase, nil, nil, -2, "producers stopped, faults removed")

	r.mu.Lock()
	r.stopped = true
	r.maybeAllDoneLocked()
	r.mu.Unlock()
	// A failure just before the faults went away may be waiting for the
	// coordinator, or the transaction loop.
	r.signal()
	select {
	case r.txnWake <- struct{}{}:
	default:
	}

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
		failures := r.failuresLocked()
		r.mu.Unlock()
		r.violate("stuck", nil, "records not resolved %v after producing stopped (kgo failures not recovered: %s): %v", drainTimeout, failures, stuck)
		// Where every goroutine is, for the history: a stuck run
		// rarely reproduces from its seed alone.
		var stacks strings.Builder
		_ = pprof.Lookup("goroutine").WriteTo(&stacks, 2)
		if r.kp != nil {
			r.hist.add(evPhase, nil, nil, -2, "korder when stuck: "+korderStats(r.kp))
		}
		r.hist.add(evPhase, nil, nil, -2, "goroutines when stuck:\n"+stacks.String())
	}
	drain.Stop()

	// Flush must return, with nothing left.
	fctx, fcancel := context.WithTimeout(context.Background(), stepTimeout)
	if err := r.flush(fctx); err != nil {
		r.violate("flush", nil, "Flush: %v", err)
	}
	fcancel()

	close(coordQuit)
	<-coordDone
	close(txnQuit)
	<-txnDone
	close(resumeQuit)
	<-resumeDone
	r.mu.Lock()
	r.closing = true
	r.mu.Unlock()

	closed := make(chan struct{})
	go func() { defer close(closed); r.closeClient() }()
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

	logs, dlq := r.readBack()
	c.Close()
	r.cancelFn()

	r.check(logs, out)
	r.checkDeadLetters(dlq)

	if !settleGoroutines(g0) {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		r.violate("leak", nil, "goroutines: %d before the run, %d after (stacks in the history file)", g0, runtime.NumGoroutine())
		r.hist.add(evPhase, nil, nil, -2, "goroutine dump:\n"+string(buf[:n]))
	}

	r.mu.Lock()
	out.recoveries = r.recoveries
	out.rejected, out.hardFails, out.hooks = r.rejected, r.hardFails, int(r.hooks.Load())
	out.commits, out.aborts = r.commits, r.aborts
	r.mu.Unlock()
	if r.kp != nil {
		out.korder = korderStats(r.kp)
	}
	r.violMu.Lock()
	out.viol = slices.Clone(r.viol)
	r.violMu.Unlock()
	out.faults = s.schedule
	out.elapsed = time.Since(r.start)
	return out
}

func (r *run) flush(ctx context.Context) error {
	if r.kp != nil {
		return r.kp.Flush(ctx)
	}
	return r.cl.Flush(ctx)
}

func (r *run) closeClient() {
	if r.kp != nil {
		r.kp.Close() // closes r.cl
		return
	}
	r.cl.Close()
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
			rr.jumbo = r.jumboNext.CompareAndSwap(true, false)
			keySeq[k]++
			rr.part = rc.partitionFor(rr.keyName())
			rr.partSeq = partSeq[rr.part]
			partSeq[rr.part]++
			r.submit(rr)
		}
	}
}

// submit registers a new record and hands it off, or queues it if its
// partition (or the topic, or the transaction) is failed or ending.
func (r *run) submit(rr *rec) {
	r.mu.Lock()
	rr.id = len(r.recs)
	r.recs = append(r.recs, rr)
	r.unresolved++
	if r.holdLocked(rr) {
		r.mu.Unlock()
		return
	}
	a := r.handoffLocked(rr)
	r.mu.Unlock()
	r.korderProduce(a)
}

// holdLocked queues rr instead of handing it off if the transaction is
// ending (or doomed), or, with the fail-stop protocol, if its partition or
// the topic is failed.
func (r *run) holdLocked(rr *rec) bool {
	switch {
	case r.rc.txn() && (!r.txnOpen || r.txnDoomed.Load() || len(r.txnQueue) > 0):
		rr.state = recQueued
		r.txnQueue = append(r.txnQueue, rr)
		r.hist.add(evQueue, rr, nil, rr.part, "queued: transaction ending")
		return true
	case r.rc.mode == modeFailStop && !r.rc.txn() && (r.topicFailed || r.parts[rr.part].failed):
		ps := r.parts[rr.part]
		rr.state = recQueued
		ps.queue = append(ps.queue, rr)
		r.hist.add(evQueue, rr, nil, rr.part, "queued: partition failed")
		return true
	}
	return false
}

// handoffLocked registers one attempt of rr. run.mu is held: this fixes the
// hand-off order per partition. kgo attempts are produced right here (no
// promise can run inside Produce, they run on kgo's promise goroutine; the
// hook can, and takes only leaf locks; with MaxBufferedRecords set, TryProduce
// never blocks, and otherwise the tokens keep kgo's buffer far below its
// limit). A korder attempt is returned, to be produced by korderProduce once
// run.mu is released: korder may block, and calls some promises inline.
func (r *run) handoffLocked(rr *rec) *attempt {
	ps := r.parts[rr.part]
	a := &attempt{id: len(r.attempts), rec: rr, handoff: ps.next, epoch: ps.epoch, offset: -1}
	ps.next++
	ps.inflight++
	r.order++
	a.at = r.order
	r.outstanding++
	r.attempts = append(r.attempts, a)
	rr.attempts = append(rr.attempts, a)
	rr.state = recInflight
	a.ctx = context.Background()
	if rr.cancelOK && len(rr.attempts) == 1 {
		// The first attempt of a cancelable record.
		r.cancelMu.Lock()
		a.ctx = r.cancelCtx
		r.cancelMu.Unlock()
	}
	if r.rc.txn() {
		a.txn = r.txnSeq
		r.txnAtts = append(r.txnAtts, a)
		if rr.txnMark != r.txnSeq {
			rr.txnMark = r.txnSeq
			r.txnRecs = append(r.txnRecs, rr)
		}
	}
	r.hist.add(evProduce, rr, a, rr.part, fmt.Sprintf("handoff=%d epoch=%d txn=%d order=%d", a.handoff, a.epoch, a.txn, a.at))
	if r.rc.mode == modeKorder {
		return a
	}
	kr := rr.record(a.id)
	promise := func(kr *kgo.Record, err error) { r.promise(a, kr, err) }
	if r.rc.maxBuffered > 0 {
		r.cl.TryProduce(a.ctx, kr, promise)
	} else {
		r.cl.Produce(a.ctx, kr, promise)
	}
	return nil
}

// korderProduce produces a korder attempt; run.mu must not be held.
func (r *run) korderProduce(a *attempt) {
	if a == nil {
		return
	}
	r.kp.Produce(a.ctx, a.rec.record(a.id), func(kr *kgo.Record, err error) { r.promise(a, kr, err) })
	r.mu.Lock()
	r.order++
	a.ret = r.order
	r.mu.Unlock()
}

// korderResume resumes the topic if korder stopped it.
func (r *run) korderResume() {
	r.kp.Resume(chaosTopic)
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
	if r.rc.txn() && !r.txnOpen && r.outstanding == 0 {
		select {
		case r.idle <- struct{}{}:
		default:
		}
	}
	ps := r.parts[rr.part]
	ps.inflight--
	a.err = err
	if err == nil {
		a.offset = kr.Offset
		r.hist.add(evPromise, rr, a, rr.part, fmt.Sprintf("ok offset=%d", kr.Offset))
		if r.rc.txn() {
			rr.state = recPending
			return
		}
		rr.state = recOK
		r.resolveLocked(rr)
		r.maybeWakeLocked(ps)
		return
	}
	r.hist.add(evPromise, rr, a, rr.part, fmt.Sprintf("failed: %v", err))
	if r.rc.mode == modeKorder {
		// korder's outcome is final (in a transaction: if it
		// commits). The record was dropped, diverted or stopped.
		r.hardFails++
		rr.hard++
		what := korderOutcome(err)
		switch {
		case what == "" && r.rc.txn() && failsNoPartition(err):
			// kgo failed it without failing its partition (the
			// producer ID failed): korder passes such a failure
			// through. The transaction cannot commit.
			r.txnFailed = true
			r.doomTxn()
		case what == "" && !r.closing:
			r.violate("korder", []*rec{rr}, "%v: korder promise failed with %v, which wraps none of ErrDropped, ErrDeadLettered, ErrStopped, nor its own context's error", rr, err)
		case what == "stopped" && !r.rc.txn() && !strings.Contains(err.Error(), "stopped after a produce failure: key "): // a stopped key, not its partition
			// Stop's contract is about the records produced after
			// this one and before Resume was called (checkStopped).
			// A record produced before a Resume can get ErrStopped
			// after that Resume (its promise comes when it comes).
			r.parts[rr.part].stops = append(r.parts[rr.part].stops, a)
			select {
			case r.resumeCh <- struct{}{}:
			default:
			}
		}
		if r.rc.txn() && !r.closing {
			rr.state, rr.settled = recSettled, what
			return
		}
		rr.state, rr.outcome = recDropped, what
		r.hist.add(evDrop, rr, nil, rr.part, "korder: "+what)
		r.resolveLocked(rr)
		return
	}
	if isRejected(err) {
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
	switch {
	case r.rc.mode == modeNaive:
		// Produce it again right away.
		if r.giveUpLocked(rr) || r.holdLocked(rr) {
			return
		}
		r.handoffLocked(rr)
	case r.rc.txn():
		// The transaction cannot commit: end it, abort, produce it
		// all again.
		r.txnFailed = true
		r.doomTxn()
	default:
		// Stop the partition (the hook may not have been handled
		// yet); the coordinator recovers kgo's failure, which the
		// error carries, and produces it again once everything in
		// flight for the partition has finished.
		ps.failed = true
		if f := failureOf(err); f != nil {
			r.noteFailureLocked(f.Partition, f)
		}
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

// txnLoop ends the transaction every txnEvery, or at once when it is doomed:
// it stops hand-offs, waits for every attempt of the transaction, flushes,
// tries to commit, and aborts if that fails. A committed transaction resolves
// its records. After an abort, its records are produced again, in order, in
// the next transaction (with the option on, a successful abort recovers the
// partitions that failed in it), before the records held meanwhile.
func (r *run) txnLoop(quit chan struct{}) {
	t := time.NewTimer(r.rc.txnEvery)
	defer t.Stop()
	for {
		select {
		case <-quit:
			return
		case <-t.C:
		case <-r.txnWake:
		}
		if !r.endTxn(quit) {
			return
		}
		t.Reset(r.rc.txnEvery)
	}
}

func (r *run) endTxn(quit chan struct{}) bool {
	r.mu.Lock()
	r.txnOpen = false
	r.mu.Unlock()
	for {
		r.mu.Lock()
		n := r.outstanding
		r.mu.Unlock()
		if n == 0 {
			break
		}
		select {
		case <-r.idle:
		case <-quit:
			return false
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if err := r.flush(ctx); err != nil {
		r.violate("txn", nil, "Flush before ending transaction %d: %v", r.txnSeq, err)
		return false
	}

	r.mu.Lock()
	seq, empty, failed := r.txnSeq, len(r.txnAtts) == 0, r.txnFailed
	r.mu.Unlock()
	// With nothing handed off, this only ends the client's state (kgo
	// sends nothing).
	err := r.cl.EndTransaction(ctx, kgo.TryCommit)
	committed := err == nil
	if !empty || err != nil {
		r.hist.add(evTxn, nil, nil, -2, fmt.Sprintf("EndTransaction(%d, TryCommit): %v (a record failed in it: %v)", seq, err, failed))
	}
	if committed && failed && r.rc.mode != modeNaive {
		r.violate("txn", nil, "transaction %d committed, although a record failed in it with the option on", seq)
	}
	if !committed {
		var aerr error
		for i := range 10 {
			if aerr = r.cl.EndTransaction(ctx, kgo.TryAbort); aerr == nil {
				break
			}
			r.hist.add(evTxn, nil, nil, -2, fmt.Sprintf("EndTransaction(%d, TryAbort) attempt %d: %v", seq, i, aerr))
			if !sleepCtx(ctx, 10*time.Millisecond) {
				break
			}
		}
		if aerr != nil {
			r.violate("txn", nil, "transaction %d: commit failed, and abort failed: %v", seq, aerr)
			return false
		}
		r.hist.add(evTxn, nil, nil, -2, fmt.Sprintf("EndTransaction(%d, TryAbort): ok", seq))
		r.checkAbortRecovered(ctx, seq)
	}

	r.mu.Lock()
	var carry []*rec
	for _, a := range r.txnAtts {
		a.committed, a.unconfirmed = committed, commitUnconfirmed(err)
	}
	for _, rr := range r.txnRecs {
		switch rr.state {
		case recPending:
			if committed {
				rr.state = recOK
				r.resolveLocked(rr)
				continue
			}
		case recSettled:
			if committed {
				rr.state, rr.outcome = recDropped, rr.settled
				r.hist.add(evDrop, rr, nil, rr.part, "korder: "+rr.settled+", in a committed transaction")
				r.resolveLocked(rr)
				continue
			}
		case recFailed:
		case recInflight:
			r.violate("txn", []*rec{rr}, "%v still in flight when transaction %d ended", rr, seq)
			continue
		default: // dropped, or queued again (naive)
			continue
		}
		// Aborted, or failed in a committed transaction: again.
		if r.giveUpLocked(rr) {
			continue
		}
		rr.state = recQueued
		carry = append(carry, rr)
	}
	r.txnRecs, r.txnAtts = nil, nil
	if !empty {
		r.txnSeq++
		if committed {
			r.commits++
		} else {
			r.aborts++
			r.recoveries++
		}
		// An abort recovers the partitions; a commit needed none.
		for _, ps := range r.parts {
			ps.epoch++
		}
	}
	r.txnDoomed.Store(false)
	r.txnFailed = false
	r.hookMu.Lock()
	r.txnFailures = nil
	r.hookMu.Unlock()
	queue := append(carry, r.txnQueue...)
	r.txnQueue = nil
	r.mu.Unlock()

	var berr error
	for i := range 10 {
		if berr = r.cl.BeginTransaction(); berr == nil {
			break
		}
		r.hist.add(evTxn, nil, nil, -2, fmt.Sprintf("BeginTransaction attempt %d: %v", i, berr))
		if !sleepCtx(ctx, 10*time.Millisecond) {
			break
		}
	}
	if berr != nil {
		r.violate("txn", nil, "BeginTransaction: %v", berr)
		return false
	}
	if r.kp != nil {
		r.korderResume() // a topic korder stopped continues in the new transaction
	}
	r.releaseTxn(queue)
	return true
}

// releaseTxn hands off queue (then whatever was queued meanwhile) in order,
// and opens the transaction. If it is doomed meanwhile, or full, the rest
// stays queued, in order, for the next one (and new records queue behind).
//
// Full: with MaxBufferedRecords set, raw kgo and the naive baseline produce
// with TryProduce, and a transaction's records are all buffered at once when
// they are produced again after an abort; more than kgo may buffer would fail
// (ErrMaxBuffered, the topic fails) and abort every time. So a released
// transaction holds at most MaxBufferedRecords records; records the
// producers add to an open transaction are not capped, which is where the
// pressure comes from.
func (r *run) releaseTxn(queue []*rec) {
	full := func() bool {
		return r.rc.maxBuffered > 0 && r.rc.mode != modeKorder && len(r.txnAtts) >= r.rc.maxBuffered
	}
	for {
		r.mu.Lock()
		if len(queue) == 0 {
			queue, r.txnQueue = r.txnQueue, nil
		}
		if len(queue) == 0 || r.txnDoomed.Load() || full() {
			r.txnQueue = append(queue, r.txnQueue...)
			r.txnOpen = true
			if len(r.txnQueue) > 0 {
				select {
				case r.txnWake <- struct{}{}:
				default:
				}
			}
			r.mu.Unlock()
			return
		}
		var todo []*attempt
		for i, rr := range queue {
			if r.txnDoomed.Load() || full() {
				r.txnQueue = append(slices.Clone(queue[i:]), r.txnQueue...)
				break
			}
			if a := r.handoffLocked(rr); a != nil {
				todo = append(todo, a)
			}
		}
		queue = nil
		r.mu.Unlock()
		for _, a := range todo {
			r.korderProduce(a)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// checkAbortRecovered checks that a successful abort recovered the kgo
// failures of its transaction: recovering one must be refused (not failed).
// One that is accepted was still failed (a violation), and is recovered now.
func (r *run) checkAbortRecovered(ctx context.Context, seq int) {
	r.hookMu.Lock()
	fs := r.txnFailures
	r.txnFailures = nil
	r.hookMu.Unlock()
	for _, f := range fs {
		err := recoverFailure(r.cl, f)
		for isRecoveryPending(err) && sleepCtx(ctx, time.Millisecond) {
			err = recoverFailure(r.cl, f)
		}
		if err == nil {
			r.violate("txn", nil, "transaction %d aborted, yet kgo still had %v failed", seq, f)
		}
	}
}

// coordinate is the fail-stop recovery protocol: for a failed partition whose
// records handed to kgo have all been promised, recover kgo's failure (again
// shortly while a promise of it has not returned), produce its failed
// records again in hand-off order (giving up on those that failed too
// often), then the records queued while it was failed. A failed topic
// (partition -1) stops every partition, and is recovered once nothing is in
// flight anywhere.
func (r *run) coordinate(quit chan struct{}) {
	for {
		select {
		case <-quit:
			return
		case <-r.wake:
		}
		r.mu.Lock()
		// Under run.mu: a promise that made a partition idle ran after
		// the hook for the failure it carries.
		r.hookMu.Lock()
		evs := r.hookEvents
		r.hookEvents = nil
		r.hookMu.Unlock()
		for _, ev := range evs {
			r.noteFailureLocked(ev.partition, ev.f)
		}
		if r.topicFailed {
			idle := true
			for _, ps := range r.parts {
				idle = idle && ps.inflight == 0
			}
			if idle && r.recoverLocked(-1, &r.topicFailure) {
				recovered := true
				for i, ps := range r.parts {
					if ps.failed {
						recovered = r.recoverLocked(int32(i), &ps.failure) && recovered
					}
				}
				if recovered {
					r.recoveries++
					r.topicFailed = false
					for i := range r.parts {
						r.restartLocked(int32(i))
					}
				}
			}
		} else {
			for i, ps := range r.parts {
				if ps.failed && ps.inflight == 0 && r.recoverLocked(int32(i), &ps.failure) {
					r.recoveries++
					r.restartLocked(int32(i))
				}
			}
		}
		r.mu.Unlock()
	}
}

// recoverLocked recovers kgo's failure *f of part (-1: the topic), with no
// records: the harness produces them again itself, after it. It reports
// whether *f is recovered (or nil); while a promise of it has not returned,
// it is not, and the coordinator is woken again shortly. run.mu is held, which
// every promise takes: one still running is waiting for it.
func (r *run) recoverLocked(part int32, f **failure) bool {
	if *f == nil {
		return true
	}
	err := recoverFailure(r.cl, *f)
	if isRecoveryPending(err) {
		time.AfterFunc(time.Millisecond, r.signal)
		return false
	}
	r.hist.add(evRecover, nil, nil, part, fmt.Sprintf("RecoverProducePartition(%s/%d): %v", chaosTopic, part, err))
	if err != nil {
		r.violate("recover", nil, "RecoverProducePartition of %v: %v", *f, err)
	}
	*f = nil
	return true
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

// readBack reads every partition of the topic, and the dead-letter topic,
// from the start with a separate client. In a transactional run it reads
// committed records only: it first writes an end marker (key endKey, outside
// any transaction) to every partition, and reads each up to its marker.
func (r *run) readBack() (logs [][]*kgo.Record, dlq []*kgo.Record) {
	logs = make([][]*kgo.Record, r.rc.partitions)
	type tp struct {
		topic string
		part  int32
	}
	want := make(map[tp]int64)
	offsets := map[string]map[int32]kgo.Offset{chaosTopic: {}, dlqTopic: {}}
	for p := range r.rc.partitions + 1 {
		k := tp{chaosTopic, int32(p)}
		if p == r.rc.partitions {
			k = tp{dlqTopic, 0}
		}
		hwm := r.c.PartitionInfo(k.topic, k.part).HighWatermark
		if hwm > 0 || r.rc.txn() {
			want[k] = hwm
			offsets[k.topic][k.part] = kgo.NewOffset().AtStart()
		}
	}
	if len(want) == 0 {
		return logs, nil
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(r.c.ListenAddrs()...),
		kgo.ConsumePartitions(offsets),
		kgo.FetchMaxWait(50 * time.Millisecond),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}
	if r.rc.txn() {
		opts = append(opts, kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	}
	cons, err := kgo.NewClient(opts...)
	if err != nil {
		r.violate("readback", nil, "consumer: %v", err)
		return logs, nil
	}
	defer cons.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*stepTimeout)
	defer cancel()
	if r.rc.txn() {
		var markers []*kgo.Record
		for k := range want {
			markers = append(markers, &kgo.Record{Topic: k.topic, Partition: k.part, Key: []byte(endKey)})
		}
		if err := cons.ProduceSync(ctx, markers...).FirstErr(); err != nil {
			r.violate("readback", nil, "writing the end markers: %v", err)
			return logs, nil
		}
	}
	for len(want) > 0 {
		fs := cons.PollFetches(ctx)
		if ctx.Err() != nil {
			r.violate("readback", nil, "reading the log back: %v (partitions left: %v)", ctx.Err(), want)
			return logs, dlq
		}
		fs.EachError(func(t string, p int32, err error) {
			r.hist.add(evLog, nil, nil, p, fmt.Sprintf("consumer error %s/%d: %v", t, p, err))
		})
		fs.EachRecord(func(kr *kgo.Record) {
			k := tp{kr.Topic, kr.Partition}
			if string(kr.Key) == endKey {
				delete(want, k)
				return
			}
			if kr.Topic == dlqTopic {
				dlq = append(dlq, kr)
			} else {
				logs[kr.Partition] = append(logs[kr.Partition], kr)
			}
			if hwm, ok := want[k]; ok && !r.rc.txn() && kr.Offset >= hwm-1 {
				delete(want, k)
			}
		})
	}
	return logs, dlq
}
