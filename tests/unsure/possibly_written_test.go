// Package unsure_test holds integration tests, against kfake, of how the
// idempotent producer reports records whose request may have been written.
// They need only the series' unsure-batch patches, not the fail-stop API.
package unsure_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPossiblyWrittenOnlyWrittenBatch: with AllowIdempotentProduceCancellation,
// a record whose request was written but never answered fails with an error
// wrapping kgo.ErrPossiblyWritten; a record behind it in the same partition,
// whose batch was never sent, fails with the plain cause.
//
// Scenario: A is produced with a cancelable context; its request reaches the
// broker, which holds it. B is produced to the same partition: it waits in a
// batch of its own, since nothing else is sent while A's request is in flight
// (no produce response yet: one request in flight). A's context is canceled:
// kgo kills the produce connection, fails A (its request may have been
// written) and, as it always does, every batch behind A in the partition.
//
// Pristine v1.22.3 (-tags pristine) fails A with the plain context error:
// nothing says that A may be in the log, so this test fails there. The series
// before the fix failed B with ErrPossiblyWritten too, although only A's
// request was ever written.
func TestPossiblyWrittenOnlyWrittenBatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	// Hold every produce request at the broker until release is closed,
	// and tell held about each one.
	var produces atomic.Int32
	held := make(chan struct{}, 8)
	release := make(chan struct{})
	defer close(release)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		produces.Add(1)
		held <- struct{}{}
		c.SleepControl(func() {
			select {
			case <-release:
			case <-ctx.Done():
			}
		})
		return nil, nil, false
	})

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.AllowIdempotentProduceCancellation(),
		kgo.ProducerLinger(300*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	type result struct {
		r   *kgo.Record
		err error
	}
	produce := func(pctx context.Context, v string) <-chan result {
		done := make(chan result, 1)
		cl.Produce(pctx, &kgo.Record{Topic: "t", Value: []byte(v)}, func(r *kgo.Record, err error) { done <- result{r, err} })
		return done
	}
	wait := func(what string, done <-chan result) result {
		t.Helper()
		select {
		case res := <-done:
			return res
		case <-ctx.Done():
			t.Fatalf("%s's promise was not called", what)
			return result{}
		}
	}

	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	doneA := produce(actx, "A")
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("A's produce request never reached the broker")
	}
	doneB := produce(ctx, "B")
	acancel()

	a, b := wait("A", doneA), wait("B", doneB)
	if n := produces.Load(); n != 1 {
		t.Fatalf("setup: the broker received %d produce requests, want 1 (A's)", n)
	}
	if !errors.Is(a.err, context.Canceled) || !isPossiblyWritten(a.err) {
		t.Errorf("A failed with %v, want an error saying A may have been written, wrapping %v", a.err, context.Canceled)
	}
	if !errors.Is(b.err, context.Canceled) || isPossiblyWritten(b.err) {
		t.Errorf("B failed with %v, want %v alone: B's batch was never sent", b.err, context.Canceled)
	}
}
