package korder

import (
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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
// the earliest failed record of its partition first: a policy either settles
// the record (it is produced again, diverted, dropped or stopped) or passes
// it to the next policy. Records after it are not written before it is
// settled, so the order of every partition is kept. A record that no policy
// settles is handled as by Stop.
//
// Kafka Streams' ProductionExceptionHandler (fail, continue, retry with a
// dead-letter queue) is the naming precedent; these policies keep order.
type Policy struct {
	kind            policyKind
	attempts        int
	backoff         time.Duration
	topic           string
	quarantine      bool
	possiblyWritten bool
	invalid         string
}

// Retry produces the failed record again, with the records of its partition
// after it, in order, up to attempts times, waiting backoff before each
// attempt, then passes the record on. Each attempt produces the records that
// failed with the record (its batch) first, and the rest of the partition's
// records only once those are written, so that an attempt that fails again
// costs the batch (at most kgo.MaxBufferedPartitionRecords records), not
// everything kept meanwhile. An attempt lingers as any record does.
//
// A record that failed with an error wrapping kgo.ErrPossiblyWritten (its
// batch may already be in the log) is not known to be unwritten: by default
// Retry passes it on at once, so that it is never written twice; with
// RetryPossiblyWritten it is retried like any other record (and may then be
// written twice).
func Retry(attempts int, backoff time.Duration) Policy {
	return Policy{kind: policyRetry, attempts: attempts, backoff: backoff}
}

// RetryPossiblyWritten makes a Retry policy produce again records that
// failed with kgo.ErrPossiblyWritten (which it passes on by default). Such a
// record may be written twice. Only Retry accepts it.
func (p Policy) RetryPossiblyWritten() Policy {
	if p.kind != policyRetry {
		p.invalid = fmt.Sprintf("%s.RetryPossiblyWritten(): only Retry retries", p)
	}
	p.possiblyWritten = true
	return p
}

// Isolate handles a record that failed with an error that may belong to a
// single record (MESSAGE_TOO_LARGE, INVALID_RECORD, CORRUPT_MESSAGE,
// POLICY_VIOLATION, RECORD_LIST_TOO_LARGE): kgo fails whole batches, so the
// failed records are bisected: the first half is produced again, and a half
// that fails is split again, until the record that fails on its own is found,
// about log2(n) rounds for n records. Only that record is passed on; once it
// is settled, the rest is produced again whole. kgo keeps the partition
// failed while Isolate bisects (RecoverProducePartitionKeepFailed), so
// nothing else of the topic waits.
func Isolate() Policy { return Policy{kind: policyIsolate} }

// DeadLetter diverts the failed record to the dead-letter topic: a copy with
// the original key, value, timestamp and headers, plus the headers
// korder-cause, korder-topic and korder-partition. The record's promise gets
// an error wrapping ErrDeadLettered and the cause, and the rest of the
// partition continues in order. If the dead-letter topic cannot be written,
// the record is passed on. The dead-letter topic must not be produced to
// through the Producer.
func DeadLetter(topic string) Policy { return Policy{kind: policyDeadLetter, topic: topic} }

// QuarantineKeys makes a DeadLetter policy quarantine the key of every record
// it diverts: later records with that key in the same topic go to the
// dead-letter topic too, so that they cannot overtake it, until
// Producer.ReleaseQuarantine. Other keys continue. Records without a key are
// not quarantined. Each topic holds at most MaxQuarantinedKeys keys. Only
// DeadLetter accepts it.
func (p Policy) QuarantineKeys() Policy {
	if p.kind != policyDeadLetter {
		p.invalid = fmt.Sprintf("%s.QuarantineKeys(): only DeadLetter quarantines keys", p)
	}
	p.quarantine = true
	return p
}

// Drop drops the failed record: its promise gets an error wrapping ErrDropped
// and the cause, and the rest of the partition continues in order.
func Drop() Policy { return Policy{kind: policyDrop} }

// Stop fails the record and stops its partition: the record, every record of
// the partition after it, and every record produced to the partition until
// Producer.Resume fail with an error wrapping ErrStopped and the cause, and
// nothing more is written to the partition (kgo keeps it failed). "After" and
// "until" are in call order: a Produce call concurrent with Resume (not
// returned when Resume is called) may go either way, as may one concurrent
// with the Produce of the record that failed.
func Stop() Policy { return Policy{kind: policyStop} }

func (p Policy) String() string {
	switch p.kind {
	case policyRetry:
		return fmt.Sprintf("Retry(%d, %s)", p.attempts, p.backoff)
	case policyIsolate:
		return "Isolate()"
	case policyDeadLetter:
		if p.quarantine && p.invalid == "" {
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

func (p Policy) validate() error {
	switch {
	case p.invalid != "":
		return errors.New("korder: " + p.invalid)
	case p.kind == 0:
		return errors.New("korder: use the policy constructors (Retry, Isolate, DeadLetter, Drop, Stop)")
	case p.kind == policyRetry && (p.attempts < 1 || p.backoff < 0):
		return fmt.Errorf("korder: %s: attempts must be at least 1 and backoff not negative", p)
	case p.kind == policyDeadLetter && p.topic == "":
		return errors.New("korder: DeadLetter needs a topic")
	}
	return nil
}

// perRecordCause returns whether err may be caused by one record of a batch
// rather than by the partition or the broker.
func perRecordCause(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage) ||
		errors.Is(err, kerr.PolicyViolation) || errors.Is(err, kerr.RecordListTooLarge)
}

// What a chain of steps decided for the first failed record of a partition.
type actKind uint8

const (
	actProduce actKind = iota + 1 // produce n records from the front again (n 0: all)
	actSettle                     // settle the record: its promise gets err
	actStop                       // stop the partition with err
)

type act struct {
	kind actKind
	n    int
	rest bool // actProduce: once the n are written, the rest goes whole, past the policies
	err  error
}

// call is what a step sees: the record, what the partition knows of the last
// failed round, and what the Producer lends the steps.
type call struct {
	pd       *pending
	suspects int // the records of the last failed run still kept, from the front
	env      stepEnv
}

// stepEnv is what the steps need from the Producer.
type stepEnv interface {
	backoff(d time.Duration) bool // false if the Producer closed meanwhile
	deadLetter(topic string, pd *pending, quarantine bool) error
}

// A step handles a record or passes it to next: policies compose as a chain
// of steps, in the spirit of func(next) next middleware.
type step func(c *call, next func() act) act

func (p Policy) step(st *stats) step {
	switch p.kind {
	case policyRetry:
		return func(c *call, next func() act) act {
			if c.pd.attempts >= p.attempts || (!p.possiblyWritten && errors.Is(c.pd.err, kgo.ErrPossiblyWritten)) {
				return next()
			}
			if !c.env.backoff(p.backoff) {
				return act{kind: actSettle, err: ErrClosed}
			}
			c.pd.attempts++
			st.retries.Add(1)
			// The first failed batch; the rest follows once written.
			return act{kind: actProduce, n: c.suspects, rest: true}
		}
	case policyIsolate:
		return func(c *call, next func() act) act {
			switch {
			case !perRecordCause(c.pd.err):
				return next()
			case c.suspects > 1:
				return act{kind: actProduce, n: c.suspects / 2}
			case c.suspects == 1:
				st.isolations.Add(1)
				return next()
			}
			return act{kind: actProduce} // the culprit is settled: the rest, whole
		}
	case policyDeadLetter:
		return func(c *call, next func() act) act {
			if err := c.env.deadLetter(p.topic, c.pd, p.quarantine); err != nil {
				return next()
			}
			st.deadLettered.Add(1)
			return act{kind: actSettle, err: fmt.Errorf("%w: %w", ErrDeadLettered, c.pd.err)}
		}
	case policyDrop:
		return func(c *call, _ func() act) act {
			st.dropped.Add(1)
			return act{kind: actSettle, err: fmt.Errorf("%w: %w", ErrDropped, c.pd.err)}
		}
	}
	return func(c *call, _ func() act) act { return act{kind: actStop, err: c.pd.err} }
}

// chain composes the policies' steps; a record no step settles stops its
// partition.
func chain(policies []Policy, st *stats) func(*call) act {
	steps := make([]step, len(policies))
	for i, p := range policies {
		steps[i] = p.step(st)
	}
	var run func(i int, c *call) act
	run = func(i int, c *call) act {
		if i == len(steps) {
			return act{kind: actStop, err: c.pd.err}
		}
		return steps[i](c, func() act { return run(i+1, c) })
	}
	return func(c *call) act { return run(0, c) }
}
