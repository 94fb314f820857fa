package korder

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"

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
// the dead-letter partitions kgo fails. They are not the Producer's: their
// failures are not counted, and only how many failed copies were seen per
// partition is kept, which recovering it needs.
type deadLetters struct {
	cl     *kgo.Client
	topics map[string]bool // the policies' dead-letter topics (read only)

	mu   sync.Mutex
	seen map[string]map[int32]int
}

func newDeadLetters(policies []Policy) *deadLetters {
	d := &deadLetters{topics: map[string]bool{}, seen: map[string]map[int32]int{}}
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
			d.failed(r, err)
		}
		done(err)
	})
}

// failed counts a failed dead-letter record, and recovers its partition (or
// topic) once every record kgo failed or rejected there was seen.
func (d *deadLetters) failed(r *kgo.Record, err error) {
	id := r.Partition
	if failedWithTopic(d.cl, r.Topic, id, err) {
		id = -1
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	parts := d.seen[r.Topic]
	if parts == nil {
		parts = map[int32]int{}
		d.seen[r.Topic] = parts
	}
	parts[id]++
	if d.cl.RecoverProducePartition(r.Topic, id, parts[id], false, nil) == nil {
		delete(parts, id)
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
