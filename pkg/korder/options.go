package korder

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrDeadLettered is the error (wrapping the cause) a record's promise
	// gets when DeadLetter diverted it to the dead-letter topic.
	ErrDeadLettered = errors.New("korder: record diverted to the dead-letter topic")

	// ErrDropped is the error (wrapping the cause) a record's promise gets
	// when Drop dropped it.
	ErrDropped = errors.New("korder: record dropped after a produce failure")

	// ErrStopped is the error (wrapping the cause) a record's promise gets
	// when Stop stopped its partition: the record that failed, every
	// record of the partition after it, and every record produced to the
	// partition until Resume. A record of a quarantined key gets it too
	// once a dead-letter copy of the key's records failed: the key is
	// stopped, not its partition (see QuarantineKeys).
	ErrStopped = errors.New("korder: partition stopped after a produce failure")

	// ErrDeadLetterFailed is the error, wrapping the dead-letter topic's
	// error and the cause, that a record DeadLetter could not divert
	// carries to the next policy (the promise's error wraps it).
	ErrDeadLetterFailed = errors.New("korder: dead-letter write failed")

	// ErrHeldFull is the error (wrapping the cause) a record's promise gets
	// when its partition failed and what the Producer keeps for it is at
	// MaxHeld or MaxHeldBytes. The record is not written and, as with Drop,
	// records produced after it may be. Stats.HeldFull counts them.
	ErrHeldFull = errors.New("korder: held queue full while the partition recovers")

	// ErrClosed is the error a record's promise gets if the Producer is
	// closed before the record could be produced. As with
	// kgo.ErrClientClosed, which it then wraps, a record whose produce
	// request was in flight when the Producer closed may have been written
	// anyway: the outcome of a request in flight at Close is unknown.
	ErrClosed = errors.New("korder: producer closed")
)

// DefaultMaxHeldBytes is the default of MaxHeldBytes: 64 MiB.
const DefaultMaxHeldBytes = 64 << 20

// DefaultMaxQuarantinedKeys is the default of MaxQuarantinedKeys: 10000.
const DefaultMaxQuarantinedKeys = 10000

type config struct {
	policies       []Policy
	maxHeld        int // per partition; 0: no bound
	maxHeldBytes   int64
	maxQuarantined int
	invalid        string
}

func defaultConfig() config {
	return config{
		policies:       []Policy{Retry(3, 100*time.Millisecond), Drop()},
		maxHeldBytes:   DefaultMaxHeldBytes,
		maxQuarantined: DefaultMaxQuarantinedKeys,
	}
}

func (c *config) validate() error {
	if c.invalid != "" {
		return fmt.Errorf("korder: %s: must be at least 1", c.invalid)
	}
	if len(c.policies) == 0 {
		return errors.New("korder: WithPolicies needs at least one policy")
	}
	for i, p := range c.policies {
		if err := p.validate(); err != nil {
			return err
		}
		if (p.kind == policyDrop || p.kind == policyStop) && i != len(c.policies)-1 {
			return fmt.Errorf("korder: %s settles every record, so the policies after it (%s) would never run", p, c.policies[i+1])
		}
	}
	return nil
}

// Opt configures a Producer.
type Opt func(*config)

// atLeast1 is an option that sets a bound, n, which must be at least 1.
func atLeast1[T int | int64](name string, n T, set func(*config)) Opt {
	return func(c *config) {
		set(c)
		if n < 1 {
			c.invalid = fmt.Sprintf("%s(%d)", name, n)
		}
	}
}

// WithPolicies sets the policies for failed records, applied in order,
// overriding the default of Retry(3, 100*time.Millisecond) then Drop(). The
// default does what a kgo user expects of kgo: a failed record's promise gets
// its error (wrapped in ErrDropped) and the client goes on, only in order and
// after three more attempts; nothing stops until Resume unless the policies
// end with Stop. For example, WithPolicies(Retry(5, time.Second),
// DeadLetter("dlq").QuarantineKeys()) retries, then diverts the failed
// records.
func WithPolicies(policies ...Policy) Opt {
	return func(c *config) { c.policies = policies }
}

// MaxHeld bounds how many records the Producer keeps for one failed
// partition (or topic) while it recovers: the failed and rejected records it
// holds, and those it produced again that are not yet written. There is no
// such bound by default (MaxHeldBytes bounds the bytes). At the bound, each
// further record that comes back failed or rejected for the partition fails
// with ErrHeldFull instead of being kept.
//
// Produce never blocks on these bounds: a record's partition is known only
// once kgo has partitioned it, so blocking would hold up every partition of
// the topic, not only the failed one. The topic's healthy partitions, and
// other topics, keep flowing.
func MaxHeld(n int) Opt {
	return atLeast1("MaxHeld", n, func(c *config) { c.maxHeld = n })
}

// MaxHeldBytes bounds the bytes the Producer keeps for one failed partition
// (or topic), as MaxHeld bounds the records: the sum of the key, value and
// header sizes of the records counted by MaxHeld. A record that would take
// the partition past the bound fails with ErrHeldFull. The default is
// DefaultMaxHeldBytes (64 MiB, some 600000 records of 100 bytes) per
// partition.
func MaxHeldBytes(n int64) Opt {
	return atLeast1("MaxHeldBytes", n, func(c *config) { c.maxHeldBytes = n })
}

// MaxQuarantinedKeys bounds how many keys each topic may have quarantined by
// DeadLetter(...).QuarantineKeys(); the default is DefaultMaxQuarantinedKeys
// (10000). A record that DeadLetter would divert while its topic's quarantine
// is full (counting the keys whose first copy is being written) is passed on
// to the next policy, as if the dead-letter topic had failed.
func MaxQuarantinedKeys(n int) Opt {
	return atLeast1("MaxQuarantinedKeys", n, func(c *config) { c.maxQuarantined = n })
}
