package example_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// hook hands failures over: kgo holds the partition's lock, so never block, produce or recover here.
type hook chan *kgo.ErrProducePartitionFailed

func (h hook) OnProducePartitionFailed(f *kgo.ErrProducePartitionFailed) {
	select {
	case h <- f:
	default: // full: size the channel for the failures you can have at once
	}
}

// Manual recovery: a failed partition's records are produced again, in order.
func Example_manualRecovery() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _ := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	defer c.Close()
	// The broker refuses the next produce request: the partition fails.
	c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "t", Err: kerr.InvalidRecord, Count: 1})

	failures := make(hook, 100)
	defer close(failures) // runs after cl.Close: no more hook calls
	cl, _ := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FailPartitionOnProduceFailure(), kgo.WithHooks(failures),
		kgo.ConsumeTopics("t")) // to read the result back
	defer cl.Close()
	var mu sync.Mutex
	back := map[*kgo.ErrProducePartitionFailed][]*kgo.Record{} // per failure, in promise (= produce) order
	promise := func(r *kgo.Record, err error) {
		var f *kgo.ErrProducePartitionFailed
		if errors.As(err, &f) { // failed with its partition (err wraps f), or rejected (err == f)
			mu.Lock()
			back[f] = append(back[f], r)
			mu.Unlock()
		} // err == nil: written; another error: it failed alone (Close, an abort)
	}
	go func() { // never recover from the hook or a promise: kgo would refuse
		for f := range failures {
			fmt.Printf("%s/%d failed: %v\n", f.Topic, f.Partition, f.Err)
			for {
				mu.Lock() // held across the call: a promise still adding to back[f] has not returned, so kgo refuses
				err := cl.RecoverProducePartition(f, promise, back[f]...)
				if !errors.Is(err, kgo.ErrRecoveryPending) {
					delete(back, f) // err == nil: recovered; else see RecoverProducePartition
					mu.Unlock()
					break
				}
				mu.Unlock()
				time.Sleep(time.Millisecond) // a promise of f is returning: try again
			}
		}
	}()

	for _, v := range []string{"a", "b", "c", "d", "e"} {
		cl.Produce(ctx, &kgo.Record{Topic: "t", Value: []byte(v)}, promise)
	}
	for n := 0; n < 5 && ctx.Err() == nil; {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { fmt.Println(r.Offset, string(r.Value)); n++ })
	}
	// Output:
	// t/0 failed: INVALID_RECORD: This record has failed the validation on the broker and hence been rejected.
	// 0 a
	// 1 b
	// 2 c
	// 3 d
	// 4 e
}
