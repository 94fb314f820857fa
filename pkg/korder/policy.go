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
// are applied in the order given to WithPolicies, to the earliest failed
// record of its partition first: a policy settles the record (produces it
// again, diverts, drops or stops it) or passes it to the next one; records
// after it wait, so order is kept. A record no policy settles is dropped.
//
// A record-level cause (INVALID_RECORD, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE,
// RECORD_LIST_TOO_LARGE, INVALID_TIMESTAMP, POLICY_VIOLATION) fails the whole
// batch: DeadLetter and Drop narrow it down first, as Isolate does, and
// settle only the record that fails on its own. Any other cause (retries or
// the delivery timeout running out, NOT_ENOUGH_REPLICAS, an unknown topic,
// ...) belongs to the partition: they settle every record that failed with it
// in the last attempt. Either way, the records behind are then produced
// again, in order, past the policies: the first alone, the rest once it is
// written, so that a partition whose every record fails costs one attempt
// per record.
type Policy struct {
	kind            policyKind
	attempts        int
	backoff         time.Duration
	topic           string
	quarantine      bool
	possiblyWritten bool
	invalid         string
}

// Retry produces the failed record again, with its partition's records after
// it, up to attempts times, waiting backoff before each attempt, then passes
// it on. Each attempt produces the failed batch first, the rest once it is
// written. A record that failed with kgo.ErrPossiblyWritten is passed on at
// once (see RetryPossiblyWritten); halves being narrowed down are not retried.
func Retry(attempts int, backoff time.Duration) Policy {
	return Policy{kind: policyRetry, attempts: attempts, backoff: backoff}
}

// RetryPossiblyWritten makes Retry retry records that failed with
// kgo.ErrPossiblyWritten too: they may be written twice.
func (p Policy) RetryPossiblyWritten() Policy {
	if p.kind != policyRetry {
		p.invalid = fmt.Sprintf("%s.RetryPossiblyWritten(): only Retry retries", p)
	}
	p.possiblyWritten = true
	return p
}

// Isolate narrows a record-level failure (see Policy) down to its culprit for
// the policies after it, such as Stop, bisecting the batch in about log2(n)
// rounds for n records.
func Isolate() Policy { return Policy{kind: policyIsolate} }

// DeadLetter diverts the failed record (see Policy for which) to topic: a
// copy with the original key, value, timestamp and headers, plus HeaderCause,
// HeaderTopic and HeaderPartition. Its promise gets an error wrapping
// ErrDeadLettered and the cause. If the copy cannot be written, the record is
// passed on, its cause wrapping ErrDeadLetterFailed, the write's error and
// the original cause. The Producer does not produce to a dead-letter topic.
func DeadLetter(topic string) Policy { return Policy{kind: policyDeadLetter, topic: topic} }

// QuarantineKeys makes DeadLetter quarantine the key of every record it
// diverts: the topic's records with that key produced after it follow it to
// the dead-letter topic, in order, until Producer.ReleaseQuarantine. A nil
// key is not quarantined (an empty key is a key). If a later record's copy
// cannot be written, the key is stopped: that record and the key's later ones
// fail with ErrStopped wrapping ErrDeadLetterFailed, until ReleaseQuarantine.
func (p Policy) QuarantineKeys() Policy {
	if p.kind != policyDeadLetter {
		p.invalid = fmt.Sprintf("%s.QuarantineKeys(): only DeadLetter quarantines keys", p)
	}
	p.quarantine = true
	return p
}

// Drop drops the failed record (see Policy for which): its promise gets an
// error wrapping ErrDropped and the cause.
func Drop() Policy { return Policy{kind: policyDrop} }

// Stop stops the record's partition: the record, the partition's records
// after it, and those produced to it until Producer.Resume fail with
// ErrStopped wrapping the cause; kgo keeps the partition failed. A Produce
// call concurrent with the failure or with Resume may go either way.
func Stop() Policy { return Policy{kind: policyStop} }

func (p Policy) String() string {
	switch p.kind {
	case policyRetry:
		return fmt.Sprintf("Retry(%d, %s)", p.attempts, p.backoff)
	case policyDeadLetter:
		if p.quarantine && p.invalid == "" {
			return fmt.Sprintf("DeadLetter(%q).QuarantineKeys()", p.topic)
		}
		return fmt.Sprintf("DeadLetter(%q)", p.topic)
	}
	return [...]string{"Policy{}", "", "Isolate()", "", "Drop()", "Stop()"}[p.kind]
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

// perRecordCause: err may be caused by one record of a batch.
func perRecordCause(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.InvalidRecord) || errors.Is(err, kerr.CorruptMessage) ||
		errors.Is(err, kerr.PolicyViolation) || errors.Is(err, kerr.RecordListTooLarge) || errors.Is(err, kerr.InvalidTimestamp)
}

type actKind uint8 // what the policies decided for the first failed record

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

// call is what the policies see.
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

// decide applies the policies to c's record, from c.from, until one decides.
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
				return act{kind: actSettle, err: wrap(ErrClosed, c.cause)}
			}
			c.pd.attempts++
			st.retries.Add(1)
			return act{kind: actProduce, n: c.suspects, rest: true} // the failed batch; the rest once it is written
		case p.kind == policyStop:
			return act{kind: actStop, err: c.cause}
		case !c.alone && perRecordCause(c.pd.err):
			return act{kind: actProduce, n: max(c.suspects/2, 1)} // narrowing down
		case p.kind == policyDrop:
			st.dropped.Add(1)
			return act{kind: actSettle, err: wrap(ErrDropped, c.cause)}
		case p.kind == policyDeadLetter:
			err := c.env.deadLetter(p.topic, c.pd, c.cause, p.quarantine)
			switch {
			case err == nil:
				st.deadLettered.Add(1)
				return act{kind: actSettle, err: wrap(ErrDeadLettered, c.cause)}
			case errors.Is(err, kgo.ErrClientClosed): // the copy's outcome is unknown
				return act{kind: actSettle, err: wrap(ErrClosed, err)}
			}
			c.cause = fmt.Errorf("%w: %w; cause: %w", ErrDeadLetterFailed, err, c.cause)
		}
	}
}
