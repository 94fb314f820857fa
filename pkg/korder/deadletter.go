package korder

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers of a dead-letter copy: the cause, and the record's topic and
// partition.
const (
	HeaderCause     = "korder-cause"
	HeaderTopic     = "korder-topic"
	HeaderPartition = "korder-partition"
)

// deadLetters writes copies of records to dead-letter topics, and recovers
// the dead-letter partitions (and topics) kgo fails. They are not the
// Producer's: their failures are not counted, and their failed copies are not
// produced again (the record goes to the next policy). A failure is recovered,
// with no record, from a goroutine of its own: kgo refuses it until every
// promise of the failure has returned, which a promise cannot wait for.
type deadLetters struct {
	cl      *kgo.Client
	topics  map[string]bool // the policies' dead-letter topics (read only)
	closing <-chan struct{}

	mu         sync.Mutex
	recovering map[*kgo.ErrProducePartitionFailed]bool
}

func newDeadLetters(policies []Policy) *deadLetters {
	d := &deadLetters{topics: map[string]bool{}, recovering: map[*kgo.ErrProducePartitionFailed]bool{}}
	for _, p := range policies {
		if p.kind == policyDeadLetter {
			d.topics[p.topic] = true
		}
	}
	return d
}

// copyFor returns the dead-letter copy of pd's record.
func copyFor(topic string, pd *pending) *kgo.Record {
	r := pd.r
	cause := "quarantined"
	if pd.err != nil {
		cause = pd.err.Error()
	}
	hs := append(slices.Clip(r.Headers),
		kgo.RecordHeader{Key: HeaderCause, Value: []byte(cause)},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))},
	)
	return &kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: hs}
}

// divert produces a dead-letter copy of pd's record and calls done with the
// outcome, from kgo's promise.
func (d *deadLetters) divert(topic string, pd *pending, done func(error)) {
	d.cl.Produce(context.Background(), copyFor(topic, pd), func(r *kgo.Record, err error) {
		if err != nil {
			d.failed(err)
		}
		done(err)
	})
}

// failed takes a failed dead-letter copy: if it failed with (or was rejected
// by) a failure of its partition or topic, that failure is recovered.
func (d *deadLetters) failed(err error) {
	var f *kgo.ErrProducePartitionFailed
	if !errors.As(err, &f) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.recovering[f] {
		d.recovering[f] = true
		go d.recover(f)
	}
}

// recover recovers f once every promise of it has returned: kgo refuses
// until then, and it is tried again after a short wait, backing off. A topic
// that kgo keeps failed (copies produced to it during the recovery were
// rejected) is recovered again; a failure that kgo no longer has (recovered,
// or failed anew: the new failure's copies come back too) is done.
func (d *deadLetters) recover(f *kgo.ErrProducePartitionFailed) {
	defer func() {
		d.mu.Lock()
		delete(d.recovering, f)
		d.mu.Unlock()
	}()
	wait := minPendingWait
	for {
		err := d.cl.RecoverProducePartition(f, nil)
		if !errors.Is(err, kgo.ErrRecoveryPending) && err != error(f) {
			return // recovered, or no longer kgo's failure
		}
		tm := time.NewTimer(wait)
		select {
		case <-tm.C:
		case <-d.closing:
			tm.Stop()
			return
		}
		wait = min(2*wait, maxPendingWait)
	}
}

// quarantine is a topic's quarantined keys, each with the error that
// diverted its first record. Guarded by the topic's lock.
type quarantine map[string]error

var errQuarantineFull = errors.New("korder: quarantine full")

func (q quarantine) keys() [][]byte {
	var ks [][]byte
	for k := range q {
		ks = append(ks, []byte(k))
	}
	slices.SortFunc(ks, func(a, b []byte) int { return slices.Compare(a, b) })
	return ks
}
