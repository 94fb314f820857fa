//go:build !pristine

package chaos_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// korderPolicies are the policy sets of the korder sides (see sides).
func korderPolicies(side string) []korder.Policy {
	switch side {
	case "korder-retry":
		return []korder.Policy{korder.Retry(3, 5*time.Millisecond)} // then Drop
	case "korder-isolate":
		return []korder.Policy{korder.Isolate(), korder.Drop()}
	case "korder-deadletter":
		return []korder.Policy{korder.DeadLetter(dlqTopic).QuarantineKeys()} // then Drop
	case "korder-drop":
		return []korder.Policy{korder.Drop()}
	case "korder-stop":
		return []korder.Policy{korder.Stop()}
	}
	panic("unknown korder side " + side)
}

// newOrderedProducer builds the korder.Producer of a modeKorder run. With
// CHAOS_KORDER_BOUND=n, its client gets kgo.MaxBufferedPartitionRecords(n)
// (korder's default is 10000, which these runs never reach): a small n makes
// every partition that retries its first batch hand its later records back
// to korder.
func newOrderedProducer(rc runConfig, opts []kgo.Opt) (orderedProducer, *kgo.Client, error) {
	if n, err := strconv.Atoi(os.Getenv("CHAOS_KORDER_BOUND")); err == nil {
		opts = append(slices.Clip(opts), kgo.MaxBufferedPartitionRecords(n))
	}
	p, err := korder.NewProducer(opts, korder.WithPolicies(korderPolicies(sides[rc.side])...))
	if err != nil {
		return nil, nil, err
	}
	return p, p.Client(), nil
}

// korderOutcome names korder's final error, "" if it wraps none of korder's.
func korderOutcome(err error) string {
	switch {
	case errors.Is(err, korder.ErrDropped):
		return "dropped"
	case errors.Is(err, korder.ErrDeadLettered):
		return "dead-lettered"
	case errors.Is(err, korder.ErrStopped):
		return "stopped"
	case errors.Is(err, korder.ErrHeldFull):
		return "held-full"
	case errors.Is(err, korder.ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// The record's own context is done: korder settles it with
		// its context's error, outside the policies.
		return "canceled"
	}
	return ""
}

func korderStats(op orderedProducer) string {
	s := op.(*korder.Producer).Stats()
	return fmt.Sprintf("korder{failures=%d retries=%d isolations=%d deadlettered=%d dropped=%d stopped=%d quarantined=%d held=%d}",
		s.Failures, s.Retries, s.Isolations, s.DeadLettered, s.Dropped, s.Stopped, s.Quarantined, s.Held)
}
