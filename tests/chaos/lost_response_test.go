package chaos_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestLostResponse: a produce request that the broker wrote, but whose
// response the client never read, must not end with its record reported
// failed: the record is in the log, and producing a failed record again (what
// FailPartitionOnProduceFailure's recovery does) would write it twice. Found
// by TestChaos (seed 5009, idempotent, short request timeouts): duplicates
// with the idempotent producer.
//
// Scenario, for the idempotent and the transactional producer: the broker
// handles r1 (it is in the log), and the client loses the response, by its
// read deadline or by the connection closing. kgo resends r1; the broker
// answers NOT_ENOUGH_REPLICAS four times (a real broker checks
// min.insync.replicas before its duplicate check, as kfake's fault does),
// past RecordRetries(2), then the resend reaches the duplicate check and
// succeeds at r1's offset.
//
// Patched franz-go ("kgo: keep retrying an idempotent batch whose request may
// have been written"): the lost response leaves the batch unsure, as a
// REQUEST_TIMED_OUT response does, so kgo retries past RecordRetries and r1
// succeeds, once. Pristine v1.22.3 (-tags pristine) fails r1 with
// NOT_ENOUGH_REPLICAS after the second resend, although it is in the log:
// this test fails there.
func TestLostResponse(t *testing.T) {
	t.Parallel()
	for _, test := range []struct {
		name string
		txn  bool
		kill bool // lose the response by closing the connection, not by the read deadline
	}{
		{"idempotent/read deadline", false, false},
		{"idempotent/connection closed", false, true},
		{"transactional/read deadline", true, false},
		{"transactional/connection closed", true, true},
	} {
		t.Run(test.name, func(t *testing.T) {
			t.Parallel()
			testLostResponse(t, test.txn, test.kill, kerr.NotEnoughReplicas, 4, false)
		})
	}
}

// testLostResponse loses r1's response, then has the broker answer the next
// count attempts with faultErr, checked before its duplicate check. If final,
// faultErr fails r1: its error must then say that r1 may have been written.
func testLostResponse(t *testing.T, txn, kill bool, faultErr *kerr.Error, count int, final bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, chaosTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	addr := c.ListenAddrs()[0]

	g := &gates{expired: make(chan struct{}, 1)}
	opts := []kgo.Opt{
		kgo.SeedBrokers(addr),
		kgo.Dialer(g.dial),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
		kgo.RecordRetries(2),
		kgo.MetadataMinAge(10 * time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 5 * time.Millisecond }),
	}
	if !kill {
		// The held read gives up at its deadline: ProduceRequestTimeout
		// plus RequestTimeoutOverhead, both at their minimum.
		opts = append(opts, kgo.ProduceRequestTimeout(100*time.Millisecond), kgo.RequestTimeoutOverhead(100*time.Millisecond))
	}
	if txn {
		opts = append(opts, kgo.TransactionalID("lost-response"), kgo.TransactionTimeout(20*time.Second))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// Warm up: producer ID, metadata, one record. A transactional run keeps
	// the warm-up and r1 in one transaction.
	if txn {
		if err := cl.BeginTransaction(); err != nil {
			t.Fatalf("begin: %v", err)
		}
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: chaosTopic, Value: []byte("warm-up")}).FirstErr(); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	hwm0 := c.PartitionInfo(chaosTopic, 0).HighWatermark

	// Hold the broker's responses, and observe the next produce request.
	release := g.hold(addr)
	defer release()
	seen := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Observe: true, Count: -1})
	type result struct {
		r   *kgo.Record
		err error
	}
	done := make(chan result, 1)
	cl.Produce(ctx, &kgo.Record{Topic: chaosTopic, Value: []byte("r1")}, func(r *kgo.Record, err error) { done <- result{r, err} })
	if err := seen.Wait(ctx, 1); err != nil {
		t.Fatalf("the produce request never reached the broker: %v", err)
	}
	seen.Remove()
	// PartitionInfo runs on the cluster's loop, after the request.
	if hwm := c.PartitionInfo(chaosTopic, 0).HighWatermark; hwm != hwm0+1 {
		t.Fatalf("setup: high watermark %d after the broker handled r1, want %d", hwm, hwm0+1)
	}

	// The next count attempts are answered faultErr (NOT_ENOUGH_REPLICAS
	// four times: past RecordRetries(2)).
	fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Err: faultErr, Count: count})
	defer fault.Remove()

	// Lose r1's response, then let responses through.
	if kill {
		if n := g.kill(addr); n == 0 {
			t.Fatal("setup: no connection to close")
		}
	} else {
		select {
		case <-g.expired:
		case <-ctx.Done():
			t.Fatal("the client never timed out reading the held response")
		}
	}
	release()

	var res result
	select {
	case res = <-done:
	case <-ctx.Done():
		t.Fatal("r1's promise was not called")
	}
	hwm := c.PartitionInfo(chaosTopic, 0).HighWatermark
	if final {
		if !isPossiblyWritten(res.err) || hwm != hwm0+1 {
			t.Fatalf("r1 failed with %v (high watermark %d, r1 at %d), want an error saying r1, which is in the log once, may have been written", res.err, hwm, hwm0)
		}
		return
	}
	if res.err != nil {
		t.Fatalf("r1 was reported failed (%v), yet the broker wrote it (high watermark %d, r1 at %d): producing it again would duplicate it", res.err, hwm, hwm0)
	}
	if hwm != hwm0+1 || res.r.Offset != hwm0 {
		t.Fatalf("r1 at offset %d, high watermark %d, want r1 once at %d (high watermark %d)", res.r.Offset, hwm, hwm0, hwm0+1)
	}
	if txn {
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	if hits := fault.Hits(); hits != count {
		t.Fatalf("setup: the broker answered %v %d times, want %d", faultErr, hits, count)
	}
}
