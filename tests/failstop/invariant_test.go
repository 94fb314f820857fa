package failstop_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// This file builds with and without the pristine tag: against pristine
// franz-go v1.22.3 (go test -tags pristine, see the shim files)
// TestInvariantInvalidRecord must fail, because a record produced after the
// failure is written.

// failScenario is a way to make partition 0 of topic fail.
type failScenario struct {
	opts  []kgo.Opt // client options the scenario needs
	cause error     // what the failed records' errors wrap

	// arm makes partition 0 fail from now on and returns the fix, which
	// is called once the failure was processed, before the records after
	// it are produced.
	arm func(c *kfake.Cluster) (fix func())

	// waveRec builds the records produced while partition 0 fails; nil
	// means rec. The records produced after recovering are always built
	// with rec.
	waveRec func(seq int) *kgo.Record
}

const (
	nPrefix = 3 // written before the failure
	nWave   = 4 // produced into the failure: failed, or rejected if produced after it
	nAfter  = 3 // produced after the failure was processed (and fixed): rejected
	nTotal  = nPrefix + nWave + nAfter
)

// runInvariant checks, on partition 0, the fail-stop invariant: the log holds
// a gapless prefix of what was produced up to the first failure and nothing
// after it while the partition is failed, even once the cause is gone;
// records produced after the failure was processed are rejected; every
// failed and rejected record carries the failure the hook was passed;
// recovering with them, in order, writes the full sequence in order.
func runInvariant(t *testing.T, cfgOpts []kgo.Opt, sc failScenario) {
	ctx := testCtx(t)
	c := newCluster(t, 2, topic)
	h := newFailHook()
	opts := []kgo.Opt{kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(0)}
	opts = append(opts, cfgOpts...)
	opts = append(opts, sc.opts...)
	opts = append(opts, failStopOpts(h)...)
	cl := newClient(t, c, opts...)

	// The prefix, written before anything fails.
	produceOK(ctx, t, cl, recs(topic, 0, 0, nPrefix)...)

	// The wave, produced into the failure.
	fix := sc.arm(c)
	var waveRecs []*kgo.Record
	for seq := nPrefix; seq < nPrefix+nWave; seq++ {
		if sc.waveRec != nil {
			waveRecs = append(waveRecs, sc.waveRec(seq))
		} else {
			waveRecs = append(waveRecs, rec(topic, 0, seq))
		}
	}
	wave := await(ctx, t, produceAsync(ctx, cl, waveRecs...))
	f := checkWave(t, wave, sc.cause)
	if failStopAvailable {
		if ev := h.wait(ctx, t); ev != f {
			t.Fatalf("the hook was called with %v, the failed records carry %v: want one failure", ev, f)
		}
		checkEvent(t, f, topic, 0, sc.cause)
	}

	// The cause is gone, but the partition stays failed: records produced
	// now must be rejected, not written after the failed ones.
	fix()
	after := await(ctx, t, produceAsync(ctx, cl, recs(topic, 0, nPrefix+nWave, nTotal)...))
	for _, a := range after {
		if a.err == nil {
			t.Errorf("INVARIANT VIOLATED: record seq %s, produced after partition %d failed (%v) and before recovery, was written at offset %d",
				a.r.Value, a.r.Partition, wave[0].err, a.r.Offset)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	checkRejected(t, after, f, sc.cause)
	checkLog(ctx, t, c, topic, 0, seqRange(0, nPrefix))

	// Recover with the failed and rejected records, in order, once their
	// promises have returned: they are written.
	recoverOK(ctx, t, cl, f, recs(topic, 0, nPrefix, nTotal)...)
	checkLog(ctx, t, c, topic, 0, seqRange(0, nTotal))

	if evs := h.snapshot(); failStopAvailable && len(evs) != 1 {
		t.Fatalf("OnProducePartitionFailed called %d times (%v), want once", len(evs), evs)
	}
	// Partition 1 was never involved.
	if hwm := c.PartitionInfo(topic, 1).HighWatermark; hwm != 0 {
		t.Fatalf("partition 1 high watermark %d, want 0", hwm)
	}
}

// faultProduce fails produce requests to topic/0 with err: count requests
// (kfake.Fault.Count: 0 is one, -1 until removed); the fix removes it.
func faultProduce(err *kerr.Error, count int) func(c *kfake.Cluster) func() {
	return func(c *kfake.Cluster) func() {
		h := c.Fault(kfake.Fault{
			Keys:       []kmsg.Key{kmsg.Produce},
			Topic:      topic,
			Partitions: []int32{0},
			Err:        err,
			Count:      count,
		})
		return h.Remove
	}
}

// TestInvariantInvalidRecord: partition 0 fails with the non-retryable
// INVALID_RECORD; nothing produced after the failure is written until the
// partition is recovered, and then the full sequence is written in order.
// With the fault answering once, the idempotent producer may have pipelined
// requests behind the failed one that the broker would now accept; they must
// not be written either.
func TestInvariantInvalidRecord(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count int
	}{{"until-removed", -1}, {"once", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			eachConfig(t, func(t *testing.T, opts []kgo.Opt) {
				runInvariant(t, opts, failScenario{
					cause: kerr.InvalidRecord,
					arm:   faultProduce(kerr.InvalidRecord, tc.count),
				})
			})
		})
	}
}
