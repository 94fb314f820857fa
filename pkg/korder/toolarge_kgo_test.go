package korder_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// A record too large for a batch, behind a record that a policy settles, is
// produced again with the rest of the partition's records (past the
// policies): it fails as kgo buffers it, and the records after it must not be
// written (with Stop, they fail with ErrStopped). Found by the chaos suite's
// Stop check (seed 1045, idempotent/korder-retry). Needs kgo's
// RecoverProducePartition to reject the records given after one that fails
// as it is buffered.
//
// Without that kgo change, a-0..a-2 are written after J failed. The test
// holds POISON's dead-letter copy at the broker so that J and a-0..a-2 are
// rejected behind POISON: once POISON is dead-lettered, they are produced
// again whole, past the policies, and J fails as kgo buffers them.
func TestTooLargeInARecoveryKeepsTheRestBehind(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1)
	poison(c)
	p := newProducer(t, c, []kgo.Opt{kgo.ProducerBatchMaxBytes(1 << 10)}, korder.WithPolicies(korder.DeadLetter(dlq), korder.Stop()))
	if err := produceSync(ctx, p, rec(0, "w", 0)); err != nil {
		t.Fatal(err)
	}
	// POISON fails its partition; its dead-letter copy is held at the
	// broker while J (too large) and a-0..a-2 are rejected behind it.
	held, release := holdProduceContaining(t, c, "POISON", 2)
	ps := newPromises()
	p.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Value: []byte("POISON")}, ps.fn())
	waitClosed(ctx, t, held, "the dead-letter copy of POISON")
	p.Produce(ctx, &kgo.Record{Topic: topic, Partition: 0, Key: []byte("j"), Value: []byte(strings.Repeat("J", 2<<10))}, ps.fn())
	for i := range 3 {
		p.Produce(ctx, rec(0, "a", i), ps.fn())
	}
	release()
	ps.wait(ctx, t)
	for r, err := range ps.check(t) {
		if string(r.Value) == "POISON" {
			if !errors.Is(err, korder.ErrDeadLettered) {
				t.Errorf("POISON: got %v, want ErrDeadLettered", err)
			}
			continue
		}
		if !errors.Is(err, korder.ErrStopped) {
			t.Errorf("%.8s: got %v, want ErrStopped", r.Value, err)
		}
	}
	expectLog(ctx, t, c, topic, 0, []string{"w-0"})
}
