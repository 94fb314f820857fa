package chaos_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// mode is the client side a run uses.
type mode int

const (
	// modeFailStop: raw kgo with FailPartitionOnProduceFailure on, and
	// the test-side recovery protocol of harness_test.go (stop, wait for
	// outstanding promises, recover, re-produce failures in order,
	// release what was queued; in a transaction: abort and re-produce the
	// whole transaction).
	modeFailStop mode = iota
	// modeKorder: pkg/korder with one of the policy sets of korderPolicies;
	// the test only produces each record once (again after an aborted
	// transaction) and resumes a stopped topic.
	modeKorder
	// modeNaive: the option off (pristine-compatible), and every failed
	// record is produced again as soon as its promise reports the failure:
	// the baseline.
	modeNaive
)

func (m mode) String() string {
	switch m {
	case modeFailStop:
		return "failstop"
	case modeKorder:
		return "korder"
	}
	return "naive"
}

// kind is the producer configuration.
type kind int

const (
	kindIdempotent kind = iota
	kindNonIdempotent
	kindTxn
)

var kindNames = []string{"idempotent", "non-idempotent-1-inflight", "transactional"}

func (k kind) String() string { return kindNames[k] }

// sides are the client sides a configuration runs with the option on: raw
// kgo plus the test-side recovery protocol, or korder with a policy set
// (korder_patched_test.go maps the names to policies).
var sides = []string{"raw-kgo-recovery", "korder-retry", "korder-isolate", "korder-deadletter", "korder-drop", "korder-stop"}

// numConfigs is the number of configurations: kinds x sides. A seed's
// configuration is seed % numConfigs, so consecutive seeds cover them all.
var numConfigs = len(kindNames) * len(sides)

// configName names configuration i.
func configName(i int) string { return kindNames[i/len(sides)] + "/" + sides[i%len(sides)] }

// chooser makes the run's random choices: a seeded PRNG, or the fuzzer's
// bytes.
type chooser interface {
	intn(n int) int
}

type rngChooser struct{ r *rand.Rand }

func newRNG(seed uint64) rngChooser {
	return rngChooser{rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func (c rngChooser) intn(n int) int { return c.r.IntN(n) }

// byteChooser consumes one byte per choice; once the bytes run out every
// choice is 0 (for the fault schedule: a quiet tick).
type byteChooser struct {
	b []byte
	i int
}

func (c *byteChooser) intn(n int) int {
	if c.i >= len(c.b) {
		return 0
	}
	v := int(c.b[c.i])
	c.i++
	return v % n
}

var codecs = []struct {
	name string
	c    kgo.CompressionCodec
}{
	{"none", kgo.NoCompression()},
	{"snappy", kgo.SnappyCompression()},
	{"lz4", kgo.Lz4Compression()},
	{"zstd", kgo.ZstdCompression()},
}

// runConfig is everything a run's seed decides, except the fault schedule,
// which is drawn tick by tick from the same seed (or the fuzzer's bytes).
type runConfig struct {
	seed        uint64
	mode        mode
	config      int // configuration index, seed % numConfigs
	kind        kind
	side        int // index in sides
	brokers     int
	partitions  int
	producers   int
	keys        int // per producer
	codec       int // index in codecs
	linger      time.Duration
	retries     int           // RecordRetries
	delivery    time.Duration // RecordDeliveryTimeout, 0 for the default
	shortReq    bool          // short produce request timeouts (idempotent only)
	maxBuffered int           // MaxBufferedRecords, 0 for the default; raw and naive then use TryProduce
	cancelPct   int           // percent of records produced with a cancelable context
	tick        time.Duration // fault scheduler period
	prodTick    time.Duration // producer pacing period
	burst       int           // records per producer per producer tick
	tokens      int           // unresolved records per producer
	txnEvery    time.Duration // transaction length (transactional only)
	produceFor  time.Duration // how long producers produce
	maxHard     int           // hard failures before a record is given up on
}

func (rc runConfig) idempotent() bool { return rc.kind != kindNonIdempotent }

func (rc runConfig) txn() bool { return rc.kind == kindTxn }

// name is the configuration's name: producer kind / client side.
func (rc runConfig) name() string { return configName(rc.config) }

func (rc runConfig) String() string {
	s := fmt.Sprintf("seed=%d config=%s mode=%s brokers=%d partitions=%d producers=%d keys=%d codec=%s linger=%v retries=%d cancel=%d%% tick=%v produce=%v",
		rc.seed, rc.name(), rc.mode, rc.brokers, rc.partitions, rc.producers, rc.keys, codecs[rc.codec].name, rc.linger, rc.retries, rc.cancelPct, rc.tick, rc.produceFor)
	if rc.txn() {
		s += fmt.Sprintf(" txn_every=%v", rc.txnEvery)
	}
	if rc.delivery > 0 {
		s += fmt.Sprintf(" delivery_timeout=%v", rc.delivery)
	}
	if rc.shortReq {
		s += " short_request_timeouts"
	}
	if rc.maxBuffered > 0 {
		s += fmt.Sprintf(" max_buffered=%d", rc.maxBuffered)
	}
	return s
}

// newConfig derives a configuration from seed: its configuration (producer
// kind and client side) is seed % numConfigs; baseline runs it with the
// option off and the naive recovery instead. produceFor bounds the
// producing phase: short runs use a fixed short phase, long runs 0.75-2.25s.
func newConfig(seed uint64, baseline, long bool) runConfig {
	r := newRNG(seed)
	idx := int(seed % uint64(numConfigs))
	rc := runConfig{
		seed:      seed,
		config:    idx,
		kind:      kind(idx / len(sides)),
		side:      idx % len(sides),
		brokers:   1 + r.intn(3),
		producers: 1 + r.intn(8),
		keys:      1 + r.intn(12),
		codec:     r.intn(len(codecs)),
		linger:    time.Duration(r.intn(4)) * 3 * time.Millisecond,
		retries:   1 + r.intn(4),
		cancelPct: []int{0, 0, 2, 10}[r.intn(4)],
		tick:      time.Duration(15+r.intn(40)) * time.Millisecond,
		prodTick:  time.Duration(1+r.intn(4)) * time.Millisecond,
		burst:     1 + r.intn(4),
		tokens:    16 << r.intn(3),
		txnEvery:  time.Duration(20+r.intn(100)) * time.Millisecond,
		maxHard:   3 + r.intn(4),
	}
	// Mostly few partitions, sometimes up to 64.
	rc.partitions = []int{1 + r.intn(4), 1 + r.intn(16), 1 + r.intn(64)}[r.intn(3)]
	switch {
	case baseline:
		rc.mode = modeNaive
	case rc.side == 0:
		rc.mode = modeFailStop
	default:
		rc.mode = modeKorder
	}
	if r.intn(3) == 0 {
		rc.delivery = time.Duration(1000+r.intn(1500)) * time.Millisecond
	}
	if rc.idempotent() && r.intn(3) == 0 {
		rc.shortReq = true
	}
	if r.intn(3) == 0 {
		// ErrMaxBuffered pressure: kgo holds at most 25-75% of what
		// the producers may have outstanding.
		rc.maxBuffered = max(4, rc.producers*rc.tokens*(1+r.intn(3))/4)
	}
	if long {
		rc.produceFor = time.Duration(750+r.intn(1500)) * time.Millisecond
	} else {
		rc.produceFor = 400 * time.Millisecond
	}
	return rc
}

// fuzzConfig derives a short run from the fuzzer's input: the first 8 bytes
// seed the configuration, the rest drive the fault schedule.
func fuzzConfig(data []byte) (runConfig, chooser) {
	var b [8]byte
	n := copy(b[:], data)
	rc := newConfig(binary.LittleEndian.Uint64(b[:]), !failStopAvailable, false)
	return rc, &byteChooser{b: data[n:]}
}

// partitionFor is the partition of a record with key. korder runs with
// kgo's default partitioner (its per-partition holds then learned from
// kgo's rejections), which puts a keyed record where its key's murmur2 hash
// says; the other sides use ManualPartitioner with an FNV hash of the key.
func (rc runConfig) partitionFor(key string) int32 {
	if rc.mode == modeKorder {
		return int32(kgo.StickyKeyPartitioner(nil).ForTopic(chaosTopic).Partition(&kgo.Record{Key: []byte(key)}, rc.partitions))
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int32(h.Sum32() % uint32(rc.partitions))
}

// jumboPad is the size of the header that makes a jumbo record too large
// for a batch (ProducerBatchMaxBytes is batchMax).
const (
	batchMax = 16 << 10
	jumboPad = 20 << 10
)

// clientOpts are the producer's options for rc (without the fail-stop ones).
func (rc runConfig) clientOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.ProducerBatchCompression(codecs[rc.codec].c),
		kgo.ProducerLinger(rc.linger),
		kgo.ProducerBatchMaxBytes(batchMax),
		kgo.RecordRetries(rc.retries),
		kgo.MetadataMinAge(10 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 5 * time.Millisecond }),
	}
	if rc.mode != modeKorder {
		// korder: kgo's default partitioner (see partitionFor).
		opts = append(opts, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	}
	if !rc.idempotent() {
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(1))
	}
	if rc.txn() {
		opts = append(opts, kgo.TransactionalID(fmt.Sprintf("chaos-%d-%s", rc.seed, rc.mode)), kgo.TransactionTimeout(20*time.Second))
	}
	if rc.delivery > 0 {
		opts = append(opts, kgo.RecordDeliveryTimeout(rc.delivery))
	}
	if rc.shortReq {
		opts = append(opts, kgo.ProduceRequestTimeout(100*time.Millisecond), kgo.RequestTimeoutOverhead(150*time.Millisecond))
	}
	if rc.maxBuffered > 0 {
		opts = append(opts, kgo.MaxBufferedRecords(rc.maxBuffered))
	}
	return opts
}
