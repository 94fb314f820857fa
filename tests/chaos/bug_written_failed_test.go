//go:build !pristine

package chaos_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestBugIdempotentFailedRecordWasWritten: found by TestChaos (seed 5009,
// idempotent, short request timeouts, about 1 run in 15): the checker counted
// duplicates with the idempotent producer, because a record reported failed
// was already in the log.
//
// Scenario: an idempotent produce request is written by the broker but its
// response is lost (client-side read timeout: the connection is closed). kgo
// retries the batch; the broker now answers NOT_ENOUGH_REPLICAS (a real broker
// checks min.insync.replicas before its duplicate-sequence check, as kfake's
// fault does); once RecordRetries runs out kgo fails the batch.
//
// Expected (godoc of FailPartitionOnProduceFailure: the guarantee "holds with
// the idempotent producer ..., where a failed record was not written"): the
// failed record is not in the log. Observed: it is (high watermark 2), so the
// recovery the godoc recommends (re-produce the failed records in order)
// writes it twice. The fail-stop ordering guarantee itself holds: nothing
// after the failed record is written before recovery.
//
// Reading of the cause (upstream behaviour the patch inherits, sink.go): a
// client-side request error does not set batch.unsureIfProduced (only
// REQUEST_TIMED_OUT and NOT_ENOUGH_REPLICAS_AFTER_APPEND responses do,
// sink.go:1110), and any later response re-enables failing
// (batch.canFailFromLoadErrs = true, sink.go:1099), so the retriable-error
// case (sink.go:1137-1140) falls through to failing the batch once
// tries > RecordRetries, although the first attempt's outcome is unknown.
// Either the batch should stay unsure after a lost response (bypassing
// RecordRetries as for REQUEST_TIMED_OUT), or the godoc should say that with
// the idempotent producer a record that failed after a lost response may have
// been written, and re-producing it may duplicate it (order is kept).
//
// Run it with CHAOS_BUGS=1.
func TestBugIdempotentFailedRecordWasWritten(t *testing.T) {
	if os.Getenv("CHAOS_BUGS") == "" {
		t.Skip("BUG: idempotent producer: a record failed (NOT_ENOUGH_REPLICAS past RecordRetries after a lost response) was written; re-producing it duplicates it. Set CHAOS_BUGS=1 to run.")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, chaosTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	g := &gates{expired: make(chan struct{}, 1)}
	hooked := make(chan struct{}, 1)
	r := &run{wake: make(chan struct{}, 1), hist: history{start: time.Now()}}
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.Dialer(g.dial),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.RecordRetries(2),
		kgo.MetadataMinAge(10 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 5 * time.Millisecond }),
		kgo.ProduceRequestTimeout(100 * time.Millisecond),
		kgo.RequestTimeoutOverhead(100 * time.Millisecond),
	}, failStopOpts(&failHook{r})...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	go func() {
		select {
		case <-r.wake:
			hooked <- struct{}{}
		case <-ctx.Done():
		}
	}()

	// Warm up: producer ID, metadata, one record at offset 0.
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: chaosTopic, Value: []byte("warm-up")}).FirstErr(); err != nil {
		t.Fatalf("warm-up: %v", err)
	}

	// Hold the broker's responses, and observe the next produce request.
	release := g.hold(c.ListenAddrs()[0])
	defer release()
	seen := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Observe: true, Count: -1})
	done := make(chan error, 1)
	cl.Produce(ctx, &kgo.Record{Topic: chaosTopic, Value: []byte("r1")}, func(_ *kgo.Record, err error) { done <- err })
	if err := seen.Wait(ctx, 1); err != nil {
		t.Fatalf("the produce request never reached the broker: %v", err)
	}
	seen.Remove()
	// PartitionInfo runs on the cluster's loop, after the request.
	if hwm := c.PartitionInfo(chaosTopic, 0).HighWatermark; hwm != 2 {
		t.Fatalf("setup: high watermark %d after the broker handled r1, want 2", hwm)
	}
	// From now on the broker answers NOT_ENOUGH_REPLICAS; once the client
	// gave up reading the lost response, let responses through.
	ner := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Err: kerr.NotEnoughReplicas, Count: -1})
	defer ner.Remove()
	select {
	case <-g.expired:
	case <-ctx.Done():
		t.Fatal("the client never timed out reading the held response")
	}
	release()

	var perr error
	select {
	case perr = <-done:
	case <-ctx.Done():
		t.Fatal("r1's promise was not called")
	}
	if perr == nil {
		t.Fatal("setup: r1 succeeded; want it failed with NOT_ENOUGH_REPLICAS")
	}
	t.Logf("r1 failed with: %v", perr)
	select {
	case <-hooked:
	case <-ctx.Done():
		t.Fatal("OnProducePartitionFailed was not called")
	}
	hwm := c.PartitionInfo(chaosTopic, 0).HighWatermark
	if errors.Is(perr, kerr.NotEnoughReplicas) && hwm == 2 {
		t.Fatalf("BUG: r1 was reported failed (%v) with the idempotent producer, yet the broker wrote it (high watermark %d, want 1): re-producing it, as the recovery protocol says, duplicates it", perr, hwm)
	}
	if hwm != 1 {
		t.Fatalf("r1 failed with %v, high watermark %d, want 1", perr, hwm)
	}
}
