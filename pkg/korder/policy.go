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
// settles is dropped, as by Drop.
//
// What DeadLetter and Drop settle depends on the cause. A record-level cause
// (INVALID_RECORD, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE,
// INVALID_TIMESTAMP, POLICY_VIOLATION) fails the whole batch that holds the
// record: they narrow it down first, as Isolate does, and settle only the
// record that fails on its own. Any other cause (the retries or the delivery
// timeout running out, NOT_ENOUGH_REPLICAS, an unknown topic, ...) belongs
// to the partition: they settle every record that failed with it in the last
// attempt (the failed batch, after the retries), as kgo fails them. Either
// way, the records behind them are then produced again, in order, past the
// policies.
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
// written twice). The halves of a batch being narrowed down (see Isolate)
// are not retried.
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

// Isolate narrows a record-level failure (see Policy) down to its culprit,
// for the policies after it, such as Stop (DeadLetter and Drop narrow down on
// their own): kgo fails whole batches, so the failed records are bisected:
// the first half is produced again, and a half that fails is split again,
// until the record that fails on its own is found, about log2(n) rounds for n
// records. Only that record is passed on. kgo keeps the partition failed
// while Isolate bisects, so nothing else of the topic waits.
func Isolate() Policy { return Policy{kind: policyIsolate} }

// DeadLetter diverts the failed record (see Policy for which) to the
// dead-letter topic: a copy with the original key, value, timestamp and
// headers, plus the headers korder-cause, korder-topic and korder-partition.
// The record's promise gets an error wrapping ErrDeadLettered and the cause,
// and the rest of the partition continues in order. If the copy cannot be
// written, the record is passed on, its cause now an error wrapping
// ErrDeadLetterFailed, the dead-letter topic's error and the original cause.
// The Producer does not produce to a dead-letter topic: NewProducer refuses
// one as kgo.DefaultProduceTopic, and a record produced to one fails.
func DeadLetter(topic string) Policy { return Policy{kind: policyDeadLetter, topic: topic} }

// QuarantineKeys makes a DeadLetter policy quarantine the key of every record
// it diverts: the records with that key in the same topic produced after it,
// those the Producer holds and those produced later, go to the dead-letter
// topic too, after it, so that they cannot overtake it, until
// Producer.ReleaseQuarantine. Other keys continue. Records with a nil key are
// not quarantined (an empty key is a key). Each topic holds at most
// MaxQuarantinedKeys keys. If the copy of a later record cannot be written,
// the key is stopped: that record and every later one with the key fail with
// an error wrapping ErrStopped and ErrDeadLetterFailed, until
// ReleaseQuarantine. Only DeadLetter accepts it.
func (p Policy) QuarantineKeys() Policy {
	if p.kind != policyDeadLetter {
		p.invalid = fmt.Sprintf("%s.QuarantineKeys(): only DeadLetter quarantines keys", p)
	}
	p.quarantine = true
	return p
}

// Drop drops the failed record (see Policy for which): its promise gets an
// error wrapping ErrDropped and the cause, and the rest of the partition
// continues in order.
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
		errors.Is(err, kerr.PolicyViolation) || errors.Is(err, kerr.RecordListTooLarge) || errors.Is(err, kerr.InvalidTimestamp)
}

// What the policies decided for the first failed record of a partition.
type actKind uint8

const (
	actProduce actKind = iota + 1 // produce n records from the front again
	actSettle                     // settle the record: its promise gets err
	actStop                       // stop the partition with err
)

type act struct {
	kind actKind
	n    int
	rest bool // actProduce: once the n are written, the rest goes whole, past the policies
	err  error
}

// call is what the policies see: the record, what the partition knows of the
// last failed round, and what the Producer lends them.
type call struct {
	pd       *pending
	cause    error // what the record's promise wraps: its error, and a failed dead-letter write
	suspects int   // the records of the last failed run still kept, from the front
	alone    bool  // pd is known to fail on its own
	from, at int   // the policy to start from (0: the first), and the last one applied, counted from 1
	env      stepEnv
}

// stepEnv is what the policies need from the Producer.
type stepEnv interface {
	backoff(d time.Duration) bool // false if the Producer closed meanwhile
	deadLetter(topic string, pd *pending, cause error, quarantine bool) error
}

// decide applies the policies to c's record, from c.from, until one decides;
// a record none settles is dropped.
func decide(policies []Policy, st *stats, c *call) act {
	for i := max(c.from-1, 0); ; i++ {
		c.at = i + 1
		p := Drop()
		if i < len(policies) {
			p = policies[i]
		}
		switch {
		case p.kind == policyRetry:
			if c.pd.attempts >= p.attempts || (!p.possiblyWritten && errors.Is(c.pd.err, kgo.ErrPossiblyWritten)) {
				continue
			}
			if !c.env.backoff(p.backoff) {
				return act{kind: actSettle, err: fmt.Errorf("%w: %w", ErrClosed, c.cause)}
			}
			c.pd.attempts++
			st.retries.Add(1)
			return act{kind: actProduce, n: c.suspects, rest: true} // the failed batch; the rest once it is written
		case p.kind == policyStop:
			return act{kind: actStop, err: c.cause}
		case !c.alone && perRecordCause(c.pd.err):
			// Narrowing down: the first half of the suspects (at least
			// one) again.
			return act{kind: actProduce, n: max(c.suspects/2, 1)}
		case p.kind == policyDrop:
			st.dropped.Add(1)
			return act{kind: actSettle, err: fmt.Errorf("%w: %w", ErrDropped, c.cause)}
		case p.kind == policyDeadLetter:
			err := c.env.deadLetter(p.topic, c.pd, c.cause, p.quarantine)
			switch {
			case err == nil:
				st.deadLettered.Add(1)
				return act{kind: actSettle, err: fmt.Errorf("%w: %w", ErrDeadLettered, c.cause)}
			case errors.Is(err, kgo.ErrClientClosed): // the copy's outcome is unknown
				return act{kind: actSettle, err: fmt.Errorf("%w: %w", ErrClosed, err)}
			}
			c.cause = fmt.Errorf("%w: %w; cause: %w", ErrDeadLetterFailed, err, c.cause)
		}
	}
}
