package korder

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// The headers DeadLetter adds to a copy.
const (
	HeaderCause     = "korder-cause"
	HeaderTopic     = "korder-topic"
	HeaderPartition = "korder-partition"
)

// deadLetters writes dead-letter copies (a failed one is not produced again),
// and recovers the dead-letter partitions kgo fails, from a goroutine.
type deadLetters struct {
	cl      *kgo.Client
	topics  map[string]bool // the policies' dead-letter topics (read only)
	closing <-chan struct{}

	recovering sync.Map // *kgo.ErrProducePartitionFailed being recovered: a chan closed once done
}

// divert produces a dead-letter copy of pd's record; done gets the outcome.
func (d *deadLetters) divert(topic string, pd *pending, cause error, done func(error)) {
	r := pd.r
	hs := append(slices.Clip(r.Headers),
		kgo.RecordHeader{Key: HeaderCause, Value: []byte(cause.Error())},
		kgo.RecordHeader{Key: HeaderTopic, Value: []byte(r.Topic)},
		kgo.RecordHeader{Key: HeaderPartition, Value: []byte(strconv.Itoa(int(r.Partition)))})
	d.produce(&kgo.Record{Topic: topic, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Headers: hs}, done)
}

// produce produces a copy.
func (d *deadLetters) produce(c *kgo.Record, done func(error)) {
	d.cl.Produce(context.Background(), c, func(_ *kgo.Record, err error) {
		f := failure(err)
		if f == nil {
			done(err)
			return
		}
		v, busy := d.recovering.LoadOrStore(f, make(chan struct{}))
		ch := v.(chan struct{})
		if !busy {
			go d.recover(f, ch)
		}
		if err != error(f) { // failed itself
			done(err)
		} else { // rejected for an earlier copy's failure (never sent): again once recover closes ch (done, or closing)
			go func() { <-ch; d.produce(c, done) }()
		}
	})
}

// recover recovers f, trying again while kgo refuses for pending promises or
// keeps a topic failed; a failure kgo no longer has is done.
func (d *deadLetters) recover(f *kgo.ErrProducePartitionFailed, recovered chan struct{}) {
	defer close(recovered)
	defer d.recovering.Delete(f)
	for wait := minPendingWait; ; wait = min(2*wait, maxPendingWait) {
		err := d.cl.RecoverProducePartition(f, nil)
		if !errors.Is(err, kgo.ErrRecoveryPending) && err != error(f) {
			return // recovered, or no longer kgo's failure
		}
		select {
		case <-time.After(wait):
		case <-d.closing:
			return
		}
	}
}

type quarantined struct {
	pt      *partition // the partition that quarantined it (behind)
	dlTopic string
	seq     uint64 // the record that quarantined the key: the records after it follow it
	cause   error  // its cause; nil while its copy is written (the key's room is reserved)
	stopped error  // a later record's copy failed: the key's records fail with it
}

type quarantine map[string]*quarantined // a topic's quarantined keys, guarded by its amu

func (q quarantine) keys() [][]byte {
	var ks [][]byte
	for k, e := range q {
		if e.cause != nil {
			ks = append(ks, []byte(k))
		}
	}
	slices.SortFunc(ks, bytes.Compare)
	return ks
}

// quarantinedLocked returns the quarantine a record falls under, if any.
func (t *topic) quarantinedLocked(key []byte, seq uint64) (quarantined, bool) {
	if e := t.quarantine[string(key)]; key != nil && e != nil && e.cause != nil && seq > e.seq {
		return *e, true
	}
	return quarantined{}, false
}

// reserve reserves key's room before its first copy (e, if made); false: full.
func (t *topic) reserve(pt *partition, key []byte, dlTopic string, seq uint64) (*quarantined, bool) {
	t.amu.Lock()
	defer t.amu.Unlock()
	if t.quarantine[string(key)] != nil {
		return nil, true
	} else if len(t.quarantine) >= t.p.cfg.maxQuarantined {
		return nil, false
	}
	e := &quarantined{pt: pt, dlTopic: dlTopic, seq: seq}
	t.quarantine[string(key)] = e
	t.setAttnLocked()
	return e, true
}

func (t *topic) release(key []byte) bool {
	t.amu.Lock()
	defer t.amu.Unlock()
	_, ok := t.quarantine[string(key)]
	delete(t.quarantine, string(key))
	t.setAttnLocked()
	return ok
}

// divertKeyed diverts pd, whose key is quarantined (q); a failed copy stops it.
func (p *Producer) divertKeyed(t *topic, pd *pending, q quarantined, done func(error)) {
	if q.stopped != nil {
		p.st.stopped.Add(1)
		done(q.stopped)
		return
	}
	p.dl.divert(q.dlTopic, pd, q.cause, func(err error) {
		switch {
		case err == nil:
			p.st.deadLettered.Add(1)
			err = fmt.Errorf("%w: key quarantined: %w", ErrDeadLettered, q.cause)
		case errors.Is(err, kgo.ErrClientClosed):
			err = wrap(ErrClosed, err)
		default:
			p.st.stopped.Add(1)
			err = fmt.Errorf("%w: key %q quarantined, and %w: %w", ErrStopped, pd.r.Key, ErrDeadLetterFailed, err)
			t.amu.Lock()
			if e := t.quarantine[string(pd.r.Key)]; e != nil && e.seq == q.seq && e.stopped == nil {
				e.stopped = err
			}
			t.amu.Unlock()
		}
		done(err)
	})
}
