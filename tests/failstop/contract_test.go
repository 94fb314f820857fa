//go:build !pristine

package failstop_test

import (
	"bytes"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The contract of FailPartitionOnProduceFailure on its less travelled
// paths: who calls the hook, what a purge drops, records that wait for
// metadata.

// goid returns the current goroutine's id, from its stack header.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	id, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return id
}

// TestHookOnCausingGoroutine: a record too large for a batch fails inside
// its Produce; the hook runs on that goroutine before Produce returns, and
// never on another goroutine that is producing at the same time (which
// could deadlock an application whose hook takes a lock that goroutine
// holds around its Produce).
func TestHookOnCausingGoroutine(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 4, topic, "other")
	h := newFailHook()
	var (
		failing  atomic.Uint64 // the goroutine producing the failing record
		wrong    atomic.Int64  // hooks on any other goroutine
		hookRuns atomic.Int64
	)
	h.onFail = func(*failure) {
		hookRuns.Add(1)
		if goid() != failing.Load() {
			wrong.Add(1)
		}
	}
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchMaxBytes(512),
	}, failStopOpts(h)...)...)
	produceOK(ctx, t, cl, rec(topic, 0, 0), rec("other", 0, 0)) // metadata

	// Another goroutine produces as fast as it can to another topic.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	for g := range 2 {
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				cl.TryProduce(ctx, rec("other", int32(g), i), func(*kgo.Record, error) {})
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()

	const n = 200
	for i := range n {
		failing.Store(goid())
		big := rec(topic, int32(i%4), i)
		big.Headers = []kgo.RecordHeader{{Key: "pad", Value: make([]byte, 1024)}}
		done := make(chan error, 1)
		cl.Produce(ctx, big, func(_ *kgo.Record, err error) { done <- err })
		if got := hookRuns.Load(); got != int64(i+1) {
			t.Fatalf("round %d: %d hooks ran before Produce returned, want %d", i, got, i+1)
		}
		f := h.wait(ctx, t)
		if err := (<-done); !errors.Is(err, kerr.MessageTooLarge) || failureOf(err) != f {
			t.Fatalf("round %d: too large record got %v, want MESSAGE_TOO_LARGE carrying the hook's failure", i, err)
		}
		// Its promise ran: the record is dropped, the partition recovered.
		if err := recoverWhenReturned(ctx, t, cl, f, nil); err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	if w := wrong.Load(); w != 0 {
		t.Fatalf("%d of %d hooks ran on a goroutine that did not cause the failure", w, n)
	}
}

// TestPurgeDropsTopicFailure: purging a topic drops its failed state, a
// partition's or the topic's own (-1), so producing to it again works.
func TestPurgeDropsTopicFailure(t *testing.T) {
	for _, purge := range []struct {
		name string
		fn   func(*kgo.Client, ...string)
	}{
		{"producing", (*kgo.Client).PurgeTopicsFromProducing},
		{"client", (*kgo.Client).PurgeTopicsFromClient},
	} {
		t.Run(purge.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 1, topic)
			h := newFailHook()
			cl := newClient(t, c, append([]kgo.Opt{kgo.MaxBufferedBytes(512)}, failStopOpts(h)...)...)

			// A keyed record too large for the buffer fails the topic
			// before its metadata is known, its partition after.
			for i, failed := range []int32{-1, 0} {
				big := rec(topic, 0, 2*i)
				big.Key, big.Value = []byte("k"), make([]byte, 1024)
				await(ctx, t, produceAsync(ctx, cl, big))
				checkEvent(t, h.wait(ctx, t), topic, failed, kerr.MessageTooLarge)

				purge.fn(cl, topic)
				r := rec(topic, 0, 2*i+1)
				r.Key = []byte("k")
				produceOK(ctx, t, cl, r)
			}
		})
	}
}

// TestBeforeMetadataRecordsWritten: records waiting for their topic's first
// metadata were produced before a later record that fails in Produce; the
// topic fails (-1), but they are written, and they are promised as written.
// Recovering the topic partitions the given records first.
func TestBeforeMetadataRecordsWritten(t *testing.T) {
	ctx := testCtx(t)
	c := newCluster(t, 1, topic)
	h := newFailHook()
	cl := newClient(t, c, append([]kgo.Opt{
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.MaxBufferedBytes(2048),
	}, failStopOpts(h)...)...)

	// Hold metadata until the failing record is produced.
	held, release := holdMetadata(t, c)
	early := produceAsync(ctx, cl, recs(topic, 0, 0, 5)...)
	select {
	case <-held:
	case <-ctx.Done():
		t.Fatal("no metadata request")
	}
	big := rec(topic, 0, 5)
	big.Value = make([]byte, 4096)
	failed := await(ctx, t, produceAsync(ctx, cl, big))
	f := h.wait(ctx, t)
	checkEvent(t, f, topic, -1, kerr.MessageTooLarge)
	if got := checkWave(t, failed, kerr.MessageTooLarge); got != f {
		t.Fatalf("the failed record carries %v, want the hook's failure %v", got, f)
	}
	later := produceAsync(ctx, cl, recs(topic, 0, 6, 8)...)
	release()

	for i, r := range await(ctx, t, early) {
		if r.err != nil {
			t.Fatalf("seq %d, produced before the failure: %v, want written", i, r.err)
		}
	}
	checkRejected(t, await(ctx, t, later), f, kerr.MessageTooLarge)
	checkLog(ctx, t, c, topic, 0, seqRange(0, 5))
	recoverOK(ctx, t, cl, f, recs(topic, 0, 5, 8)...)
	checkLog(ctx, t, c, topic, 0, seqRange(0, 8))
	checkHookOnce(t, h)
}

// holdMetadata holds the first metadata request that asks for topic until
// release is called (at the latest, at cleanup); held is closed when it
// arrives.
func holdMetadata(t *testing.T, c *kfake.Cluster) (held <-chan struct{}, release func()) {
	t.Helper()
	return holdFirst(t, c, kmsg.Metadata, func(req kmsg.Request) bool {
		for _, rt := range req.(*kmsg.MetadataRequest).Topics {
			if rt.Topic != nil && *rt.Topic == topic {
				return true
			}
		}
		return false
	})
}
