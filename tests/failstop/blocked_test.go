//go:build !pristine

package failstop_test

import (
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A Produce that blocked for buffer space before its topic failed (partition
// -1) is rejected once it has space: it was produced after the record that
// failed the topic, so writing it would put it ahead of that record's
// recovery. With the topic check only where Produce starts, it went on to
// wait for the topic again, and failed with the topic's own error later.
func TestBlockedProduceRejectedByTopicFailure(t *testing.T) {
	const u = "unknown"
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	h := newFailHook()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.ProducerLinger(0), kgo.MaxBufferedRecords(1),
		kgo.MetadataMinAge(10 * time.Millisecond), kgo.UnknownTopicRetries(3),
	}, failStopOpts(h)...)...)

	first := make(chan error, 1)
	cl.Produce(ctx, &kgo.Record{Topic: u, Key: []byte("k"), Value: []byte("first")}, func(_ *kgo.Record, err error) { first <- err })
	// The buffer is full: this Produce blocks until first fails, after
	// UnknownTopicRetries metadata requests.
	second := make(chan error, 1)
	go cl.Produce(ctx, &kgo.Record{Topic: u, Key: []byte("k"), Value: []byte("second")}, func(_ *kgo.Record, err error) { second <- err })

	f := h.wait(ctx, t)
	checkEvent(t, f, u, -1, kerr.UnknownTopicOrPartition)
	for _, ch := range []chan error{first, second} {
		select {
		case err := <-ch:
			if ch == first && (!errors.Is(err, kerr.UnknownTopicOrPartition) || failureOf(err) != f || isRejected(err)) {
				t.Fatalf("first record: %v, want UNKNOWN_TOPIC_OR_PARTITION, carrying the topic's failure", err)
			}
			if ch == second && err != error(f) {
				t.Fatalf("record blocked before the topic failed: %v, want a rejection with the topic's failure", err)
			}
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
	}
	if err := recoverWhenReturned(ctx, t, cl, f, nil); err != nil {
		t.Fatalf("recovering the topic once both promises returned: %v", err)
	}
}
