package chaos_test

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// mode is the recovery protocol a run uses.
type mode int

const (
	// modeFailStop: FailPartitionOnProduceFailure on, and the recovery
	// protocol of protocol_test.go (stop, wait for outstanding promises,
	// recover, re-produce failures in order, release what was queued).
	modeFailStop mode = iota
	// modeNaive: the option off (pristine-compatible), and every failed
	// record is produced again as soon as its promise reports the failure.
	modeNaive
)

func (m mode) String() string {
	if m == modeFailStop {
		return "failstop"
	}
	return "naive"
}

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
	seed       uint64
	mode       mode
	brokers    int
	partitions int
	producers  int
	keys       int // per producer
	idempotent bool
	codec      int // index in codecs
	linger     time.Duration
	retries    int           // RecordRetries
	delivery   time.Duration // RecordDeliveryTimeout, 0 for the default
	shortReq   bool          // short produce request timeouts (idempotent only)
	cancelPct  int           // percent of records produced with a cancelable context
	tick       time.Duration // fault scheduler period
	prodTick   time.Duration // producer pacing period
	burst      int           // records per producer per producer tick
	tokens     int           // unresolved records per producer
	produceFor time.Duration // how long producers produce
	maxHard    int           // hard failures before a record is given up on
}

func (rc runConfig) String() string {
	idem := "idempotent"
	if !rc.idempotent {
		idem = "non-idempotent(inflight=1)"
	}
	s := fmt.Sprintf("seed=%d mode=%s brokers=%d partitions=%d producers=%d keys=%d %s codec=%s linger=%v retries=%d cancel=%d%% tick=%v produce=%v",
		rc.seed, rc.mode, rc.brokers, rc.partitions, rc.producers, rc.keys, idem, codecs[rc.codec].name, rc.linger, rc.retries, rc.cancelPct, rc.tick, rc.produceFor)
	if rc.delivery > 0 {
		s += fmt.Sprintf(" delivery_timeout=%v", rc.delivery)
	}
	if rc.shortReq {
		s += " short_request_timeouts"
	}
	return s
}

// newConfig derives a configuration from seed. produceFor bounds the
// producing phase: short runs use a fixed short phase, long runs 2-5s.
func newConfig(seed uint64, m mode, long bool) runConfig {
	r := newRNG(seed)
	rc := runConfig{
		seed:       seed,
		mode:       m,
		brokers:    1 + r.intn(3),
		partitions: 1 + r.intn(16),
		producers:  1 + r.intn(4),
		keys:       1 + r.intn(12),
		idempotent: r.intn(3) != 0,
		codec:      r.intn(len(codecs)),
		linger:     time.Duration(r.intn(4)) * 3 * time.Millisecond,
		retries:    1 + r.intn(4),
		cancelPct:  []int{0, 0, 2, 10}[r.intn(4)],
		tick:       time.Duration(15+r.intn(40)) * time.Millisecond,
		prodTick:   time.Duration(1+r.intn(4)) * time.Millisecond,
		burst:      1 + r.intn(4),
		tokens:     16 << r.intn(3),
		maxHard:    3 + r.intn(4),
	}
	if r.intn(3) == 0 {
		rc.delivery = time.Duration(1000+r.intn(1500)) * time.Millisecond
	}
	if rc.idempotent && r.intn(3) == 0 {
		rc.shortReq = true
	}
	if long {
		rc.produceFor = time.Duration(2000+r.intn(3000)) * time.Millisecond
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
	rc := newConfig(binary.LittleEndian.Uint64(b[:]), modeFailStop, false)
	return rc, &byteChooser{b: data[n:]}
}

func partitionFor(key string, partitions int) int32 {
	h := fnv.New32a()
	h.Write([]byte(key))
	return int32(h.Sum32() % uint32(partitions))
}

// clientOpts are the producer's options for rc (without the fail-stop ones).
func (rc runConfig) clientOpts() []kgo.Opt {
	opts := []kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(codecs[rc.codec].c),
		kgo.ProducerLinger(rc.linger),
		kgo.RecordRetries(rc.retries),
		kgo.MetadataMinAge(10 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 5 * time.Millisecond }),
	}
	if !rc.idempotent {
		opts = append(opts, kgo.DisableIdempotentWrite(), kgo.MaxProduceRequestsInflightPerBroker(1))
	}
	if rc.delivery > 0 {
		opts = append(opts, kgo.RecordDeliveryTimeout(rc.delivery))
	}
	if rc.shortReq {
		opts = append(opts, kgo.ProduceRequestTimeout(100*time.Millisecond), kgo.RequestTimeoutOverhead(150*time.Millisecond))
	}
	return opts
}
