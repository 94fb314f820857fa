package korder_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// MaxHeldBytes, and RejectWhenHeldFull, bound what the Producer keeps for a
// failed partition (see TestMaxHeldDefaultPartitioner for MaxHeld): once
// the bound is reached, Produce blocks, or the records kgo rejects fail with
// ErrHeldFull; records of the healthy partition are written meanwhile. One
// record may be over: it was admitted before the one that filled the bound
// came back.
func TestMaxHeldBytes(t *testing.T) {
	for _, tc := range []struct {
		name   string
		opts   []korder.Opt
		reject bool
	}{
		{"block", []korder.Opt{korder.MaxHeldBytes(1000)}, false},
		{"reject", []korder.Opt{korder.MaxHeldBytes(1000), korder.RejectWhenHeldFull()}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := testCtx(t)
			c := newCluster(t, 2)
			fault := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: topic, Partitions: []int32{0}, Err: kerr.InvalidRecord, Count: -1})
			defer fault.Remove()
			unbuf := make(unbuffered, 1000)
			p := newProducer(t, c, []kgo.Opt{kgo.WithHooks(unbuf)},
				append(tc.opts, korder.WithPolicies(korder.Retry(1, time.Hour), korder.Stop()))...)
			pctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer cancel()
			ps := newPromises()
			maxBytes := int64(0)
			value := []byte(strings.Repeat("v", 100))
			for i := range 30 {
				p.Produce(pctx, &kgo.Record{Topic: topic, Partition: 0, Value: value}, ps.fn())
				if pctx.Err() != nil {
					continue
				}
				waitOn(ctx, t, unbuf, "kgo to finish the record")
				maxBytes = max(maxBytes, p.Stats().HeldBytes)
				if i == 20 && tc.reject {
					if err := produceSync(ctx, p, &kgo.Record{Topic: topic, Partition: 1, Value: value}); err != nil {
						t.Errorf("partition 1 while 0 is full: %v", err)
					}
				}
			}
			p.Close()
			ps.wait(ctx, t)
			var canceled, full int
			for _, err := range ps.check(t) {
				switch {
				case errors.Is(err, context.DeadlineExceeded):
					canceled++
				case errors.Is(err, korder.ErrHeldFull):
					full++
				}
			}
			if maxBytes > 1100 || (tc.reject && full == 0) || (!tc.reject && canceled == 0) {
				t.Fatalf("held up to %d bytes; %d blocked until their context ended, %d rejected", maxBytes, canceled, full)
			}
		})
	}
}

func TestMaxHeldBytesValidates(t *testing.T) {
	if _, err := korder.NewProducer([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, korder.MaxHeldBytes(0)); err == nil {
		t.Error("NewProducer accepted MaxHeldBytes(0)")
	}
}
