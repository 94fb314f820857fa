// Package exportfixture is a user's module in miniature: it produces with
// kgo.FailPartitionOnProduceFailure and with korder, from an export alone.
// It uses only the stable surface: korder.NewProducer, Produce, Flush,
// Close, and the kgo option.
package exportfixture

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/franz-go-ordered/franz-go-ordered/pkg/korder"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestResolvesToExport fails if franz-go or korder come from anywhere but the
// export beside this module.
func TestResolvesToExport(t *testing.T) {
	for mod, dir := range map[string]string{
		"github.com/twmb/franz-go":                     "franz-go",
		"github.com/franz-go-ordered/franz-go-ordered": "franz-go-ordered",
	} {
		out, err := exec.Command("go", "list", "-m", "-f", "{{with .Replace}}{{.Dir}}{{end}}", mod).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -m %s: %v: %s", mod, err, out)
		}
		want, _ := filepath.Abs(filepath.Join("..", "export", dir))
		if got := strings.TrimSpace(string(out)); got != want {
			t.Errorf("%s resolves to %q, want the export %q", mod, got, want)
		}
	}
}

// TestGoDocImportPath checks that go doc, run from this module, documents the
// patched kgo under its own import path (the export sits beside the module,
// not inside it; see the export's README).
func TestGoDocImportPath(t *testing.T) {
	out, err := exec.Command("go", "doc", "github.com/twmb/franz-go/pkg/kgo.FailPartitionOnProduceFailure").CombinedOutput()
	if err != nil {
		t.Fatalf("go doc: %v: %s", err, out)
	}
	if first, _, _ := strings.Cut(string(out), "\n"); first != `package kgo // import "github.com/twmb/franz-go/pkg/kgo"` {
		t.Errorf("go doc prints %q, want the import path github.com/twmb/franz-go/pkg/kgo", first)
	}
}

func cluster(t *testing.T) *kfake.Cluster {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "t"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func TestKgoOption(t *testing.T) {
	c := cluster(t)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FailPartitionOnProduceFailure())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

func TestKorderProducer(t *testing.T) {
	c := cluster(t)
	p, err := korder.NewProducer([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const n = 200
	errs := make(chan error, n)
	for i := range n {
		r := &kgo.Record{Topic: "t", Key: fmt.Appendf(nil, "k%d", i%10), Value: fmt.Appendf(nil, "%d", i)}
		p.Produce(ctx, r, func(_ *kgo.Record, err error) { errs <- err })
	}
	if err := p.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p.Close()
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("a record failed: %v", err)
		}
	}

	// Read back: every record, each key's records in produce order.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics("t"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	last := make(map[string]int)
	for got := 0; got < n; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of %d records: %v", got, n, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			got++
			var v int
			fmt.Sscan(string(r.Value), &v)
			if prev, ok := last[string(r.Key)]; ok && v < prev {
				t.Errorf("key %s: %d after %d", r.Key, v, prev)
			}
			last[string(r.Key)] = v
		})
	}
}
