package consumer

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestUsesPatchedTree fails if this module resolves franz-go from the module
// proxy instead of through the replace directive. The version-less replace
// also covers kfake's own franz-go requirement (v1.21.7), which is why kfake
// compiles at all here.
func TestUsesPatchedTree(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{with .Replace}}{{.Path}} {{.Dir}}{{end}}", "github.com/twmb/franz-go").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 3 || f[0] != "v1.22.3" || f[1] != "../../upstream/franz-go" {
		t.Fatalf("franz-go resolves to %q, want v1.22.3 replaced by ../../upstream/franz-go", out)
	}
	if _, err := os.Stat(filepath.Join(f[2], "pkg", "kgo", "producer.go")); err != nil {
		t.Fatalf("the replaced directory is not a franz-go tree: %v", err)
	}
}

func TestProduceThroughPatchedTree(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ProduceOne(ctx, cl, "t", []byte("v")); err != nil {
		t.Fatalf("produce: %v", err)
	}
	if hw := c.PartitionInfo("t", 0).HighWatermark; hw != 1 {
		t.Fatalf("high watermark %d, want 1", hw)
	}
}
