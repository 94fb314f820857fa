package korder

import (
	"errors"
	"fmt"
	"time"
)

// The errors a record's promise gets wrap one of these and the cause.
var (
	// ErrDeadLettered: DeadLetter diverted the record.
	ErrDeadLettered = errors.New("korder: record diverted to the dead-letter topic")
	// ErrDropped: Drop dropped the record.
	ErrDropped = errors.New("korder: record dropped after a produce failure")
	// ErrStopped: Stop stopped the record's partition, or a failed copy its
	// quarantined key (see QuarantineKeys).
	ErrStopped = errors.New("korder: partition stopped after a produce failure")
	// ErrDeadLetterFailed: DeadLetter could not write the copy.
	ErrDeadLetterFailed = errors.New("korder: dead-letter write failed")
	// ErrHeldFull: the record's partition failed while what the Producer
	// keeps for it was at MaxHeld or MaxHeldBytes. The record is not
	// written; as with Drop, records produced after it may be.
	ErrHeldFull = errors.New("korder: held queue full while the partition recovers")
	// ErrClosed: the Producer closed before the record was written. As with
	// kgo.ErrClientClosed, which it may wrap, a record in flight at Close
	// may have been written.
	ErrClosed = errors.New("korder: producer closed")
)

type wrapped struct{ err, cause error } // fmt.Errorf("%w: %w", err, cause), its text made once read

func wrap(err, cause error) error  { return &wrapped{err, cause} }
func (w *wrapped) Error() string   { return w.err.Error() + ": " + w.cause.Error() }
func (w *wrapped) Unwrap() []error { return []error{w.err, w.cause} }

// The defaults of MaxHeld, MaxHeldBytes (64 MiB) and MaxQuarantinedKeys.
const (
	DefaultMaxHeld            = 10000
	DefaultMaxHeldBytes       = 64 << 20
	DefaultMaxQuarantinedKeys = 10000
)

type config struct {
	policies       []Policy
	maxHeld        int // per partition
	maxHeldBytes   int64
	maxQuarantined int
	invalid        string
}

func defaultConfig() config {
	return config{policies: []Policy{Retry(3, 100*time.Millisecond), Drop()}, maxHeld: DefaultMaxHeld, maxHeldBytes: DefaultMaxHeldBytes, maxQuarantined: DefaultMaxQuarantinedKeys}
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

func atLeast1[T int | int64](name string, n T, set func(*config)) Opt {
	return func(c *config) {
		set(c)
		if n < 1 {
			c.invalid = fmt.Sprintf("%s(%d)", name, n)
		}
	}
}

// WithPolicies sets the policies for failed records, applied in order (see
// Policy). The default, Retry(3, 100*time.Millisecond) then Drop(), does what
// a kgo user expects: a record that keeps failing gets its error (wrapped in
// ErrDropped) and the partition goes on, in order; only Stop stops one.
func WithPolicies(policies ...Policy) Opt { return func(c *config) { c.policies = policies } }

// MaxHeld bounds the records the Producer keeps for one failed partition (or
// topic): those it holds, and those it produced again not yet written. At the
// bound, a further record kgo fails or rejects for the partition fails with
// ErrHeldFull; Produce never blocks on it. The default is DefaultMaxHeld:
// held records cost memory and garbage collection, which a healthy partition
// would pay in throughput.
func MaxHeld(n int) Opt { return atLeast1("MaxHeld", n, func(c *config) { c.maxHeld = n }) }

// MaxHeldBytes bounds, as MaxHeld, the key, value and header bytes kept for
// one failed partition; the default is DefaultMaxHeldBytes.
func MaxHeldBytes(n int64) Opt {
	return atLeast1("MaxHeldBytes", n, func(c *config) { c.maxHeldBytes = n })
}

// MaxQuarantinedKeys bounds the keys each topic may have quarantined (see
// QuarantineKeys); the default is DefaultMaxQuarantinedKeys. At the bound, a
// record DeadLetter would divert goes on as if the write had failed.
func MaxQuarantinedKeys(n int) Opt {
	return atLeast1("MaxQuarantinedKeys", n, func(c *config) { c.maxQuarantined = n })
}
