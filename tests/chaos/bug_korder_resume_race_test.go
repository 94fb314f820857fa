//go:build !pristine

package chaos_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
)

// TestBugKorderProduceResumeRace: found by TestChaos under -race (seed 1001,
// non-idempotent-1-inflight/korder-stop; any korder-stop or korder-retry run
// that stops its topic and resumes it while producers keep producing): the
// race detector reports
//
//	Write ... korder.(*Producer).Resume()   korder.go  ts.stopped = nil
//	Previous read ... korder.(*Producer).Produce()  korder.go
//	    promise(r, fmt.Errorf("%w: %w", ErrStopped, ts.stopped))
//
// Cause: on a stopped topic, Produce releases p.mu and only then reads
// ts.stopped to build the promise's error; Resume clears ts.stopped under
// p.mu. A Produce racing a Resume reads the field unsynchronized (an
// interface value: a torn read can yield a nil or mismatched cause, and the
// promise's error can read "...: %!w(<nil>)"). Produce is documented as safe
// for concurrent use, and calling Resume while producers run is the point of
// Resume. Fix: copy ts.stopped into a local before p.mu.Unlock().
//
// The test stops the topic (Stop policy, one INVALID_RECORD), then runs one
// Produce and one Resume concurrently with nothing ordering them, 50 times:
// whenever Produce takes the stopped path first (about half the time), -race
// reports the race (it reports a given race once per process, so use
// -count=1). Fixed in korder (the cause is copied under the lock); this is
// its regression test, run with -race as make test does.
func TestBugKorderProduceResumeRace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, chaosTopic))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p, err := korder.NewProducer([]kgo.Opt{
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerLinger(0),
	}, korder.WithPolicies(korder.Stop()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	produce := func(v string) error {
		done := make(chan error, 1)
		p.Produce(ctx, &kgo.Record{Topic: chaosTopic, Value: []byte(v)}, func(_ *kgo.Record, err error) { done <- err })
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
			t.Fatalf("%s: promise not called", v)
			return nil
		}
	}
	if err := produce("warm-up"); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	stoppedPaths := 0
	for i := range 50 {
		// Stop the topic: the next produce request fails.
		c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: chaosTopic, Err: kerr.InvalidRecord})
		if err := produce("poison"); !errors.Is(err, korder.ErrStopped) {
			t.Fatalf("round %d: poison record: %v, want ErrStopped", i, err)
		}
		// One Produce and one Resume, unordered.
		var (
			wg   sync.WaitGroup
			perr error
		)
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			<-start
			p.Produce(ctx, &kgo.Record{Topic: chaosTopic, Value: []byte("r")}, func(_ *kgo.Record, err error) {
				perr = err
				wg.Done()
			})
		}()
		go func() {
			defer wg.Done()
			<-start
			p.Resume(chaosTopic)
		}()
		close(start)
		wg.Wait()
		if perr != nil {
			stoppedPaths++
			if !errors.Is(perr, korder.ErrStopped) || strings.Contains(perr.Error(), "%!w") {
				t.Fatalf("round %d: a record produced while the topic was stopped failed with %q", i, perr)
			}
		}
		p.Resume(chaosTopic)
	}
	t.Logf("Produce took the stopped path %d times in 50 rounds", stoppedPaths)
}
