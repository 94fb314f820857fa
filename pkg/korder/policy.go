package korder

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

type policyKind uint8

const (
	policyRetry policyKind = iota + 1
	policyIsolate
	policyDeadLetter
	policyDrop
	policyStop
)

// Policy decides what happens to a record that failed to produce. Policies
// are applied in the order given to WithPolicies, to one record at a time,
// the earliest failed record of the topic (with per-partition holds, of the
// partition) first: a policy either settles the record (it was written,
// diverted or dropped) or passes it to the next policy. Records after it
// are not written before it is settled, so the order of every partition is
// kept. A record that no policy settles is handled as by Stop.
//
// Kafka Streams' ProductionExceptionHandler (fail, continue, retry with a
// dead-letter queue) is the naming precedent; these policies keep order.
type Policy struct {
	kind       policyKind
	attempts   int
	backoff    time.Duration
	topic      string
	quarantine bool
}

// Retry produces the failed record again, with the records after it, in
// order, up to attempts times, waiting backoff before each attempt, then
// passes the record on. A record produced again is measured against
// RecordDeliveryTimeout afresh only if the client measures the timeout from
// when the record's batch is created rather than from the record's
// Timestamp (the downstream franz-go patch does).
func Retry(attempts int, backoff time.Duration) Policy {
	return Policy{kind: policyRetry, attempts: attempts, backoff: backoff}
}

// Isolate handles a record that failed with an error that may belong to a
// single record (MESSAGE_TOO_LARGE, INVALID_RECORD, CORRUPT_MESSAGE,
// POLICY_VIOLATION, or a record too large for a batch): kgo fails whole
// batches, so the failed records are bisected: the first half is produced
// again, in order, and a half that fails is split again, until the record
// that fails on its own is found, about log2(n) rounds for a batch of n
// records. Records that succeed are written in order; only a record that
// fails on its own is passed on, and once it is settled the rest is produced
// again (and bisected again if another record fails).
//
// Isolating rounds, and the dead-letter writes of any policy, do not wait
// out kgo's ProducerLinger: while one is in flight, the Producer flushes
// the client (a Flush that it cancels when the round is done), so no
// partition of the client lingers meanwhile. Retry rounds linger as usual
// (unless the client flushes manually, when every round flushes).
func Isolate() Policy { return Policy{kind: policyIsolate} }

// DeadLetter diverts the failed record to the dead-letter topic: a copy with
// the original key, value, timestamp and headers, plus the headers
// korder-cause, korder-topic and korder-partition. The record's promise gets
// an error wrapping ErrDeadLettered and the cause, and the rest of the
// partition continues in order. If the dead-letter topic cannot be written,
// the record is passed on.
func DeadLetter(topic string) Policy { return Policy{kind: policyDeadLetter, topic: topic} }

// QuarantineKeys makes a DeadLetter policy quarantine the key of every
// record it diverts: later records with that key in the same topic (with
// per-partition holds, the same partition) go to the dead-letter topic too,
// so that they cannot overtake it, until Producer.ReleaseQuarantine. Other
// keys continue. Records without a key are not quarantined.
func (p Policy) QuarantineKeys() Policy {
	p.quarantine = true
	return p
}

// Drop drops the failed record: its promise gets an error wrapping
// ErrDropped and the cause, and the rest of the partition continues in
// order.
func Drop() Policy { return Policy{kind: policyDrop} }

// Stop fails the record and stops its topic (with per-partition holds, its
// partition): the record, every record after it, and every record produced
// to the topic (partition) until Producer.Resume fail with an error wrapping
// ErrStopped and the cause, and nothing more is written to the failed
// partition.
func Stop() Policy { return Policy{kind: policyStop} }

func (p Policy) String() string {
	switch p.kind {
	case policyRetry:
		return fmt.Sprintf("Retry(%d, %s)", p.attempts, p.backoff)
	case policyIsolate:
		return "Isolate()"
	case policyDeadLetter:
		if p.quarantine {
			return fmt.Sprintf("DeadLetter(%q).QuarantineKeys()", p.topic)
		}
		return fmt.Sprintf("DeadLetter(%q)", p.topic)
	case policyDrop:
		return "Drop()"
	case policyStop:
		return "Stop()"
	}
	return "Policy{}"
}

// perRecordCause returns whether err may be caused by one record of a batch
// rather than by the partition or the broker.
func perRecordCause(err error) bool {
	for _, e := range []error{
		kerr.MessageTooLarge,
		kerr.InvalidRecord,
		kerr.CorruptMessage,
		kerr.PolicyViolation,
		kerr.RecordListTooLarge,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

type config struct {
	policies         []Policy
	maxHeld          int // 0: no bound
	maxHeldBytes     int64
	rejectWhenFull   bool
	topicHolds       bool
	stallAfter       time.Duration
	invalidHeldBound string
}

// DefaultStallAfter is the default of StallAfter: 100ms.
const DefaultStallAfter = 100 * time.Millisecond

// DefaultMaxHeldBytes is the default of MaxHeldBytes: 64 MiB.
const DefaultMaxHeldBytes = 64 << 20

func defaultConfig() config {
	return config{
		policies:     []Policy{Retry(3, 100*time.Millisecond), Stop()},
		maxHeldBytes: DefaultMaxHeldBytes,
		stallAfter:   DefaultStallAfter,
	}
}

func (c *config) validate() error {
	if c.invalidHeldBound != "" {
		return fmt.Errorf("korder: %s: must be at least 1", c.invalidHeldBound)
	}
	if c.stallAfter <= 0 {
		return fmt.Errorf("korder: StallAfter(%v): must be positive", c.stallAfter)
	}
	if len(c.policies) == 0 {
		return errors.New("korder: WithPolicies needs at least one policy")
	}
	for i, p := range c.policies {
		switch p.kind {
		case policyRetry:
			if p.attempts < 1 || p.backoff < 0 {
				return fmt.Errorf("korder: %s: attempts must be at least 1 and backoff not negative", p)
			}
		case policyDeadLetter:
			if p.topic == "" {
				return errors.New("korder: DeadLetter needs a topic")
			}
		case policyDrop, policyStop:
			if i != len(c.policies)-1 {
				return fmt.Errorf("korder: %s settles every record, so the policies after it (%s) would never run", p, c.policies[i+1])
			}
		case policyIsolate:
		default:
			return errors.New("korder: use the policy constructors (Retry, Isolate, DeadLetter, Drop, Stop)")
		}
	}
	return nil
}

// Opt configures a Producer.
type Opt func(*config)

// WithPolicies sets the policies for failed records, applied in order,
// overriding the default of Retry(3, 100*time.Millisecond) then Stop(). For
// example, WithPolicies(Retry(5, time.Second), Isolate(),
// DeadLetter("dlq").QuarantineKeys()) retries, narrows batch failures down
// to the failing records, and diverts those.
func WithPolicies(policies ...Policy) Opt {
	return func(c *config) { c.policies = policies }
}

// MaxHeld bounds how many records each topic (with per-partition holds,
// each partition) may hold while it recovers. There is no such bound by
// default: MaxHeldBytes bounds what a topic holds. When a held queue is
// full, Produce blocks until there is room or its context is done, or,
// with RejectWhenHeldFull, fails the record at once with ErrHeldFull.
//
// With per-partition holds learned from kgo (any partitioner but
// kgo.ManualPartitioner()), a partition's held records are the ones kgo
// rejected for it: one that finds the partition full fails with
// ErrHeldFull with RejectWhenHeldFull; without it, it is held all the
// same, and the whole topic holds its new records (so that Produce
// blocks) until the partition's records are handed back to kgo.
func MaxHeld(n int) Opt {
	return func(c *config) {
		c.maxHeld = n
		if n < 1 {
			c.invalidHeldBound = fmt.Sprintf("MaxHeld(%d)", n)
		}
	}
}

// MaxHeldBytes bounds the bytes a topic may hold while it, or with
// per-partition holds any of its partitions, recovers: the sum over its
// held records of their key, value and header sizes, shared by all the
// topic's partitions. The default is DefaultMaxHeldBytes (64 MiB). A record
// larger than the bound is held if the topic holds nothing else. When the
// bound is reached, Produce blocks until there is room or its context is
// done, or, with RejectWhenHeldFull, fails the record at once with
// ErrHeldFull.
//
// A Produce that blocks on a full held queue blocks the producing
// goroutine, and so the records it would produce next to other, healthy
// partitions. The bytes bound keeps a held partition from blocking that
// goroutine until the partition has taken a large share of memory (at
// 100 bytes a record, 64 MiB holds some 600000 records); RejectWhenHeldFull
// keeps it from blocking at all.
func MaxHeldBytes(n int64) Opt {
	return func(c *config) {
		c.maxHeldBytes = n
		if n < 1 {
			c.invalidHeldBound = fmt.Sprintf("MaxHeldBytes(%d)", n)
		}
	}
}

// RejectWhenHeldFull makes Produce fail a record at once, with an error
// wrapping ErrHeldFull, when its topic (partition) is recovering and its
// held queue is full (MaxHeld, MaxHeldBytes), instead of blocking until
// there is room: the producing goroutine then keeps producing to the
// healthy partitions. The rejected record is not written and, as with
// Drop, records produced after it may be: the application decides what
// to do with it (produce it again later, or give up on its key).
func RejectWhenHeldFull() Opt {
	return func(c *config) { c.rejectWhenFull = true }
}

// TopicHolds makes holds per topic, whatever the client's partitioner
// (they are otherwise per partition, see the package documentation): a
// failure on one partition holds the whole topic for its whole recovery,
// quarantines apply to the whole topic, and Stop stops it.
func TopicHolds() Opt {
	return func(c *config) { c.topicHolds = true }
}

// StallAfter sets how long a partition that has its share of kgo's buffer
// (three quarters of MaxBufferedRecords) must go without any of its
// records finishing before the Producer counts it as stalled and holds its
// new records itself, so that the topic's other partitions keep flowing;
// until then, Produce waits for room, as it would in kgo. The default is
// DefaultStallAfter (100ms). Set it above the longest time a produce
// request of a healthy partition takes (round trip and linger). See
// "Stalled partitions" in the package documentation.
func StallAfter(d time.Duration) Opt {
	return func(c *config) { c.stallAfter = d }
}
